"""The terminal emulator behind the status monitor (pyte): output or a tmux capture goes in,
and providers read the `Screen` a human would see, not raw escape bytes.
"""

from __future__ import annotations

import pyte

from ...providers.base import Screen


class EmulatedScreen(pyte.Screen):
    """pyte's screen, tolerant of private SGR sequences (`CSI > 4 ; 2 m`, xterm's
    modifyOtherKeys, which Gemini CLI sends): pyte would raise on them and drop the rest
    of the output it was fed."""

    def select_graphic_rendition(self, *attrs: int, private: bool = False) -> None:
        if not private:
            super().select_graphic_rendition(*attrs)


def load_capture(screen: pyte.Screen, stream: pyte.ByteStream, captured: str, cursor: tuple[int, int] | None) -> None:
    """Replace the screen's contents by a capture of the pane (and put the cursor where tmux has it)."""
    screen.reset()
    stream.feed(captured.rstrip("\n").replace("\n", "\r\n").encode())
    if cursor is not None:
        stream.feed(f"\x1b[{cursor[1] + 1};{cursor[0] + 1}H".encode())


def upper_rows(screen: pyte.Screen) -> tuple[str, ...]:
    """The screen's non-blank rows but the last two (where prompts and footers redraw)."""
    rows = [line.rstrip() for line in screen.display if line.strip()]
    return tuple(rows[:-2])


def render(screen: pyte.Screen) -> Screen:
    return Screen([line.rstrip() for line in screen.display], screen.cursor.y, screen.cursor.x)
