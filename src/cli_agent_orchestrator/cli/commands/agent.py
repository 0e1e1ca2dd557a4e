"""`cao agent …`: cao's agent tools from the shell, for scripts and for an agent whose MCP
connection dropped. Each verb calls the MCP tool of the same name on cao-server's `/mcp`
(clients/mcp_call.py), so arguments, checks and results are the tools' own; who calls is the
agent whose credential is in the environment (CAO_MCP_TOKEN), else the user.

Without `--json` the useful part is printed (a handoff's reply, a new worker's id) and the
exit code says whether the tool succeeded (1 when it did not, with its message on stderr).
"""

from __future__ import annotations

import os
from typing import Any

import click

from ...clients.mcp_call import McpCallError, call_tool
from .common import client, json_option, print_fields, print_json, terminal_path


def _call(
    tool: str, arguments: dict[str, Any], as_json: bool, shown: str | None = None, quiet: bool = False
) -> dict[str, Any]:
    """Call `tool`; print its result (all of it with --json, else `shown` or its message; with
    `quiet`, nothing on success: the caller prints)."""
    args = {k: v for k, v in arguments.items() if v is not None and v is not False}
    try:
        result = call_tool(tool, args)
    except McpCallError as exc:
        raise click.ClickException(str(exc)) from None
    ok = result.get("success", True) is not False
    if as_json:
        print_json(result)
    elif ok and not quiet:
        value = result.get(shown) if shown else None
        click.echo(value if value is not None else result.get("message", ""))
    if not ok:
        if not as_json:
            click.echo(result.get("message") or result.get("error") or "failed", err=True)
        raise click.exceptions.Exit(1)
    return result


@click.group()
def agent() -> None:
    """cao's agent tools (handoff, assign, send_message, …) from the shell."""


def _placement(f):
    for option in reversed(
        [
            click.option("--working-directory", default=None, help="Where the worker starts (absolute path)."),
            click.option("--model", default=None, help="Model for the worker's CLI."),
            click.option("--engine", type=click.Choice(["v2", "kas"]), default=None, help="Kiro engine."),
            click.option("--use-worktree", is_flag=True, help="The worker gets its own git worktree."),
            click.option("--host", default=None, help="A registered host's name, or local."),
            click.option("--description", default=None, help="What the worker is for (its siblings see it)."),
        ]
    ):
        f = option(f)
    return f


@agent.command()
@click.argument("agent_profile")
@click.argument("message")
@click.option("--timeout", default=600, show_default=True, type=int, help="Seconds the worker may take.")
@click.option(
    "--wait", default=None, type=int, help="Seconds to wait before answering pending with a job id (default: 600)."
)
@_placement
@json_option
def handoff(agent_profile: str, message: str, timeout: int, wait: int | None, as_json: bool, **placement: Any) -> None:
    """Hand MESSAGE to a new PROFILE worker and print its reply (MCP `handoff`); a handoff still at
    work after --wait prints its job id instead (read it with `cao agent result JOB`)."""
    arguments = {"agent_profile": agent_profile, "message": message, "timeout": timeout, "wait": wait, **placement}
    result = _call("handoff", arguments, as_json, quiet=True)
    if as_json:
        return
    if result.get("status") == "pending":
        click.echo(f"pending: job {result['job_id']}", err=True)
        click.echo(result["job_id"])
    else:
        click.echo(result.get("output") or "")


@agent.command()
@click.argument("agent_profile")
@click.argument("message")
@_placement
@json_option
def assign(agent_profile: str, message: str, as_json: bool, **placement: Any) -> None:
    """Start a PROFILE worker on MESSAGE and print its terminal id (MCP `assign`)."""
    _call("assign", {"agent_profile": agent_profile, "message": message, **placement}, as_json, "terminal_id")


@agent.command("send-message")
@click.argument("message")
@click.option("--to", "receiver_id", default=None, help="Receiving terminal id (default: your caller).")
@json_option
def send_message(message: str, receiver_id: str | None, as_json: bool) -> None:
    """Send MESSAGE to a terminal's inbox (MCP `send_message`)."""
    _call("send_message", {"message": message, "receiver_id": receiver_id}, as_json)


@agent.command()
@click.argument("terminal_id")
@click.argument("answer")
@json_option
def answer(terminal_id: str, answer: str, as_json: bool) -> None:
    """Answer the question TERMINAL_ID is waiting at (MCP `answer_user_prompt`)."""
    _call("answer_user_prompt", {"terminal_id": terminal_id, "answer": answer}, as_json)


@agent.command()
@click.argument("terminal_id")
@json_option
def delete(terminal_id: str, as_json: bool) -> None:
    """Remove a worker (MCP `delete_terminal`)."""
    _call("delete_terminal", {"terminal_id": terminal_id}, as_json)


@agent.command()
@click.argument("terminal_id", required=False)
@json_option
def status(terminal_id: str | None, as_json: bool) -> None:
    """A terminal's status (default: the calling agent's own, CAO_TERMINAL_ID)."""
    terminal_id = terminal_id or os.environ.get("CAO_TERMINAL_ID", "").strip()
    if not terminal_id:
        raise click.UsageError("give TERMINAL_ID (outside an agent there is no CAO_TERMINAL_ID)")
    with client() as api:
        term = api.get(terminal_path(terminal_id))
    if as_json:
        print_json(term)
        return
    fields = [("Terminal", term["id"]), ("Status", term["status"]), ("Profile", term.get("agent_profile"))]
    if term.get("status_reason"):
        fields.append(("Reason", term["status_reason"]))
    print_fields(fields)


@agent.command()
@click.argument("job_id")
@click.option("--wait", default=30, show_default=True, type=int, help="Seconds to wait for the result.")
@json_option
def result(job_id: str, wait: int, as_json: bool) -> None:
    """A pending handoff's result, once (MCP `get_handoff_result`); exit 3 while it still works."""
    answer = _call("get_handoff_result", {"job_id": job_id, "wait": wait}, as_json, quiet=True)
    if answer.get("status") == "pending":
        if not as_json:
            click.echo(f"pending: job {job_id} is still at work", err=True)
        raise click.exceptions.Exit(3)
    if not as_json:
        click.echo(answer.get("output") or "")


@agent.command()
@click.argument("job_id")
@json_option
def cancel(job_id: str, as_json: bool) -> None:
    """Stop a pending handoff and remove its worker (MCP `cancel_handoff`)."""
    _call("cancel_handoff", {"job_id": job_id}, as_json)
