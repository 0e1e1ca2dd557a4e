"""`cao attach SESSION|TERMINAL`: watch a session (or one agent's window) in tmux, on the
tmux server of the cao home the running cao-server uses. Also the one place that builds the
attach command other commands print (`cao info`, `cao launch --headless`)."""

from __future__ import annotations

import shlex
import sys

import click

from ...models import TERMINAL_ID_RE
from ..client import ApiError, CaoClient
from .common import client, exec_attach, session_path, terminal_path


def attach_argv(socket: str, session: str, window: str | None = None) -> list[str]:
    """tmux argv that attaches to `session`, showing `window` when given. Targets are exact
    (`=name`): a prefix must never pick another session or window."""
    argv = ["tmux", "-L", socket, "attach-session", "-t", f"={session}"]
    if window:
        argv += [";", "select-window", "-t", f"={session}:={window}"]
    return argv


def attach_text(socket: str, session: str, window: str | None = None) -> str:
    return shlex.join(attach_argv(socket, session, window))


def resolve_target(api: CaoClient, target: str) -> tuple[str, str | None]:
    """(session, window) for a terminal id or a session name (with or without `cao-`)."""
    if TERMINAL_ID_RE.match(target):
        try:
            term = api.get(terminal_path(target))
            return term["session_name"], term["name"]
        except ApiError as exc:
            if exc.status_code != 404:
                raise
    try:  # the server prepends cao- to a session name that lacks it
        return api.get(session_path(target))["session"]["name"], None
    except ApiError as exc:
        if exc.status_code != 404:
            raise
    raise click.ClickException(
        f"no session or terminal {target!r} on this cao-server (see `cao session list`, `cao terminal list`)"
    )


@click.command()
@click.argument("target", metavar="SESSION|TERMINAL")
def attach(target: str) -> None:
    """Attach to SESSION's tmux, or to TERMINAL's window, on this cao home's tmux server.

    Detach again with Ctrl-b d; the agents keep running.
    """
    with client() as api:
        session, window = resolve_target(api, target)
        socket = api.get("/health")["tmux_socket"]
        # An agent on another host: its tmux is there, reached with the user's own ssh.
        remote = api.get(f"/terminals/{target}/attach") if TERMINAL_ID_RE.match(target) and window else None
    if remote is not None and remote.get("host"):
        if not sys.stdin.isatty():
            click.echo(remote["command"])
            raise click.ClickException("cannot attach: stdin is not a terminal; run the command above from a terminal")
        exec_attach(remote["argv"])
        return
    command = attach_text(socket, session, window)
    if not sys.stdin.isatty():
        click.echo(command)
        raise click.ClickException("cannot attach: stdin is not a terminal; run the command above from a terminal")
    exec_attach(attach_argv(socket, session, window))
