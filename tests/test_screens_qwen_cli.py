"""The qwen_cli provider's screen reading on recorded screens of the real CLI (no tmux, fast).

Fixtures come from scripts/record_screens/qwen_cli.py: `<state>.txt` is the screen as
tmux shows it (220x50), `<state>.json` what the provider must read from it. After a CLI
upgrade, re-record and run this file to see at once which reading broke.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from screen_fixtures import ScreenFixtures

from cli_agent_orchestrator.models import TerminalStatus
from cli_agent_orchestrator.providers import qwen_cli
from cli_agent_orchestrator.providers.base import LaunchContext, Screen, StatusReading
from cli_agent_orchestrator.providers.qwen_cli import dialog_keys, extract_reply, read_status, status_from_hook

SCREENS = ScreenFixtures("qwen_cli")
STATES = SCREENS.states(".txt")


def test_every_state_was_recorded() -> None:
    assert {
        "starting",
        "idle",
        "composer",
        "working",
        "done",
        "tool_done",
        "permission",
        "permission_answered",
        "error",
        "declined",
        "cancelled",
        "idle_yolo",
        "trust",
    } <= set(STATES)


@pytest.mark.parametrize("state", STATES)
def test_status_and_reply_read_from_the_recorded_screen(state: str) -> None:
    expected = SCREENS.expected(state)
    lines = SCREENS.lines(state)
    reading = read_status(Screen(lines))
    assert reading.status == TerminalStatus(expected["status"]), reading
    assert reading.composer_has_text == expected.get("composer_has_text", False)
    assert expected.get("reason", "") in reading.reason
    if "reply" in expected:
        assert extract_reply(lines) == expected["reply"]


COMPOSER = ["─" * 80, ">   Type your message or @path/to/file", "─" * 80, "  ? for shortcuts"]


def test_history_with_status_rows_below_the_answer_extracts_only_the_answer() -> None:
    history = [
        "",
        "  > please say hello",
        "",
        "  ✦ First paragraph.",
        "",
        "     - a list item",
        "    Last line.",
        "",
        "  ⠏ Reticulating splines... (1s · esc to cancel)",
        *COMPOSER,
    ]
    assert extract_reply(history) == "First paragraph.\n\n - a list item\nLast line."
    assert read_status(Screen(history)).status == TerminalStatus.PROCESSING


def test_an_answer_quoting_the_busy_marker_is_not_busy() -> None:
    rows = ["  > quote it", "  ✦ It says", "    (1s · esc to cancel)", "", *COMPOSER]
    assert read_status(Screen(rows)).status == TerminalStatus.COMPLETED


def test_an_empty_composer_showing_only_the_cursor_has_no_text() -> None:
    rows = ["  > hi", "  ✦ Hello.", "─" * 80, "> \u200b", "─" * 80, "  ? for shortcuts"]
    assert read_status(Screen(rows)) == StatusReading(TerminalStatus.COMPLETED)


def test_no_composer_and_no_dialog_is_still_starting() -> None:
    assert read_status(Screen(["", "  Qwen Code (v0.15.10)", ""])).status == TerminalStatus.UNKNOWN


def test_hooks_map_to_statuses() -> None:
    assert status_from_hook("UserPromptSubmit", {"session_id": "s1"}).status == TerminalStatus.PROCESSING
    assert status_from_hook("PostToolUse", {"session_id": "s1"}).status == TerminalStatus.PROCESSING
    idle = {"session_id": "s1", "notification_type": "idle_prompt"}
    assert status_from_hook("Notification", idle).status == TerminalStatus.COMPLETED
    # Stop runs before the answer is on screen; the idle notice ends the turn instead.
    assert status_from_hook("Stop", {"session_id": "s1"}) is None
    asked = status_from_hook(
        "Notification",
        {
            "session_id": "s1",
            "notification_type": "permission_prompt",
            "message": "Qwen Code needs your permission to use run_shell_command",
        },
    )
    assert asked == StatusReading(
        TerminalStatus.WAITING_USER_ANSWER, "Qwen Code needs your permission to use run_shell_command"
    )


def test_the_idle_notice_after_a_failed_turn_keeps_the_error() -> None:
    """A pure function: what came before is told by the caller (the status monitor), so asking
    twice gives the same answer."""
    failed = status_from_hook(
        "StopFailure", {"session_id": "s2", "error": "invalid_request", "error_details": "400 scripted failure"}
    )
    assert failed == StatusReading(TerminalStatus.ERROR, "400 scripted failure")
    idle = {"session_id": "s2", "notification_type": "idle_prompt"}
    for _ in range(2):
        assert status_from_hook("Notification", idle, "StopFailure") is None
    assert status_from_hook("Notification", idle, "UserPromptSubmit").status == TerminalStatus.COMPLETED


def test_dialogs_are_answered_with_menu_keys() -> None:
    for state in ("permission", "trust"):
        dialog = Screen(SCREENS.lines(state))
        assert dialog_keys(dialog, "yes") == ["1"]
        assert dialog_keys(dialog, " 2 ") == ["2"]
        # The menu ignores words and Enter would confirm option 1: anything else declines.
        assert dialog_keys(dialog, "no, do not run it") == ["Escape"]


def test_cao_s_tools_come_from_its_endpoint_with_the_credential_only_by_reference(tmp_path) -> None:
    """Qwen reaches /mcp itself (`httpUrl`) and expands `${VAR}` in its settings from its own
    environment: the header names CAO_MCP_TOKEN, so no file and no argument holds the credential."""
    secret = "0123abcd.the-credential"
    system = tmp_path / "system.json"  # the admin's, with a stale stdio entry of cao's name
    system.write_text(json.dumps({"mcpServers": {"cao-mcp-server": {"command": "cao-mcp-server", "cwd": "/"}}}))
    ctx = LaunchContext(
        "0123abcd",
        "dev",
        "",
        str(tmp_path),
        tmp_path / "cao",
        allowed_tools=["fs_read", "@cao-mcp-server"],
        mcp_url="http://127.0.0.1:9889/mcp",
        mcp_token=secret,
        profile_extra={"mcpServers": {"docs": {"command": "docs-mcp"}, "cao-mcp-server": {"command": "old"}}},
        environ={"QWEN_CODE_SYSTEM_SETTINGS_PATH": str(system)},
    )
    launch = qwen_cli.build_launch(ctx)
    path = Path(launch.env["QWEN_CODE_SYSTEM_SETTINGS_PATH"])
    settings = json.loads(path.read_text())
    assert settings["mcpServers"]["cao-mcp-server"] == {  # whole: the stale entry lends it nothing
        "httpUrl": "http://127.0.0.1:9889/mcp",
        "headers": {"X-CAO-Agent-Token": "${CAO_MCP_TOKEN}"},
        "trust": True,
    }
    assert settings["mcp"] == {"excluded": ["docs"]}  # outside the tool set
    assert path.stat().st_mode & 0o777 == 0o600
    assert secret not in json.dumps([launch.argv, launch.env])
    assert not [f for f in (tmp_path / "cao").rglob("*") if f.is_file() and secret in f.read_text()]
