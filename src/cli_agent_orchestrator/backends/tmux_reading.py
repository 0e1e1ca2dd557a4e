"""Reading a pane: its text (the screen, the history, a range of lines), where the next text will
land, and its working directory. Windows are addressed by id, never by name.
"""

from __future__ import annotations

from .tmux_commands import window_target
from .tmux_input import CommandRunner


async def capture(
    tmux: CommandRunner,
    window_id: str,
    *,
    history: bool = False,
    escapes: bool = False,
    start: int | None = None,
    end: int | None = None,
) -> str:
    """The pane's text: the visible screen, the whole history, or from line `start`
    (tmux numbering: 0 is the top visible row, negative numbers reach into history),
    up to line `end` (-1: the last line of history, above the visible screen)."""
    args = ["capture-pane", "-p", "-t", window_target(window_id)]
    if history:
        args += ["-J", "-S", "-"]
    elif start is not None:
        args += ["-J", "-S", str(start)]
    if end is not None:
        args += ["-E", str(int(end))]
    if escapes:
        args.append("-e")
    return await tmux.run(*args)


async def position(tmux: CommandRunner, window_id: str) -> tuple[int, int] | None:
    """(history_size, cursor_y): where the next text will land, as an absolute line
    number history_size + cursor_y that stays valid while lines scroll into history."""
    out = await tmux.run(
        "display-message", "-p", "-t", window_target(window_id), "#{history_size} #{cursor_y}", check=False
    )
    parts = out.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


async def current_path(tmux: CommandRunner, window_id: str) -> str | None:
    out = await tmux.run("display-message", "-p", "-t", window_target(window_id), "#{pane_current_path}", check=False)
    return out.strip() or None
