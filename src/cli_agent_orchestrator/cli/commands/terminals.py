"""`cao terminal ...`: inspect, drive, delete and restore single agent terminals, and read or set
what workers know of each other (description, group, metadata, siblings)."""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any

import click

from .common import client, exec_attach, json_option, print_fields, print_json, print_table, terminal_path
from .sessions import TERMINAL_COLUMNS, host_shown, terminal_rows


@click.group()
def terminal() -> None:
    """Terminals: one agent CLI in one tmux window, addressed by an 8-hex-digit id."""


@terminal.command("list")
@json_option
def list_terminals(as_json: bool) -> None:
    """List all terminals."""
    with client() as api:
        terms = api.get("/terminals")
    if as_json:
        print_json(terms)
        return
    columns = [("id", "ID"), ("session_name", "SESSION"), *TERMINAL_COLUMNS[1:]]
    print_table(terminal_rows(terms), columns, empty="No terminals.")


@terminal.command("status")
@click.argument("terminal_id", metavar="ID")
@json_option
def status(terminal_id: str, as_json: bool) -> None:
    """Show terminal ID and its status."""
    with client() as api:
        term = api.get(terminal_path(terminal_id))
    if as_json:
        print_json(term)
        return
    state = term["status"] + (f" ({term['status_reason']})" if term.get("status_reason") else "")
    print_fields(
        [
            ("Terminal", term["id"]),
            ("Session", term["session_name"]),
            ("Window", term["name"]),
            ("Profile", term["agent_profile"]),
            ("Provider", term["provider"]),
            ("Host", host_shown(term)),
            ("Model", term.get("model")),
            ("Status", state),
            ("Working directory", term["working_directory"]),
            ("Caller", term.get("caller_id")),
            ("Description", term.get("description")),
            ("Group", "/".join(term.get("group") or []) or None),
            ("Created", term.get("created_at")),
            ("Last active", term.get("last_active")),
        ]
    )


@terminal.command("output")
@click.argument("terminal_id", metavar="ID")
@click.option(
    "--mode",
    type=click.Choice(["full", "last"]),
    default="full",
    show_default=True,
    help="full: the whole scrollback; last: the agent's last reply.",
)
@json_option
def output(terminal_id: str, mode: str, as_json: bool) -> None:
    """Print the output of terminal ID."""
    with client() as api:
        data = api.get(terminal_path(terminal_id, "/output"), params={"mode": mode})
    if as_json:
        print_json(data)
        return
    click.echo(data["output"].rstrip())  # the pane's unused rows are blank lines


@terminal.command("send")
@click.argument("terminal_id", metavar="ID")
@click.argument("message")
@json_option
def send(terminal_id: str, message: str, as_json: bool) -> None:
    """Type MESSAGE into terminal ID and submit it (MESSAGE - reads stdin)."""
    if message == "-":
        # A pipe's final newline is not part of the message; Enter is sent anyway.
        message = sys.stdin.read().rstrip("\n")
    if not message:
        raise click.ClickException("message is empty")
    with client() as api:
        result = api.post(terminal_path(terminal_id, "/input"), json={"message": message})
    if as_json:
        print_json(result)
        return
    click.echo(f"Sent to {terminal_id} (turn {result.get('turn', '?')}).")


@terminal.command("key")
@click.argument("terminal_id", metavar="ID")
@click.argument("key")
@json_option
def key(terminal_id: str, key: str, as_json: bool) -> None:
    """Press KEY in terminal ID (Enter, Escape, Tab, Up, C-c, ...)."""
    with client() as api:
        result = api.post(terminal_path(terminal_id, "/key"), json={"key": key})
    if as_json:
        print_json(result)
        return
    click.echo(f"Sent {key} to {terminal_id}.")


@terminal.command("delete")
@click.argument("terminal_id", metavar="ID")
@json_option
def delete(terminal_id: str, as_json: bool) -> None:
    """Delete terminal ID (its scrollback is kept for `cao terminal restore`)."""
    with client() as api:
        result = api.delete(terminal_path(terminal_id))
    if as_json:
        print_json(result)
        return
    click.echo(f"Deleted terminal {terminal_id}.")


@terminal.command("restore")
@click.argument("terminal_id", metavar="ID")
@click.option("--attach", is_flag=True, help="Attach to the restored window right away.")
@json_option
def restore(terminal_id: str, attach: bool, as_json: bool) -> None:
    """Show the saved scrollback of deleted terminal ID in a new tmux window."""
    with client() as api:
        result = api.post(terminal_path(terminal_id, "/restore"))
    argv = [str(a) for a in result["attach"]]
    if as_json:
        print_json(result)
    else:
        click.echo(f"Restored {terminal_id} as window {result['window_name']} in session {result['session_name']}.")
        click.echo(f"Attach with: {shlex.join(argv)}")
    if attach:
        exec_attach(argv)


def _meta_value(text: str) -> Any:
    """A `--set` value: JSON when it parses as JSON (numbers, true, lists, objects), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


@terminal.command("meta")
@click.argument("terminal_id", metavar="ID")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Set a metadata key (VALUE: JSON or text).")
@click.option("--unset", "unsets", multiple=True, metavar="KEY", help="Remove a metadata key.")
@click.option("--clear-metadata", is_flag=True, help="Remove all metadata (before --set).")
@click.option("--group", "groups", multiple=True, metavar="G", help="The group path, one element per --group.")
@click.option("--clear-group", is_flag=True, help="Remove the group.")
@click.option("--description", default=None, help='What the agent is for ("" clears it).')
@json_option
def meta(
    terminal_id: str,
    sets: tuple[str, ...],
    unsets: tuple[str, ...],
    clear_metadata: bool,
    groups: tuple[str, ...],
    clear_group: bool,
    description: str | None,
    as_json: bool,
) -> None:
    """Show or change terminal ID's description, group and metadata.

    Without options it shows them. --set and --unset change single keys of the metadata read
    just before (the server replaces the object whole: the last write wins); --group replaces
    the whole group path."""
    if groups and clear_group:
        raise click.UsageError("--group and --clear-group cannot be combined")
    changes = [pair.partition("=") for pair in sets]
    if any(not sep or not key for key, sep, _ in changes):
        raise click.BadParameter("use KEY=VALUE", param_hint="--set")
    path = terminal_path(terminal_id)
    with client() as api:
        term = api.get(path)
        if sets or unsets or clear_metadata:
            metadata = {} if clear_metadata else dict(term.get("metadata") or {})
            for key in unsets:
                metadata.pop(key, None)
            metadata.update({key: _meta_value(value) for key, _, value in changes})
            term = api.request("PATCH", f"{path}/metadata", json={"metadata": metadata})
        if groups or clear_group:
            term = api.request("PATCH", f"{path}/group", json={"group": list(groups) or None})
        if description is not None:
            term = api.request("PATCH", f"{path}/description", json={"description": description or None})
    shown = {k: term.get(k) for k in ("id", "description", "group", "metadata")}
    if as_json:
        print_json(shown)
        return
    print_fields(
        [
            ("Terminal", term["id"]),
            ("Description", term.get("description")),
            ("Group", "/".join(term.get("group") or []) or None),
            ("Metadata", json.dumps(term["metadata"], ensure_ascii=False) if term.get("metadata") else None),
        ]
    )


@terminal.command("siblings")
@click.argument("terminal_id", metavar="ID")
@click.option("--depth", type=click.IntRange(1, 16), default=1, show_default=True, help="Group elements to match.")
@click.option("--cross-session", is_flag=True, help="Look in every session, not only ID's.")
@json_option
def siblings(terminal_id: str, depth: int, cross_session: bool, as_json: bool) -> None:
    """List terminal ID's siblings: the agents sharing the first --depth elements of its group
    (without a group: every other agent of its session)."""
    with client() as api:
        found = api.get(
            terminal_path(terminal_id, "/siblings"),
            params={"depth": depth, "cross_session": "true" if cross_session else "false"},
        )
    if as_json:
        print_json(found)
        return
    rows = [{**s, "group": "/".join(s.get("group") or []) or None} for s in found]
    columns = [("id", "ID"), ("agent_profile", "PROFILE"), ("status", "STATUS"), ("group", "GROUP")]
    print_table(rows, [*columns, ("description", "DESCRIPTION")], empty="No siblings.")
