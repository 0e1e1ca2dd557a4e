"""The status monitor's screen keeps its rows as text and re-renders only the rows pyte marks
dirty, and draws one-cell text itself (services/status/screen.py). Whatever output arrives, and
whenever the rows are read, they must equal what pyte's own full `display` gives, and every
cell, the cursor and the dirty rows must be what pyte's own `draw` makes of it."""

from __future__ import annotations

import pyte
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_agent_orchestrator.services.status.screen import EmulatedScreen, render, upper_rows

# Pieces the CLIs' output is made of: text (wide characters, combining marks, box drawing),
# cursor moves, erases, scrolling, insert/delete, resets, alternate screen, and junk.
TEXT = st.text(alphabet=st.sampled_from("ab Z9qx─│✦⠋日本😀é\u0301\t\x7f"), min_size=1, max_size=30)
ESCAPES = st.sampled_from(
    [
        "\r\n",
        "\n",
        "\r",
        "\b",
        "\x1b[2J",
        "\x1b[J",
        "\x1b[1J",
        "\x1b[K",
        "\x1b[1K",
        "\x1b[2K",
        "\x1b[H",
        "\x1b[3;5H",
        "\x1b[9;1H",
        "\x1b[A",
        "\x1b[5B",
        "\x1b[10C",
        "\x1b[2D",
        "\x1b[2L",
        "\x1b[M",
        "\x1b[3P",
        "\x1b[2@",
        "\x1b[4X",
        "\x1bM",
        "\x1bD",
        "\x1b[2;6r",
        "\x1b[r",
        "\x1b[S",
        "\x1b[T",
        "\x1bc",
        "\x1b#8",
        "\x1b[?5h",
        "\x1b[?5l",
        "\x1b[?1049h",
        "\x1b[?1049l",
        "\x1b[>4;2m",
        "\x1b[1;31m",
        "\x1b[0m",
        "\x1b[200~",
        "\x1b]0;title\x07",
        "\x1b(0",  # DEC line drawing in G0: "q" draws "─"
        "\x1b(B",
        "\x1b)0",
        "\x0e",  # shift out: G1
        "\x0f",
        "\x1b[4h",  # insert mode
        "\x1b[4l",
        "\x1b[?7l",  # no autowrap
        "\x1b[?7h",
        "\x1b[1;31;44m",
        "\x1b[7m",
    ]
)
CHUNK = st.lists(st.one_of(TEXT, ESCAPES), min_size=1, max_size=12).map("".join)


def full_display(screen: pyte.Screen) -> list[str] | None:
    """pyte's own rendering, right-trimmed; None where pyte itself cannot render the screen
    (an empty cell left behind a wide character overwritten by a narrow one)."""
    try:
        return [line.rstrip() for line in screen.display]
    except (IndexError, AssertionError):
        return None


@settings(max_examples=300, deadline=None)
@given(
    chunks=st.lists(st.tuples(CHUNK, st.booleans()), min_size=1, max_size=15),
    size=st.sampled_from([(20, 6), (12, 4), (40, 10)]),
)
def test_cached_rows_always_equal_a_full_render(chunks, size):
    screen = EmulatedScreen(*size)
    stream = pyte.ByteStream(screen)
    for text, read in chunks:
        stream.feed(text.encode("utf-8"))
        if read:  # reading between chunks clears `dirty`: the next read must still be exact
            expected = full_display(screen)
            rows = screen.rows()
            if expected is not None:
                assert rows == expected
    expected = full_display(screen)
    if expected is not None:
        assert render(screen).lines == expected
        assert upper_rows(screen) == tuple(r for r in expected if r.strip())[:-2]


class PlainScreen(pyte.Screen):
    """pyte's own screen, with only EmulatedScreen's tolerance of private SGR sequences."""

    def select_graphic_rendition(self, *attrs: int, private: bool = False) -> None:
        if not private:
            super().select_graphic_rendition(*attrs)


@settings(max_examples=300, deadline=None)
@given(
    chunks=st.lists(st.tuples(CHUNK, st.sampled_from([None, None, None, (6, 20), (4, 12), (10, 40), (5, 7)]))),
    size=st.sampled_from([(20, 6), (12, 4), (40, 10)]),
)
def test_drawing_makes_the_cells_pytes_own_draw_makes(chunks, size):
    """Resizes too: one to fewer columns leaves the cursor beyond the last column."""
    ours, plain = EmulatedScreen(*size), PlainScreen(*size)
    streams = pyte.ByteStream(ours), pyte.ByteStream(plain)
    for text, resize in chunks:
        if resize is not None:
            ours.resize(*resize)
            plain.resize(*resize)
        for stream in streams:
            stream.feed(text.encode("utf-8"))
        assert (ours.cursor.x, ours.cursor.y, ours.cursor.attrs) == (plain.cursor.x, plain.cursor.y, plain.cursor.attrs)
        assert ours.dirty >= plain.dirty  # every row pyte would re-render is re-rendered
        columns, lines = ours.columns, ours.lines
        for y in range(lines):
            assert [ours.buffer[y][x] for x in range(columns)] == [plain.buffer[y][x] for x in range(columns)]


def test_text_drawn_after_a_resize_left_the_cursor_beyond_the_last_column():
    ours, plain = EmulatedScreen(20, 3), PlainScreen(20, 3)
    for screen in (ours, plain):
        pyte.ByteStream(screen).feed(b"x" * 18)
        screen.resize(3, 10)  # lines, columns: the cursor stays at column 18
        pyte.ByteStream(screen).feed(b"abc")
    assert ours.display == plain.display and (ours.cursor.x, ours.cursor.y) == (plain.cursor.x, plain.cursor.y)


def test_rows_follow_a_resize_and_a_reset():
    screen = EmulatedScreen(10, 3)
    stream = pyte.ByteStream(screen)
    stream.feed(b"abcdefghij\r\nsecond")
    assert screen.rows() == ["abcdefghij", "second", ""]
    screen.resize(4, 5)  # lines, columns
    assert screen.rows() == [line.rstrip() for line in screen.display]
    assert len(screen.rows()) == 4
    screen.reset()
    assert screen.rows() == ["", "", "", ""]


def test_a_row_read_twice_without_output_is_not_rendered_again():
    """The point of the cache: rows pyte did not mark are not re-rendered."""
    screen = EmulatedScreen(30, 4)
    stream = pyte.ByteStream(screen)
    stream.feed(b"top\r\nmiddle\r\nbottom")
    screen.rows()
    assert not screen.dirty
    stream.feed(b"\x1b[2;1H\x1b[2Kchanged")
    assert screen.dirty == {1}
    assert screen.rows() == ["top", "changed", "bottom", ""]


def test_a_private_device_status_request_does_not_drop_the_rest_of_the_output():
    """GitHub Copilot CLI asks `CSI ? 6 n` before drawing a dialog: pyte raised on it and lost
    what came after it in the same chunk (the dialog's question)."""
    screen = EmulatedScreen(30, 3)
    pyte.ByteStream(screen).feed(b"before\x1b[?6n\r\nDo you trust this folder?")
    assert screen.rows() == ["before", "Do you trust this folder?", ""]
