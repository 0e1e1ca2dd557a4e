"""`cao skills add|list|show|remove`: the skills agents load with `load_skill`.

Like `cao install`, it works here, on the cao home's files: the CLI and cao-server share the
home, it needs no running server, and a local folder is never sent over HTTP. Agents see a
new or removed skill from their next launch (the catalogue is part of the system prompt);
`load_skill` reads the skill folder at each call.
"""

from __future__ import annotations

import click

from ...errors import CaoError
from ...profiles.fetch import allowed_hosts
from ...profiles.loading import load_profile
from ...settings import Settings
from ...skills.catalogue import allowed_skills, skill_document
from ...skills.install import add_skill
from ...skills.store import find_skill, list_skills, remove_skill
from .common import json_option, print_fields, print_json, print_table


class _Failed(click.ClickException):
    """A cao error, shown as `Error: ...` with exit code 1."""


def _home():
    return Settings.from_env().home_dir


@click.group("skills")
def skills() -> None:
    """Skills: folders with a SKILL.md (Claude Code's format) that agents load with load_skill.

    cao's own store is <home>/skills/NAME/; settings.json's "skills_dirs" lists more
    directories of skill folders, read in place (e.g. ["~/.claude/skills"]).
    """


@skills.command("add")
@click.argument("source")
@click.option("--force", is_flag=True, help="Replace a skill of the same name.")
@json_option
def add(source: str, force: bool, as_json: bool) -> None:
    """Add the skill at SOURCE: a local folder holding SKILL.md (copied in with its files), or
    the https URL of a SKILL.md on a host of CAO_PROFILE_ALLOWED_HOSTS (default github.com,
    raw.githubusercontent.com). Its name is SKILL.md's frontmatter `name`, else the folder's."""
    settings = Settings.from_env()
    try:
        result = add_skill(
            source,
            settings.home_dir,
            allowed_hosts(settings.profile_allowed_hosts),
            allow_files=True,
            replace=force,
            fetch_timeout=settings.profile_fetch_timeout,
        )
    except CaoError as exc:
        raise _Failed(str(exc)) from None
    if as_json:
        print_json(result.as_dict())
        return
    verb = "Replaced" if result.replaced else "Added"
    click.echo(f"{verb} skill {result.name!r} ({result.files} file(s)) in {result.directory}")


@skills.command("list")
@click.option("--profile", default=None, help="Only the skills an agent of this profile sees (its `skills:`).")
@json_option
def list_command(profile: str | None, as_json: bool) -> None:
    """List the skills by name: where each is, and its description."""
    home = _home()
    try:
        entries = list_skills(home)
        if profile is not None:
            wanted = load_profile(home, profile).skills
            entries = [e for e in entries if e.skill is not None and allowed_skills(e.name, wanted)]
    except CaoError as exc:
        raise _Failed(str(exc)) from None
    rows = [e.as_dict() for e in entries]
    if as_json:
        print_json(rows)
        return
    for row in rows:
        row["about"] = row["description"] if row["loadable"] else f"UNREADABLE: {row['error']}"
    print_table(
        rows,
        [("name", "NAME"), ("source", "SOURCE"), ("directory", "DIRECTORY"), ("about", "DESCRIPTION")],
        empty="No skills. Add one with `cao skills add PATH|URL`.",
    )


@skills.command("show")
@click.argument("name")
@json_option
def show(name: str, as_json: bool) -> None:
    """Show skill NAME as load_skill gives it to an agent."""
    try:
        doc = skill_document(find_skill(_home(), name))
    except CaoError as exc:
        raise _Failed(str(exc)) from None
    if as_json:
        print_json(doc)
        return
    print_fields([("Name", doc["name"]), ("Description", doc["description"]), ("Directory", doc["directory"])])
    click.echo("\n" + doc["text"])


@skills.command("remove")
@click.argument("name")
@json_option
def remove(name: str, as_json: bool) -> None:
    """Delete skill NAME from cao's store (never from a skills_dirs directory)."""
    try:
        folder = remove_skill(_home(), name)
    except CaoError as exc:
        raise _Failed(str(exc)) from None
    if as_json:
        print_json({"removed": name, "directory": str(folder)})
        return
    click.echo(f"Removed skill {name!r} ({folder})")
