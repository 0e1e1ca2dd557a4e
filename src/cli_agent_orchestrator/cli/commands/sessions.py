"""`cao session ...`: list, inspect and delete sessions."""

from __future__ import annotations

from typing import Any

import click

from .common import client, json_option, print_fields, print_json, print_table, session_path, terminal_path

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


def _conductor(api: Any, name: str, terminal_id: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The session's conductor (its first terminal, or `terminal_id` of it) and its terminals."""
    terminals = api.get(session_path(name))["terminals"]
    if not terminals:
        raise click.ClickException(f"session {name!r} has no terminals")
    if terminal_id is None:
        return terminals[0], terminals
    chosen = next((t for t in terminals if t["id"] == terminal_id), None)
    if chosen is None:
        raise click.ClickException(f"terminal {terminal_id!r} is not in session {name!r}")
    return chosen, terminals


@session.command("status")
@click.argument("name")
@click.option("--terminal", "terminal_id", default=None, metavar="ID", help="This terminal of the session.")
@click.option("--workers", is_flag=True, help="Also the workers: the session's other terminals.")
@json_option
def session_status(name: str, terminal_id: str | None, workers: bool, as_json: bool) -> None:
    """The status of session NAME's conductor (its first terminal, or --terminal), and with
    --workers of its other terminals."""
    with client() as api:
        chosen, terminals = _conductor(api, name, terminal_id)
        others = [t for t in terminals if t["id"] != chosen["id"]]
        if as_json:
            print_json({"session": name, "terminal": chosen, **({"workers": others} if workers else {})})
            return
        fields = [
            ("Session", name),
            ("Terminal", chosen["id"]),
            ("Profile", chosen.get("agent_profile")),
            ("Provider", chosen.get("provider")),
            ("Status", chosen["status"]),
        ]
        if chosen.get("status_reason"):
            fields.append(("Reason", chosen["status_reason"]))
        if chosen.get("description"):
            fields.append(("Description", chosen["description"]))
        print_fields(fields)
        if workers:
            click.echo()
            print_table(
                terminal_rows(others),
                [("id", "ID"), ("agent_profile", "PROFILE"), ("provider", "PROVIDER"), ("status", "STATUS"),
                 ("caller_id", "CALLER"), ("description", "DESCRIPTION")],
                empty="No workers.",
            )  # fmt: skip


@session.command("send")
@click.argument("name")
@click.argument("message")
@click.option("--terminal", "terminal_id", default=None, metavar="ID", help="Send to this terminal of the session.")
@click.option("--async", "no_wait", is_flag=True, help="Type the message and return at once.")
@click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(min=1, max=86400), help="Seconds.")
@json_option
def session_send(
    name: str, message: str, terminal_id: str | None, no_wait: bool, timeout: float, as_json: bool
) -> None:
    """Type MESSAGE into session NAME's conductor (its first terminal, or --terminal) and print
    its reply to it (waiting for the end of that turn; --async: return at once)."""
    with client() as api:
        chosen, _ = _conductor(api, name, terminal_id)
        if no_wait:
            api.post(terminal_path(chosen["id"], "/input"), json={"message": message})
            if as_json:
                print_json({"terminal_id": chosen["id"], "sent": True})
            return
        # One turn in the ready terminal, waited for by cao-server on the terminal's own events.
        body = {
            "agent": chosen["agent_profile"],
            "prompt": message,
            "reuse_terminal_id": chosen["id"],
            "timeout": timeout,
        }
        result = api.post("/terminals/run-step", json=body, timeout=timeout + 30)
    if as_json:
        print_json(result)
    else:
        click.echo(result.get("last_message") or "")


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
