"""`cao memory ...`: the user's view of what agents remember — list, search, show, add, forget,
export and import (JSON lines, round-tripped exactly) and stats. Everything goes over
cao-server's HTTP API; the user reads every scope. `--scope project` without `--scope-id` means
this directory's project (its git repository, or CAO_PROJECT_ID), as it does for an agent here.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from ...memory.scopes import SCOPES, SORTS, TYPES, project_of
from ...settings import Settings
from .common import client, json_option, print_fields, print_json, print_table

IMPORT_BATCH = 1000  # lines per request: each batch is imported all or nothing
PREVIEW_CHARS = 60

scope_option = click.option("--scope", type=click.Choice(SCOPES), default=None, help="Only this scope.")
scope_id_option = click.option(
    "--scope-id", default=None, help="Only this scope id (a project directory, a session name, a profile)."
)
type_option = click.option("--type", "memory_type", type=click.Choice(TYPES), default=None, help="Only this type.")
limit_option = click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)


def _scope_id(scope: str, scope_id: str | None) -> str | None:
    """The id a scope means here: the one given, or this directory's project; None for global."""
    if scope == "global" or scope_id is not None:
        return scope_id
    if scope == "project":
        return project_of(os.getcwd(), Settings.from_env().project_id)
    raise click.UsageError(
        f"--scope {scope} needs --scope-id (the {'session name' if scope == 'session' else 'profile'})"
    )


def _show_list(memories: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print_json(memories)
        return
    for m in memories:
        first = m["content"].splitlines()[0] if m["content"] else ""
        m["preview"] = first[:PREVIEW_CHARS] + ("…" if len(first) > PREVIEW_CHARS or "\n" in m["content"] else "")
        m["where"] = m["scope"] + (f":{m['scope_id']}" if m["scope_id"] else "")
    print_table(
        memories,
        [
            ("id", "ID"),
            ("key", "KEY"),
            ("where", "SCOPE"),
            ("memory_type", "TYPE"),
            ("updated_at", "UPDATED"),
            ("recall_count", "RECALLS"),
            ("preview", "CONTENT"),
        ],
        empty="No memories.",
    )


def _find(query: str | None, scope: str | None, scope_id: str | None, memory_type: str | None, limit: int, sort: str):
    params = {
        "query": query,
        "scope": scope,
        "scope_id": scope_id,
        "memory_type": memory_type,
        "limit": limit,
        "sort_by": sort,
    }
    with client() as api:
        return api.get("/memories", params=params)


@click.command("list")
@scope_option
@scope_id_option
@type_option
@limit_option
@click.option("--sort", type=click.Choice(SORTS), default="recency", show_default=True)
@json_option
def list_memories(
    scope: str | None, scope_id: str | None, memory_type: str | None, limit: int, sort: str, as_json: bool
) -> None:
    """List memories, newest first (every scope unless one is given)."""
    _show_list(_find(None, scope, scope_id, memory_type, limit, sort), as_json)


@click.command("search")
@click.argument("query")
@scope_option
@scope_id_option
@type_option
@limit_option
@click.option("--sort", type=click.Choice(SORTS), default="score", show_default=True)
@json_option
def search(
    query: str, scope: str | None, scope_id: str | None, memory_type: str | None, limit: int, sort: str, as_json: bool
) -> None:
    """Search memories with the database's full-text search, most relevant first."""
    _show_list(_find(query, scope, scope_id, memory_type, limit, sort), as_json)


@click.command("show")
@click.argument("memory_id", type=int)
@json_option
def show(memory_id: int, as_json: bool) -> None:
    """Show one memory with all its dated entries."""
    with client() as api:
        m = api.get(f"/memories/{memory_id}")
    if as_json:
        print_json(m)
        return
    print_fields(
        [
            ("id", m["id"]),
            ("key", m["key"]),
            ("scope", m["scope"] + (f" ({m['scope_id']})" if m["scope_id"] else "")),
            ("type", m["memory_type"]),
            ("tags", ", ".join(m["tags"])),
            ("created", m["created_at"]),
            ("updated", m["updated_at"]),
            ("written by", m["terminal_id"] and f"{m['terminal_id']} ({m['agent_profile']})" or "user"),
            ("recalled", m["recall_count"]),
        ]
    )
    for entry in m["entries"]:
        click.echo(f"\n[{entry['at']}]{' ' + entry['terminal_id'] if entry.get('terminal_id') else ''}")
        click.echo(entry["text"])


@click.command("add")
@click.argument("content")
@click.option("--scope", type=click.Choice(SCOPES), default="project", show_default=True)
@scope_id_option
@click.option("--type", "memory_type", type=click.Choice(TYPES), default="project", show_default=True)
@click.option("--key", default=None, help="The same key and scope appends a dated entry (default: from the content).")
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable).")
@json_option
def add(
    content: str,
    scope: str,
    scope_id: str | None,
    memory_type: str,
    key: str | None,
    tags: tuple[str, ...],
    as_json: bool,
) -> None:
    """Remember CONTENT (secrets in it are redacted)."""
    body = {
        "content": content,
        "scope": scope,
        "scope_id": _scope_id(scope, scope_id),
        "memory_type": memory_type,
        "key": key,
        "tags": list(tags) or None,
    }
    with client() as api:
        stored = api.post("/memories", json=body)
    if as_json:
        print_json(stored)
        return
    m = stored["memory"]
    verb = "Stored" if stored["created"] else f"Added entry {len(m['entries'])} to"
    click.echo(f"{verb} memory {m['id']} ({m['key']}, {m['scope']}).")
    if stored["redacted"]:
        click.echo(f"Redacted: {', '.join(stored['redacted'])}.")


@click.command("forget")
@click.argument("memory_id", type=int, required=False)
@click.option("--key", default=None, help="Forget by key (with --scope, --scope-id) instead of by id.")
@click.option("--scope", type=click.Choice(SCOPES), default="project", show_default=True)
@scope_id_option
@json_option
def forget(memory_id: int | None, key: str | None, scope: str, scope_id: str | None, as_json: bool) -> None:
    """Delete a memory: by MEMORY_ID, or by --key in a scope."""
    if (memory_id is None) == (key is None):
        raise click.UsageError("give either MEMORY_ID or --key")
    with client() as api:
        if memory_id is not None:
            gone = api.delete(f"/memories/{memory_id}")
        else:
            gone = api.delete("/memories", params={"key": key, "scope": scope, "scope_id": _scope_id(scope, scope_id)})
    if as_json:
        print_json(gone)
        return
    click.echo(f"Forgot memory {gone['forgotten']['id']} ({gone['forgotten']['key']}).")


@click.command("export")
@click.argument("output", type=click.File("w", encoding="utf-8"), default="-")
@json_option
def export(output: Any, as_json: bool) -> None:
    """Write every memory as JSON lines to OUTPUT (default: stdout); `cao memory import` takes them
    back. The output is JSON either way (`--json` is accepted for scripts that always pass it)."""
    with client() as api:
        text = api.get("/memories/export", timeout=600)
    if isinstance(text, dict):  # a single line parses as JSON on its way in
        text = json.dumps(text, ensure_ascii=False) + "\n"
    output.write(text)


@click.command("import")
@click.argument("source", type=click.File("r", encoding="utf-8"), default="-")
@json_option
def import_memories(source: Any, as_json: bool) -> None:
    """Import JSON lines from SOURCE (a file, or - for stdin), as `cao memory export` writes them:
    each replaces the memory of its scope and key. Sent in batches of 1000 lines, each all or nothing."""
    lines = [line for line in source.read().splitlines() if line.strip()]
    total = {"imported": 0, "replaced": 0}
    with client() as api:
        for start in range(0, len(lines), IMPORT_BATCH):
            batch = "\n".join(lines[start : start + IMPORT_BATCH])
            try:
                done = api.post("/memories/import", json={"jsonl": batch}, timeout=600)
            except click.ClickException as exc:
                if not start:
                    raise
                raise click.ClickException(f"{exc.message} (the first {start} lines were imported)") from None
            total["imported"] += done["imported"]
            total["replaced"] += done["replaced"]
    if as_json:
        print_json(total)
        return
    click.echo(f"Imported {total['imported']} memories ({total['replaced']} replaced existing ones).", file=sys.stdout)


@click.command("stats")
@json_option
def stats(as_json: bool) -> None:
    """How many memories, by scope and type, and how often they were recalled."""
    with client() as api:
        s = api.get("/memories/stats")
    if as_json:
        print_json(s)
        return
    print_fields(
        [
            ("memories", s["total"]),
            ("recalls", s["recalls"]),
            ("by scope", ", ".join(f"{k} {v}" for k, v in sorted(s["by_scope"].items())) or "-"),
            ("by type", ", ".join(f"{k} {v}" for k, v in sorted(s["by_type"].items())) or "-"),
            ("oldest", s["oldest"]),
            ("newest", s["newest"]),
            ("engine", s["engine"]),
        ]
    )


@click.group("memory")
def memory() -> None:
    """What agents remember: list, search, show, add, forget, export, import, stats."""


for command in (list_memories, search, show, add, forget, export, import_memories, stats):
    memory.add_command(command)
