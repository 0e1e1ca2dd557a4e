"""`cao launch`: start an agent in a new session, then attach to it or drive it headless."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import click

from ...errors import CaoError
from ...profiles.loading import load_profile
from ...profiles.roles import resolve_tools
from ...settings import Settings
from ..client import LAUNCH_TIMEOUT, ApiError, CaoClient
from .attach import attach_argv, attach_text
from .common import client, env_pairs, exec_attach, print_fields, print_json, terminal_path

# Statuses that end a turn: the agent answered, failed, or asks the user something.
FINAL_STATUSES = ("completed", "error", "waiting_user_answer")
POLL_INTERVAL = 0.1


def _profile_summary(name: str, provider: str | None, tools: list[str] | None) -> tuple[str, str, str]:
    """What to show before asking for trust; the server decides, this only previews it."""
    home = Settings.from_env().home_dir
    try:
        profile = load_profile(home, name, os.environ)
        policy = resolve_tools(home, profile.name, tools or profile.allowed_tools, profile.role, profile.mcp_servers)
    except CaoError as exc:
        return f"{name} ({exc})", provider or "server default", "(the server will say)"
    shown_tools = ", ".join(policy.tools) + f"  [{'--allowed-tools' if tools else policy.source}]"
    return f"{name} ({profile.source})", provider or profile.provider or "server default", shown_tools


def _confirm(
    agents: str, provider: str | None, workdir: str, session_name: str | None, tools: list[str], host: str | None
) -> None:
    if not sys.stdin.isatty():
        raise click.ClickException(
            "cannot ask for confirmation: stdin is not a terminal. Pass --auto-approve to run with "
            "the profile's tool set, or --yolo for unrestricted tools, without asking."
        )
    profile, shown_provider, shown_tools = _profile_summary(agents, provider, tools)
    click.echo("About to launch an agent that can read and change files in its working directory:")
    print_fields(
        [
            ("Profile", profile),
            ("Provider", shown_provider),
            ("Working directory", workdir),
            ("Host", host or "(the placement policy)"),
            ("Session", session_name or "(new, named by cao)"),
            ("Tools (run without asking)", shown_tools),
            ("Everything else", "refused by the CLI where it can (docs/profiles.md: Roles and tools)"),
        ]
    )
    if not click.confirm("Trust this workspace and launch? Proceed?", default=False):
        click.echo("Not launched.", err=True)
        raise click.exceptions.Exit(1)


def _wait_final(api: CaoClient, terminal_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        term = api.get(terminal_path(terminal_id))
        if term["status"] in FINAL_STATUSES:
            return term
        if time.monotonic() >= deadline:
            raise click.ClickException(
                f"terminal {terminal_id} did not finish within {timeout:g}s (status {term['status']}); "
                f"it is still running: `cao terminal status {terminal_id}`"
            )
        time.sleep(POLL_INTERVAL)


def _last_output(api: CaoClient, terminal_id: str) -> str | None:
    try:
        return api.get(terminal_path(terminal_id, "/output"), params={"mode": "last"})["output"]
    except ApiError as exc:
        if exc.status_code == 409:  # no reply to extract (e.g. the agent errored or asks a question)
            return None
        raise


def _run_message(api: CaoClient, term: dict[str, Any], message: str, timeout: float, as_json: bool) -> None:
    terminal_id = term["id"]
    api.post(terminal_path(terminal_id, "/input"), json={"message": message})
    final = _wait_final(api, terminal_id, timeout)
    output = _last_output(api, terminal_id)
    if as_json:
        print_json({**final, "output": output})
    elif output is not None:
        click.echo(output)
    if final["status"] == "error":
        raise click.ClickException(
            f"agent in terminal {terminal_id} reported an error: {final.get('status_reason') or 'see its output'}"
        )
    if final["status"] == "waiting_user_answer" and not as_json:
        click.echo(f"The agent is waiting for an answer: `cao terminal send {terminal_id} ANSWER`", err=True)


@click.command()
@click.option("--agents", required=True, metavar="PROFILE", help="Agent profile to run.")
@click.option("--provider", default=None, help="Provider (default: the profile's, else the server's).")
@click.option("--session-name", default=None, help="Session name (cao- is prepended if missing).")
@click.option(
    "--working-directory",
    default=None,
    type=click.Path(exists=True, file_okay=False, resolve_path=True),
    help="Where the agent works (default: the current directory).",
)
@click.option("--headless", is_flag=True, help="Do not attach; print the ids (and the reply to MESSAGE).")
@click.option("--yolo", is_flag=True, help="Unrestricted tools, no permission prompts, no confirmation.")
@click.option(
    "--auto-approve", is_flag=True, help="Run with the profile's tool set (or --allowed-tools) without confirmation."
)
@click.option(
    "--allowed-tools",
    "allowed_tools",
    multiple=True,
    metavar="TOOL",
    help="A tool in cao's vocabulary (repeatable); replaces the profile's set.",
)
@click.option(
    "--env",
    "env",
    multiple=True,
    metavar="K=V",
    help="A variable for the agent and every worker later started in its session (repeatable; kept in "
    "cao-server's memory only).",
)
@click.option(
    "--memory",
    is_flag=True,
    help="The agent gets its memories in its first message (on for every agent; refused where memory is off).",
)
@click.option(
    "--resume-session-id",
    "resume_session_id",
    default=None,
    metavar="ID",
    help="Resume this conversation of the CLI's own (claude_code, codex, gemini_cli, qwen_cli).",
)
@click.option("--engine", type=click.Choice(["v2", "kas"]), default=None, help="Kiro engine (kiro_cli only).")
@click.option("--model", default=None, help="Model override for the provider.")
@click.option(
    "--host",
    default=None,
    metavar="NAME",
    help="Run the agent on this registered host (`cao host list`), or local; default: the placement policy.",
)
@click.option(
    "--timeout",
    default=300.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds to wait for the reply to MESSAGE (with --headless).",
)
@click.option("--async", "no_wait", is_flag=True, help="With --headless MESSAGE: send it and return at once.")
@click.option("--json", "as_json", is_flag=True, help="Print the terminal as JSON.")
@click.argument("message", required=False)
def launch(
    agents: str,
    provider: str | None,
    session_name: str | None,
    working_directory: str | None,
    headless: bool,
    yolo: bool,
    auto_approve: bool,
    allowed_tools: tuple[str, ...],
    env: tuple[str, ...],
    memory: bool,
    resume_session_id: str | None,
    engine: str | None,
    model: str | None,
    host: str | None,
    timeout: float,
    no_wait: bool,
    as_json: bool,
    message: str | None,
) -> None:
    """Start agent PROFILE in a new session and attach to it (or run MESSAGE headless).

    The agent runs its profile's tool set (or --allowed-tools) without asking and is refused
    the rest; --yolo lifts every limit. Without --yolo or --auto-approve the set is shown and
    you are asked to confirm."""
    workdir = working_directory or os.path.abspath(os.getcwd())
    env_vars = env_pairs(env)
    tools = [t.strip() for item in allowed_tools for t in item.split(",") if t.strip()]
    if not headless and not sys.stdin.isatty():
        # Checked before anything is created: a session nobody can attach to would be left behind.
        raise click.ClickException(
            "cannot attach: stdin is not a terminal. Pass --headless to launch without attaching "
            "(then `cao attach SESSION` from a terminal)."
        )
    if not (yolo or auto_approve):
        _confirm(agents, provider, workdir, session_name, tools, host)
    params = {
        "agent_profile": agents,
        "provider": provider,
        "session_name": session_name,
        "working_directory": workdir,
        "model": model,
        "engine": engine,
        "host": host,
        "allowed_tools": ",".join(tools) or None,
        "yolo": str(yolo).lower(),
        "resume_session_id": resume_session_id,
        "memory_manager": "true" if memory else None,
    }
    body = {"env_vars": env_vars} if env_vars else None
    with client() as api:
        term = api.post("/sessions", params=params, json=body, timeout=max(LAUNCH_TIMEOUT, api.timeout))
        socket = api.get("/health")["tmux_socket"]
        ids = [("Session", term["session_name"]), ("Terminal", term["id"])]
        if term.get("host"):
            ids.append(("Host", term["host"]))
        if headless:
            ids.append(("Attach", attach_text(socket, term["session_name"])))
        if headless and message and not no_wait:
            if not as_json:
                print_fields(ids)
            _run_message(api, term, message, timeout, as_json)
            return
        if headless and message:  # --async: the message is typed, the reply is not awaited
            api.post(terminal_path(term["id"], "/input"), json={"message": message})
        if as_json:
            print_json(term)
        else:
            print_fields(ids)
        if headless:
            return
        if message:
            api.post(terminal_path(term["id"], "/input"), json={"message": message})
    exec_attach(attach_argv(socket, term["session_name"]))
