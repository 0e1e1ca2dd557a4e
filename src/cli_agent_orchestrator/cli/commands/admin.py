"""Housekeeping: `cao shutdown`, `cao init`, `cao mcp-server`, `cao ops-mcp-server`."""

from __future__ import annotations

import click

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


@click.command("mcp-server")
def mcp_server() -> None:
    """Relay cao's agent tools to stdio (for MCP clients that cannot reach cao-server's /mcp)."""
    from ...mcp_server.relay import main as relay

    relay()


@click.command("ops-mcp-server")
def ops_mcp_server() -> None:
    """Run the cao operations MCP server on stdio (for an agent outside cao to drive it)."""
    from ...mcp_server.ops_server import main as serve

    serve()
