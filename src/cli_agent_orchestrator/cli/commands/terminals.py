"""`cao terminal ...`: inspect, drive, delete and restore single agent terminals."""

from __future__ import annotations

import shlex
import sys

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
