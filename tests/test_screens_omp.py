"""The omp provider's screen reading on recorded screens of the real CLI (no tmux, fast).

Fixtures were captured by hand from omp 18.2.3 (160x45, `tmux capture-pane -p`) against the
scripted model: `<state>.txt` is the screen, `<state>.json` what the provider must read from it,
`<state>.history.txt` the scrollback of a finished turn. Also the extension's events, which are
what decides omp's status when cao-server hears them.
"""

from __future__ import annotations

import pytest
from screen_fixtures import ScreenFixtures

from cli_agent_orchestrator.models import TerminalStatus
from cli_agent_orchestrator.providers.base import Screen
from cli_agent_orchestrator.providers.omp import (
    dialog_keys,
    extract_reply,
    read_status,
    reply_from_hook,
    status_from_hook,
)

SCREENS = ScreenFixtures("omp")
STATES = SCREENS.states(".json")


def test_every_state_was_recorded() -> None:
    assert {"idle", "composer", "working_start", "working", "done", "tool_done", "permission", "error"} <= set(STATES)


@pytest.mark.parametrize("state", STATES)
def test_status_read_from_the_recorded_screen(state: str) -> None:
    expected = SCREENS.expected(state)
    reading = read_status(Screen(SCREENS.lines(state)))
    assert reading.status == TerminalStatus(expected["status"]), reading
    assert reading.composer_has_text == expected.get("composer_has_text", False)
    assert expected.get("reason", "") in reading.reason


@pytest.mark.parametrize("state", SCREENS.states(".history.txt"))
def test_reply_read_from_the_recorded_history(state: str) -> None:
    expected = SCREENS.expected(state)
    reply = extract_reply(SCREENS.lines(state, ".history.txt"))
    assert reply is not None
    if "reply" in expected:
        assert reply == expected["reply"]
    else:
        assert reply.startswith(expected["reply_starts"]), reply


def test_no_reply_on_a_failed_turn_or_a_screen_without_the_composer() -> None:
    assert extract_reply(SCREENS.lines("error")) is None
    assert extract_reply(SCREENS.lines("permission")) is None


def test_the_approval_dialog_takes_keys_and_other_screens_take_text() -> None:
    dialog = Screen(SCREENS.lines("permission"))
    assert dialog_keys(dialog, "yes") == ["Enter"]
    assert dialog_keys(dialog, "Deny") == ["Down", "Enter"]
    assert dialog_keys(dialog, "something else") is None
    assert dialog_keys(Screen(SCREENS.lines("idle")), "yes") is None


def test_extension_events() -> None:
    assert status_from_hook("agent_start", {}).status == TerminalStatus.PROCESSING
    assert status_from_hook("tool_execution_start", {}).status == TerminalStatus.PROCESSING
    done = {"stop_reason": "stop", "text": "  the answer\n"}
    assert status_from_hook("agent_end", done).status == TerminalStatus.COMPLETED
    assert reply_from_hook("agent_end", done) == "the answer"
    failed = {"stop_reason": "error", "error": "400 scripted refusal", "text": ""}
    reading = status_from_hook("agent_end", failed)
    assert reading.status == TerminalStatus.ERROR and "scripted refusal" in reading.reason
    assert reply_from_hook("agent_end", failed) is None
    assert status_from_hook("agent_end", {"stop_reason": "aborted"}).status == TerminalStatus.IDLE
    assert status_from_hook("session_start", {}) is None
