"""A Codex dialog read while it is being drawn (no tmux, no CLI: recorded screens, cut).

Codex draws a frame row by row, and cao reads the pane whenever output arrives, so a reading
can see a dialog's option list ("› 1. Trust and continue" over "  2. …") before the key-hint
row that names the dialog. The selected option starts with the composer's `› `: read as a
composer, that half-drawn dialog was `idle`, and an agent stopped at Codex's trust screen
started as ready (test_real_codex.py::test_an_unexpected_dialog_at_start_is_reported_not_hung_on
saw `idle`). Until the hint row is there, the reading must not say ready.
"""

from __future__ import annotations

import pytest
from screen_fixtures import ScreenFixtures

from cli_agent_orchestrator.models import TerminalStatus
from cli_agent_orchestrator.providers import codex
from cli_agent_orchestrator.providers.base import Screen

SCREENS = ScreenFixtures("codex")
DIALOGS = ["trust", "permission", "hook_review"]  # every recorded dialog with an option list


def partial_frames(state: str) -> list[Screen]:
    """The dialog's screen cut after each row from its selected option down to its hint row
    (exclusive): what a reading mid-frame sees."""
    screen = SCREENS.screen(state)
    lines = screen.lines
    first = next(i for i, row in enumerate(lines) if row.startswith("› 1. "))
    hint = max(i for i, row in enumerate(lines) if row.strip() and i > first)
    assert first < hint, state
    return [Screen(lines[: cut + 1], screen.cursor_row, screen.cursor_col) for cut in range(first, hint)]


@pytest.mark.parametrize("state", DIALOGS)
def test_a_dialog_drawn_up_to_its_options_is_not_read_as_ready(state: str):
    frames = partial_frames(state)
    assert len(frames) >= 2  # the option rows, and the blank row before the hint
    for frame in frames:
        reading = codex.read_status(frame)
        assert reading.status == TerminalStatus.UNKNOWN, (frame.lines[-3:], reading)
    # The whole frame is the dialog, named.
    whole = codex.read_status(SCREENS.screen(state))
    assert whole.status == TerminalStatus.WAITING_USER_ANSWER and whole.reason, whole


def test_a_typed_prompt_that_looks_like_an_option_is_still_the_composer():
    screen = SCREENS.screen("composer")
    at = next(i for i, row in enumerate(screen.lines) if row.startswith("› "))
    lines = [*screen.lines[:at], "› 1. do the first thing", *screen.lines[at + 1 :]]
    reading = codex.read_status(Screen(lines, at, len("› 1. do the first thing")))
    assert reading.status == TerminalStatus.IDLE and reading.composer_has_text, reading
