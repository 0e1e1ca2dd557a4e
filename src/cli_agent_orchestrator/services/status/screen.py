"""The terminal emulator behind the status monitor (pyte): output or a tmux capture goes in,
and providers read the `Screen` a human would see, not raw escape bytes.

Reading the screen is on the path of every turn (each output chunk is judged), and pyte's
`display` re-renders all cells of all rows every time: ~7 ms for 220×50, on the event loop.
So the screen keeps its rows as text and re-renders only the rows pyte marked dirty.
Drawing is the other cost: pyte builds a new cell (a namedtuple) for every character drawn,
and a CLI that redraws its whole screen each frame (Gemini) sends thousands a frame. Text of
one-cell characters is drawn here with cells shared per (attributes, character).
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

import pyte
from pyte import modes
from wcwidth import wcwidth

from ...providers.base import Screen


@lru_cache(maxsize=4096)
def _is_wide(char: str) -> bool:
    return wcwidth(char) == 2


@lru_cache(maxsize=4096)
def _is_narrow(char: str) -> bool:
    return wcwidth(char) == 1


def row_text(line: dict, columns: int) -> str:
    """One row as pyte's `display` gives it, right-trimmed: a wide character's stub cell is
    skipped; cells never written are blanks, so the row ends at the last written one."""
    if not line:
        return ""
    cells = [line[x].data for x in range(min(columns, max(line) + 1))]
    text = "".join(cells)
    if text.isascii():  # no wide character, so no stub cell to skip
        return text.rstrip()
    out = []
    skip = False
    for data in cells:
        if skip:
            skip = False
            continue
        out.append(data)
        skip = bool(data) and not data.isascii() and _is_wide(data[0])
    return "".join(out).rstrip()


class _Cells(dict):
    """The cells of one set of attributes, by character, made once: cells are immutable."""

    def __init__(self, attrs: pyte.screens.Char):
        super().__init__()
        self.attrs = attrs

    def __missing__(self, char: str) -> pyte.screens.Char:
        cell = self[char] = self.attrs._replace(data=char)
        return cell


class EmulatedScreen(pyte.Screen):
    """pyte's screen, tolerant of private SGR sequences (`CSI > 4 ; 2 m`, xterm's
    modifyOtherKeys, which Gemini CLI sends): pyte would raise on them and drop the rest
    of the output it was fed. Its text is kept row by row (see `rows`). Titles the output sets
    (OSC 0/2) are kept in order until taken (`take_titles`): some CLIs say their status there."""

    def __init__(self, columns: int, lines: int):
        self.new_titles: list[str] = []
        self._rows: list[str] = []
        self._rows_columns = 0
        self._cells: dict[pyte.screens.Char, _Cells] = {}
        super().__init__(columns, lines)

    def select_graphic_rendition(self, *attrs: int, private: bool = False) -> None:
        if not private:
            super().select_graphic_rendition(*attrs)

    def report_device_status(self, mode: int, private: bool = False) -> None:
        # A private status request (`CSI ? 6 n`, GitHub Copilot CLI sends one) made pyte raise
        # and drop the rest of the chunk it was fed (e.g. a dialog's question row).
        if not private:
            super().report_device_status(mode)

    def set_title(self, param: str) -> None:
        super().set_title(param)
        self.new_titles.append(param)

    def take_titles(self) -> list[str]:
        """The titles set since the last call, oldest first."""
        titles, self.new_titles = self.new_titles, []
        return titles

    def draw(self, data: str) -> None:
        text = data.translate(self.g1_charset if self.charset else self.g0_charset)
        if (text.isascii() and text.isprintable()) or all(map(_is_narrow, text)):
            # (A resize to fewer columns leaves the cursor beyond the last one: pyte's case.)
            if modes.DECAWM in self.mode and modes.IRM not in self.mode and self.cursor.x <= self.columns:
                self._draw_narrow(text)
                return
        top = self.cursor.y
        super().draw(data)
        if not data.isascii() and any(unicodedata.combining(c) for c in data):
            # pyte joins a combining mark that begins a row to the last cell of the row above
            # without marking that row dirty.
            self.dirty.update(range(max(top - 1, 0), self.cursor.y + 1))

    def _draw_narrow(self, text: str) -> None:
        """pyte's `draw` for one-cell characters with autowrap on and insert mode off (the
        case of nearly all output): the same cells, cursor and dirty rows, a row at a time."""
        cursor, columns = self.cursor, self.columns
        cells = self._cells.get(cursor.attrs)
        if cells is None:
            if len(self._cells) > 256:  # attributes seen come and go (colours); keep few
                self._cells.clear()
            cells = self._cells[cursor.attrs] = _Cells(cursor.attrs)
        done = 0
        while done < len(text):
            if cursor.x == columns:
                self.dirty.add(cursor.y)
                self.carriage_return()
                self.linefeed()
            piece = text[done : done + columns - cursor.x]
            self.buffer[cursor.y].update(zip(range(cursor.x, cursor.x + len(piece)), map(cells.__getitem__, piece)))
            cursor.x += len(piece)
            done += len(piece)
        self.dirty.add(cursor.y)

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


def load_capture(screen: pyte.Screen, captured: str, cursor: tuple[int, int] | None) -> None:
    """Replace the screen's contents by a capture of the pane (and put the cursor where tmux has
    it). The capture goes through a parser of its own: the output stream's parser may be in the
    middle of a sequence that the output after the capture ends."""
    stream = pyte.ByteStream(screen)
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
