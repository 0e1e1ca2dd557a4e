"""Input into a pane: pastes through a buffer loaded from stdin, named keys quoted for tmux's
parser, and both only if tmux itself finds the pane alive in the same command (tmux 3.3a
crashes the whole server on a paste into a dead pane).
"""

from __future__ import annotations

import uuid
from typing import Protocol

from ..errors import AgentExited, BackendError
from .tmux_commands import Reply, escaped, quote, window_target

# What the liveness check prints when the pane is dead (and nothing was delivered).
_DEAD = "cao-pane-dead"
# Up to this many characters a paste goes on the control client's command line (escaped, at
# most 12 bytes a character); a longer one through a client process's stdin.
MAX_LINE_TEXT = 16 * 1024


class CommandRunner(Protocol):
    """The part of the backend that runs tmux command lists."""

    @property
    def parses_commands(self) -> bool: ...

    async def run(self, *args: str, input_bytes: bytes | None = None, check: bool = True) -> str: ...

    async def run_reply(self, *args: str, input_bytes: bytes | None = None) -> Reply: ...


async def paste(tmux: CommandRunner, window_id: str, text: str) -> None:
    window = window_target(window_id)
    buffer = f"cao-{uuid.uuid4().hex[:12]}"
    # The text goes into a buffer as data: an escaped argument of set-buffer on the control
    # client's line, or load-buffer from stdin of a client process (no control client, or a
    # text too long for one line). That process costs a paste ~8 ms, ~5 ms of it holding the
    # event loop (fork and exec from cao-server), hence the line. Neither way does the text pass through a shell or tmux's parser as
    # syntax. paste-buffer -p (bracketed) -d (delete buffer); if-shell -F decides inside tmux,
    # in the same command, that the pane is alive: nothing can die in between.
    data = escaped(text) if tmux.parses_commands and len(text) <= MAX_LINE_TEXT else None
    # `--`: a text that begins with "-" is still data, not a flag of set-buffer.
    load = ["set-buffer", "-b", buffer, "--", data] if data is not None else ["load-buffer", "-b", buffer, "-"]
    reply = await tmux.run_reply(
        *load,
        ";",
        "if-shell",
        "-F",
        "-t",
        window,
        "#{pane_dead}",
        f"delete-buffer -b {buffer} ; display-message -p {_DEAD}",
        f"paste-buffer -p -d -b {buffer} -t {window}",
        input_bytes=None if data is not None else text.encode("utf-8"),
    )
    await _check_alive(tmux, reply, window, cleanup=["delete-buffer", "-b", buffer])


async def send_keys(tmux: CommandRunner, window_id: str, keys: list[str]) -> None:
    window = window_target(window_id)
    typed = " ".join(quote(k) for k in keys)
    reply = await tmux.run_reply(
        "if-shell", "-F", "-t", window, "#{pane_dead}", f"display-message -p {_DEAD}", f"send-keys -t {window} {typed}"
    )
    await _check_alive(tmux, reply, window)


async def send_bytes(tmux: CommandRunner, window_id: str, data: bytes) -> None:
    # send-keys -H takes each byte as two hex digits: whatever the bytes are, tmux's parser
    # sees only [0-9a-f] and the pane receives them unchanged.
    window = window_target(window_id)
    if not data:
        return
    typed = " ".join(f"{b:02x}" for b in data)
    reply = await tmux.run_reply(
        "if-shell",
        "-F",
        "-t",
        window,
        "#{pane_dead}",
        f"display-message -p {_DEAD}",
        f"send-keys -H -t {window} {typed}",
    )
    await _check_alive(tmux, reply, window)


async def _check_alive(tmux: CommandRunner, reply: Reply, window: str, cleanup: list[str] | None = None) -> None:
    if reply.ok and _DEAD not in reply.text.split():
        return
    if cleanup:
        await tmux.run(*cleanup, check=False)
    if reply.ok:
        raise AgentExited("the agent's process has exited (its pane is dead)")
    if "can't find" in reply.error:
        raise AgentExited("the agent's tmux window no longer exists")
    raise BackendError(f"tmux refused input for {window}: {reply.error.strip()}")
