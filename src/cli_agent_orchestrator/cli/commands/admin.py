"""Housekeeping: `cao shutdown`, `cao init`, `cao install`, `cao mcp-server`."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import click

from ...errors import CaoError
from ...models import SAFE_NAME_RE
from ...profiles import builtin_dir, parse_profile
from ...settings import Settings
from .common import client, json_option, print_json, session_path


@click.command()
@click.option("--session", "session_name", default=None, help="Delete this session.")
@click.option("--all", "all_sessions", is_flag=True, help="Delete every cao session.")
@json_option
def shutdown(session_name: str | None, all_sessions: bool, as_json: bool) -> None:
    """Delete one session (--session) or all of them (--all).

    --json prints one object per session: the server's answer, or an `error`.
    """
    if bool(session_name) == all_sessions:
        raise click.UsageError("pass exactly one of --session NAME or --all")
    failed = False
    answers: list[dict] = []
    with client() as api:
        names = [session_name] if session_name else [s["name"] for s in api.get("/sessions")]
        if not names and not as_json:
            click.echo("No sessions.")
        for name in names:
            try:
                result = api.delete(session_path(name))
            except click.ClickException as exc:
                if session_name:
                    raise
                # Keep going: one stuck session must not keep the others alive.
                answers.append({"session": name, "error": exc.message})
                if not as_json:
                    click.echo(f"Error: session {name}: {exc.message}", err=True)
                failed = True
                continue
            answers.append({"session": name, **result})
            if as_json:
                continue
            for problem in result.get("errors") or []:
                click.echo(f"Warning: {problem}", err=True)
            click.echo(f"Deleted session {', '.join(result.get('deleted') or [name])}.")
    if as_json:
        print_json(answers)
    if failed:
        raise click.exceptions.Exit(1)


@click.command()
def init() -> None:
    """Create the cao home directory layout."""
    settings = Settings.from_env()
    settings.ensure_dirs()
    click.echo(f"cao home: {settings.home_dir}")
    for label, path in (
        ("database", settings.db_path.parent),
        ("agent store", settings.agent_store_dir),
        ("logs", settings.logs_dir),
        ("workflows", settings.workflows_dir),
    ):
        click.echo(f"  {label + ':':13}{path}")


def _profile_source(spec: str) -> Path:
    """A path to a local file, else the name of a built-in profile."""
    path = Path(spec).expanduser()
    if path.is_file():
        return path
    if path.suffix == ".md" or os.sep in spec:
        raise click.ClickException(f"profile file {spec!r} not found")
    if SAFE_NAME_RE.match(spec) and (builtin_dir() / f"{spec}.md").is_file():
        return builtin_dir() / f"{spec}.md"
    known = ", ".join(sorted(p.stem for p in builtin_dir().glob("*.md")))
    raise click.ClickException(f"{spec!r} is neither a profile file nor a built-in profile (built-ins: {known})")


def _write_atomic(target: Path, text: str) -> None:
    # A half-written profile would be picked up by the next launch; rename is atomic.
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@click.command()
@click.argument("profile")
def install(profile: str) -> None:
    """Install agent PROFILE (a .md file or a built-in name) into the local agent store."""
    source = _profile_source(profile)
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise click.ClickException(f"cannot read {source}: {exc}") from None
    try:
        parsed = parse_profile(text, source.stem, "local")
    except CaoError as exc:
        raise click.ClickException(str(exc)) from None
    if not SAFE_NAME_RE.match(parsed.name):
        raise click.ClickException(
            f"invalid profile name {parsed.name!r}: use 1-64 of [A-Za-z0-9_-], not starting with '-'"
        )
    settings = Settings.from_env()
    settings.ensure_dirs()
    target = settings.agent_store_dir / f"{parsed.name}.md"
    replaced = target.exists()
    _write_atomic(target, text)
    click.echo(f"{'Replaced' if replaced else 'Installed'} profile {parsed.name!r} at {target}")
    if parsed.description:
        click.echo(f"  {parsed.description}")
    click.echo(f"Launch it with: cao launch --agents {parsed.name}")


@click.command("mcp-server")
def mcp_server() -> None:
    """Run the cao MCP server on stdio (what agent CLIs start)."""
    # Imported here: the MCP stack is heavy and only this command needs it.
    from ...mcp_server.server import main as serve

    serve()
