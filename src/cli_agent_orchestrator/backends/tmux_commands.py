"""tmux command syntax: how a value cao places in a tmux command stays data (quoting for the
parser, `#` doubled where tmux expands formats, window ids checked), and the Reply a list gets.
Every escape that keeps client or agent text out of tmux syntax lives here.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..errors import BackendError

_WINDOW_ID = re.compile(r"\A@[0-9]+\Z")


def quote(arg: str) -> str:
    """Quote one argument for tmux's command parser: single quotes keep $, ~, ;, # literal."""
    return "'" + arg.replace("'", "'\\''") + "'"


def literal(text: str) -> str:
    """An argument tmux expands as a format (`-c`, `-n`), made to mean exactly `text`."""
    return text.replace("#", "##")


def is_window_id(text: str) -> bool:
    return bool(_WINDOW_ID.match(text))


def window_target(window_id: str) -> str:
    """Window ids come from tmux, but they are placed inside command strings: check."""
    if not _WINDOW_ID.match(window_id or ""):
        raise BackendError(f"not a tmux window id: {window_id!r}")
    return window_id


def pipe_command(fifo: Path) -> str:
    """The shell command tmux pipes a pane into. `exec` leaves one process (cat);
    `#` is doubled because tmux expands formats in pipe-pane's command."""
    return f"exec cat >> {shlex.quote(str(fifo))}".replace("#", "##")


@dataclass(frozen=True)
class Reply:
    """What tmux answered to one command list."""

    ok: bool  # every command ran and succeeded
    blocks: list[list[str]]  # the output lines of each answered command, in order
    error: str = ""  # the failing command's message

    @property
    def text(self) -> str:
        return "\n".join(line for block in self.blocks for line in block)
