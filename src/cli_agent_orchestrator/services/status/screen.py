"""The terminal emulator behind the status monitor (pyte): output or a tmux capture goes in,
and providers read the `Screen` a human would see, not raw escape bytes.

Reading the screen is on the path of every turn (each output chunk is judged), and pyte's
`display` re-renders all cells of all rows every time: ~7 ms for 220×50, on the event loop.
So the screen keeps its rows as text and re-renders only the rows pyte marked dirty.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

import pyte
from wcwidth import wcwidth

from ...providers.base import Screen


@lru_cache(maxsize=4096)
def _is_wide(char: str) -> bool:
    return wcwidth(char) == 2


def row_text(line: dict, columns: int) -> str:
    """One row as pyte's `display` gives it, right-trimmed: a wide character's stub cell is
    skipped; cells never written are blanks, so the row ends at the last written one."""
    if not line:
        return ""
    out = []
    skip = False
    for x in range(min(columns, max(line) + 1)):
        if skip:
            skip = False
            continue
        data = line[x].data
        out.append(data)
        skip = bool(data) and _is_wide(data[0])
    return "".join(out).rstrip()


class EmulatedScreen(pyte.Screen):
    """pyte's screen, tolerant of private SGR sequences (`CSI > 4 ; 2 m`, xterm's
    modifyOtherKeys, which Gemini CLI sends): pyte would raise on them and drop the rest
    of the output it was fed. Its text is kept row by row (see `rows`)."""

    def __init__(self, columns: int, lines: int):
        self._rows: list[str] = []
        self._rows_columns = 0
        super().__init__(columns, lines)

    def select_graphic_rendition(self, *attrs: int, private: bool = False) -> None:
        if not private:
            super().select_graphic_rendition(*attrs)

    def draw(self, data: str) -> None:
        top = self.cursor.y
        super().draw(data)
        if not data.isascii() and any(unicodedata.combining(c) for c in data):
            # pyte joins a combining mark that begins a row to the last cell of the row above
            # without marking that row dirty.
            self.dirty.update(range(max(top - 1, 0), self.cursor.y + 1))

    def rows(self) -> list[str]:
        """The rows as text, right-trimmed. Only the rows pyte marked dirty since the last call
        are rendered again (pyte marks every row it changes: drawing, erasing, scrolling,
        resizing, reset); nothing else reads or clears `dirty`."""
        if len(self._rows) != self.lines or self._rows_columns != self.columns:
            self._rows, self._rows_columns = [""] * self.lines, self.columns
            self.dirty.update(range(self.lines))
        for y in self.dirty:
            if 0 <= y < self.lines:
                self._rows[y] = row_text(self.buffer[y], self.columns)
        self.dirty.clear()
        return list(self._rows)


def load_capture(screen: pyte.Screen, stream: pyte.ByteStream, captured: str, cursor: tuple[int, int] | None) -> None:
    """Replace the screen's contents by a capture of the pane (and put the cursor where tmux has it)."""
    screen.reset()
    stream.feed(captured.rstrip("\n").replace("\n", "\r\n").encode())
    if cursor is not None:
        stream.feed(f"\x1b[{cursor[1] + 1};{cursor[0] + 1}H".encode())


def upper_rows(screen: EmulatedScreen) -> tuple[str, ...]:
    """The screen's non-blank rows but the last two (where prompts and footers redraw)."""
    rows = [line for line in screen.rows() if line.strip()]
    return tuple(rows[:-2])


def render(screen: EmulatedScreen) -> Screen:
    return Screen(screen.rows(), screen.cursor.y, screen.cursor.x)
