"""Crash recovery decides whether a message's paste landed from where it would have landed:
the count of the message from MARK_ROWS_ABOVE rows above the cursor row taken before the
paste, compared with the same rows afterwards. Checked against screens recorded from each
real CLI (scripts/record_screens/paste_screens.py → tests/fixtures/paste/<provider>/): the
short and the long paste in the composer, after submission, and the same message twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_agent_orchestrator.services.inbox import MARK_ROWS_ABOVE, occurrences, paste_landed

FIXTURES = Path(__file__).parent / "fixtures" / "paste"
PROVIDERS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
SHORT = "please run the tests again"
LONG = "\n".join(
    [
        f"line {i:02d} of the long paste: lorem ipsum dolor sit amet, consectetur adipiscing elit"[:75]
        for i in range(1, 40)
    ]
    + ["END-OF-LONG-PASTE-7f3a"]
)
STATES = {
    "short_composer": SHORT,
    "short_submitted": SHORT,
    "short_twice_submitted": SHORT,
    "long_composer": LONG,
    "long_submitted": LONG,
}


def _regions(provider: str, state: str) -> tuple[str, str]:
    """(the rows from the mark on before the paste, the same rows afterwards)."""
    base = FIXTURES / provider / state
    mark = json.loads(base.with_name(f"{state}.mark.json").read_text())["before"]
    history, row = mark["history_size"], mark["cursor_y"]
    before = base.with_name(f"{state}.before.visible.txt").read_text().split("\n")
    after = base.with_name(f"{state}.rows.txt").read_text().split("\n")
    start = row - MARK_ROWS_ABOVE
    return "\n".join(before[max(start, 0) :]), "\n".join(after[max(history + start, 0) :])


def test_every_cli_was_recorded():
    assert set(PROVIDERS) >= {"claude_code", "codex", "gemini_cli", "qwen_cli", "opencode_cli"}


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("state", sorted(STATES))
def test_a_landed_paste_shows_more_often_than_before_it(provider: str, state: str):
    before, after = _regions(provider, state)
    message = STATES[state]
    assert paste_landed(message, occurrences(message, before), after), (provider, state)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("message", [SHORT, "run the tests", "tests again"])
def test_an_earlier_identical_or_containing_message_does_not_pass_for_a_paste(provider: str, message: str):
    """The second `please run the tests again` (or a shorter message it contains): had cao
    crashed before pasting it, the pane is the screen the mark was taken on. The text is on
    it — a whole-screen text search calls it delivered and the message is lost — but it does
    not show more often than at the mark."""
    before_mark = (FIXTURES / provider / "short_twice_submitted.before.visible.txt").read_text()
    assert message in before_mark  # the old rule's false positive
    before, _ = _regions(provider, "short_twice_submitted")
    assert not paste_landed(message, occurrences(message, before), before)
