"""`cao session ...`: list, inspect and delete sessions."""

from __future__ import annotations

from typing import Any

import click

from .common import client, json_option, print_fields, print_json, print_table, session_path

TERMINAL_COLUMNS = [
    ("id", "ID"),
    ("name", "WINDOW"),
    ("agent_profile", "PROFILE"),
    ("provider", "PROVIDER"),
    ("host", "HOST"),
    ("status", "STATUS"),
    ("working_directory", "WORKING DIRECTORY"),
]
LOCAL_HOST = "local"  # how a terminal on cao-server's own machine (host null) is shown


def host_shown(terminal: dict[str, Any]) -> str:
    return terminal.get("host") or LOCAL_HOST


def terminal_rows(terminals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Terminals as the tables show them: an agent on this machine is on host `local`."""
    return [{**t, "host": host_shown(t)} for t in terminals]


@click.group()
def session() -> None:
    """Sessions: tmux sessions named cao-… holding agent terminals."""


@session.command("list")
@json_option
def list_sessions(as_json: bool) -> None:
    """List sessions."""
    with client() as api:
        sessions = api.get("/sessions")
    if as_json:
        print_json(sessions)
        return
    print_table(
        sessions,
        [
            ("name", "NAME"),
            ("status", "STATUS"),
            ("terminal_count", "TERMINALS"),
            ("agent_profile", "PROFILE"),
            ("working_directory", "WORKING DIRECTORY"),
        ],
        empty="No sessions.",
    )


@session.command("get")
@click.argument("name")
@json_option
def get_session(name: str, as_json: bool) -> None:
    """Show session NAME and its terminals."""
    with client() as api:
        data = api.get(session_path(name))
    if as_json:
        print_json(data)
        return
    print_fields([("Session", data["session"]["name"]), ("Status", data["session"]["status"])])
    click.echo()
    print_table(terminal_rows(data["terminals"]), TERMINAL_COLUMNS, empty="No terminals.")


session.add_command(get_session, name="status")


@session.command("delete")
@click.argument("name")
@json_option
def delete_session(name: str, as_json: bool) -> None:
    """Delete session NAME and all its terminals."""
    with client() as api:
        result = api.delete(session_path(name))
    if as_json:
        print_json(result)
        return
    for problem in result.get("errors") or []:
        click.echo(f"Warning: {problem}", err=True)
    click.echo(f"Deleted session {', '.join(result.get('deleted') or [name])}.")
