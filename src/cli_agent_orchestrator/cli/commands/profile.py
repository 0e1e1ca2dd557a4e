"""`cao profile list|show|validate`: the agent profiles a user has.

`list` and `show` ask cao-server (what it would start); `validate` reads the file locally,
so a profile can be checked before it is installed and without a running server.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

import click

from ...errors import CaoError
from ...models import SAFE_NAME_RE
from ...profiles.catalog import find_entry
from ...profiles.checks import check_profile_text, is_valid
from ...profiles.env_file import read_env_values
from ...providers.registry import provider_names
from ...settings import Settings
from .common import client, json_option, print_fields, print_json, print_table


@click.group()
def profile() -> None:
    """List, show and validate agent profiles."""


@profile.command("list")
@json_option
def list_profiles(as_json: bool) -> None:
    """Every profile by name, with where it comes from (local, custom, built-in)."""
    with client() as api:
        rows = api.get("/agents/profiles")
    if as_json:
        print_json(rows)
        return
    for row in rows:
        row["status"] = "ok" if row["loadable"] else "invalid"
        if not row["loadable"]:
            row["description"] = row.get("error", "")
        if row.get("duplicated_in"):
            row["hides"] = [d["source"] for d in row["duplicated_in"]]
    columns = [("name", "NAME"), ("source", "SOURCE"), ("provider", "PROVIDER"), ("hides", "HIDES")]
    print_table(rows, [*columns, ("status", "STATUS"), ("description", "DESCRIPTION")], "No profiles.")


@profile.command()
@click.argument("name")
@json_option
def show(name: str, as_json: bool) -> None:
    """Show profile NAME as written (variables are not filled in) and its system prompt."""
    if not SAFE_NAME_RE.match(name):
        raise click.ClickException(f"invalid profile name {name!r}: use 1-64 of [A-Za-z0-9_-]")
    with client() as api:
        data = api.get(f"/agents/profiles/{quote(name, safe='')}")
    if as_json:
        print_json(data)
        return
    print_fields(
        [
            ("Name", data["name"]),
            ("Source", data["source"]),
            ("Path", data["path"]),
            ("Description", data.get("description")),
            ("Provider", data.get("provider")),
            ("Model", data.get("model")),
            ("Role", data.get("role")),
            ("Allowed tools", data.get("allowed_tools")),
            ("MCP servers", sorted(data.get("mcp_servers") or {})),
            ("Variables", data.get("variables")),
            ("Hides", [f"{d['source']} {d['path']}" for d in data.get("duplicated_in") or []]),
        ]
    )
    click.echo("\nSystem prompt:\n" + (data.get("system_prompt") or "(empty)"))


def _target_file(target: str, home: Path) -> Path:
    """TARGET as a file path when it is one (or looks like one), else the file NAME resolves to."""
    path = Path(target).expanduser()
    if path.is_file():
        return path
    if path.suffix == ".md" or os.sep in target:
        raise click.ClickException(f"profile file {target!r} not found")
    try:
        return find_entry(home, target).winner.path
    except CaoError as exc:
        raise click.ClickException(str(exc)) from None


@profile.command()
@click.argument("target")
@json_option
def validate(target: str, as_json: bool) -> None:
    """Check a profile (NAME, or a FILE path) and print its problems; exit 1 on any error."""
    home = Settings.from_env().home_dir
    path = _target_file(target, home)
    try:
        text = path.read_text(encoding="utf-8")
        known = {*read_env_values(home), *os.environ}
        problems = check_profile_text(text, path.stem, provider_names(), known)
    except (OSError, UnicodeDecodeError) as exc:
        raise click.ClickException(f"cannot read {path}: {exc}") from None
    except CaoError as exc:
        raise click.ClickException(str(exc)) from None
    valid = is_valid(problems)
    if as_json:
        print_json({"valid": valid, "path": str(path), "messages": [p.as_dict() for p in problems]})
    else:
        for problem in problems:
            click.echo(f"{problem.severity}: {problem.message}", err=problem.severity == "error")
        click.echo(f"{path}: {'valid' if valid else 'invalid'}")
    if not valid:
        raise click.exceptions.Exit(1)
