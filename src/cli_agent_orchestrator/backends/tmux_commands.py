"""tmux command syntax: how a value cao places in a tmux command stays data (quoting for the
parser, `#` doubled where tmux expands formats, window ids checked), and the Reply a list gets.
Every escape that keeps client or agent text out of tmux syntax lives here.
"""

from __future__ import annotations

import re
import shlex
import string
from dataclasses import dataclass
from pathlib import Path

from ..errors import BackendError

_WINDOW_ID = re.compile(r"\A@[0-9]+\Z")


def quote(arg: str) -> str:
    """Quote one argument for tmux's command parser: single quotes keep $, ~, ;, # literal."""
    return "'" + arg.replace("'", "'\\''") + "'"


class Parsed(str):
    """An argument already written in tmux's command syntax (see `escaped`): a command line
    for the control client places it as it is, where any other argument is quote()d. A tmux
    client process takes its arguments unparsed, so it must never be given one."""


_PLAIN = frozenset(string.ascii_letters + string.digits + " ")


def escaped(text: str) -> Parsed:
    """`text` as one double-quoted tmux argument that stands for exactly `text`, newlines
    included (a single-quoted one cannot hold a newline, and a control client's command is
    one line). Every character but letters, digits and space is written as octal escapes of
    its UTF-8 bytes, so no `$`, `~`, `\\`, `"` or `#` of the text is ever seen by the parser."""
    plain = _PLAIN
    return Parsed('"' + "".join(ch if ch in plain else "".join(f"\\{b:03o}" for b in ch.encode()) for ch in text) + '"')


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


# The first line of a screen snapshot: the cursor, then the pane's title as tmux holds it (the
# last one the program set; tmux drops control characters from it, so it stays on this line).
SNAPSHOT_FORMAT = "#{cursor_x} #{cursor_y} #{pane_title}"


def cursor_and_title(line: str) -> tuple[int, int, str | None]:
    """(x, y, title) from a SNAPSHOT_FORMAT line; (0, 0, None) when it is not one."""
    parts = line.split(" ", 2)
    if len(parts) < 2 or not (parts[0].isdecimal() and parts[1].isdecimal()):
        return 0, 0, None
    return int(parts[0]), int(parts[1]), parts[2] if len(parts) == 3 else None
