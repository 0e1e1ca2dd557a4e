"""What the mock agent draws: its screen markers and layout.

This is the contract with cao_testkit/provider.py, which reads these screens;
change both together. Every marker starts a row at column 0; anything a user
wrote is shown after a prefix or indented, so it cannot fake a marker.
"""

from __future__ import annotations

import re
import unicodedata

PROMPT = "❯ "
REPLY_MARK = "⏺ "
INDENT = "  "
THINKING = "Thinking… (esc to interrupt)"
SPINNER = "✻✽✶✢·"  # all single-width glyphs, so the indicator row never shifts
ERROR_LINE = "✗ Error: mock failure requested"
ANSWER_PROMPT = "answer> "
QUESTION_LINES = (
    "? Mock question: proceed with the change?",
    "  1. Yes",
    "  2. No",
    "  (type an answer and press Enter)",
)
SUMMARY_CHARS = 1000  # composer bigger than this is shown as "[Pasted text: ...]"
SUMMARY_LINES = 20

_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def line_count(text: str) -> int:
    return text.count("\n") + 1


def visible(text: str) -> str:
    """Neutralise control characters before they reach the terminal.

    Keeps newlines and tabs; anything else (ESC, BEL, C1...) would move the
    cursor or change modes and desynchronise the layout.
    """
    return _CONTROL_RE.sub("\ufffd", text)


def char_width(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def layout_input(prefix: str, text: str, cols: int, rows: int) -> list[str]:
    """Rows that show an input buffer, hard-wrapped by us.

    Wrapping ourselves (one column short of the edge) means we always know how
    many rows to repaint, and a wrapped row starts with two spaces, so typed
    text can never begin a row with a marker like "⏺ " or "✗ Error:".
    """
    summary = [f"{prefix}[Pasted text: {len(text)} chars, {line_count(text)} lines]"]
    if len(text) > SUMMARY_CHARS or line_count(text) > SUMMARY_LINES:
        return summary
    width = max(cols - 1, 10)
    out: list[str] = []
    cur, cur_w = prefix, len(prefix)
    for ch in visible(text).replace("\t", "    "):
        if ch == "\n":
            out.append(cur)
            cur, cur_w = INDENT, len(INDENT)
            continue
        w = char_width(ch)
        if cur_w + w > width:
            out.append(cur)
            cur, cur_w = INDENT, len(INDENT)
        cur += ch
        cur_w += w
    out.append(cur)
    # Cursor-up cannot go past the top of the screen: too tall to repaint safely.
    return summary if len(out) > max(rows - 2, 1) else out


def render_reply(text: str) -> str:
    lines = visible(text).split("\n")
    return REPLY_MARK + lines[0] + "".join("\r\n" + INDENT + line for line in lines[1:])
