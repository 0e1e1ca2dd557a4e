"""The copilot_cli provider's screen reading on screens of the real Copilot CLI 1.0.102 (no tmux, fast).

`<state>.txt` is the screen as tmux showed it (220x50), captured from the real binary against the
scripted model; `<state>.json` is what the provider must read from it. After a Copilot upgrade,
re-capture and run this file to see at once which reading broke.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from screen_fixtures import ScreenFixtures

from cli_agent_orchestrator.models import TerminalStatus
from cli_agent_orchestrator.providers import copilot_cli
from cli_agent_orchestrator.providers.base import LaunchContext, Screen
from cli_agent_orchestrator.providers.copilot_cli import (
    answer_startup_dialog,
    dialog_keys,
    extract_reply,
    read_status,
    reply_from_hook,
    status_from_hook,
)

SCREENS = ScreenFixtures("copilot_cli")
STATES = SCREENS.states(".txt")


def test_every_state_was_recorded() -> None:
    assert {
        "trust",
        "starting",
        "idle",
        "composer",
        "working",
        "done",
        "tool_done",
        "permission",
        "permission_answered",
        "declined",
    } <= set(STATES)


@pytest.mark.parametrize("state", STATES)
def test_status_and_reply_read_from_the_recorded_screen(state: str) -> None:
    expected = SCREENS.expected(state)
    lines = SCREENS.lines(state)
    reading = read_status(Screen([line.rstrip() for line in lines]))
    assert reading.status == TerminalStatus(expected["status"]), reading
    assert reading.composer_has_text == expected.get("composer_has_text", False)
    assert reading.definite == expected.get("definite", False)
    assert expected.get("reason", "") in reading.reason
    if "reply" in expected:
        assert extract_reply(lines) == expected["reply"]


def test_the_scrollbar_column_is_not_part_of_the_answer() -> None:
    rows = [line.rstrip() + " " * 4 + "┃" if 0 < i < 30 else line for i, line in enumerate(SCREENS.lines("done"))]
    assert extract_reply(rows) == "Hello from the scripted model.\nSecond line, exact."
    assert read_status(Screen(rows)).status == TerminalStatus.COMPLETED


def test_start_up_notices_are_not_an_answer() -> None:
    """Before the first prompt, `● Tip:` and `● MCP Servers reloaded` rows look like answers."""
    assert extract_reply(SCREENS.lines("idle")) is None
    assert read_status(Screen(SCREENS.lines("idle"))).status == TerminalStatus.IDLE


def test_trust_is_answered_with_enter_and_only_trust() -> None:
    assert answer_startup_dialog(Screen(SCREENS.lines("trust"))) == ["Enter"]
    assert answer_startup_dialog(Screen(SCREENS.lines("permission"))) is None


def test_dialog_answers_are_menu_keys() -> None:
    screen = Screen(SCREENS.lines("permission"))
    assert dialog_keys(screen, "yes") == ["1"]
    assert dialog_keys(screen, "2") == ["2"]
    assert dialog_keys(screen, "no") == ["Escape"]


def test_hooks_mean_busy_and_done_and_nothing_else() -> None:
    assert status_from_hook("userPromptSubmitted", {}).status == TerminalStatus.PROCESSING
    assert status_from_hook("postToolUse", {}).status == TerminalStatus.PROCESSING
    assert status_from_hook("agentStop", {"stopReason": "end_turn"}).status == TerminalStatus.COMPLETED
    # The permission notice comes before the dialog takes keys: the screen reports the dialog.
    assert status_from_hook("notification", {"notification_type": "permission_prompt"}) is None


def test_the_reply_comes_from_the_transcript_agent_stop_names(tmp_path: Path) -> None:
    events = [
        {"type": "user.message", "data": {"content": "first"}},
        {"type": "assistant.message", "data": {"content": "old answer"}},
        {"type": "user.message", "data": {"content": "second"}},
        {"type": "assistant.message", "data": {"content": "", "toolRequests": [{"name": "bash"}]}},
        {"type": "tool.execution_complete", "data": {}},
        {"type": "assistant.message", "data": {"content": "Line one.\n\nLine two."}},
        {"type": "assistant.turn_end", "data": {}},
    ]
    transcript = tmp_path / "events.jsonl"
    transcript.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert reply_from_hook("agentStop", {"transcriptPath": str(transcript)}) == "Line one.\n\nLine two."
    transcript.write_text("".join(json.dumps(e) + "\n" for e in events[:4]))
    assert reply_from_hook("agentStop", {"transcriptPath": str(transcript)}) is None  # no text this turn
    assert reply_from_hook("agentStop", {"transcriptPath": str(tmp_path / "gone.jsonl")}) is None
    assert reply_from_hook("userPromptSubmitted", {"transcriptPath": str(transcript)}) is None


def context(tmp_path: Path, **kw) -> LaunchContext:
    base = dict(
        terminal_id="abcd1234",
        profile_name="dev",
        system_prompt="Be careful.",
        working_directory=str(tmp_path),
        home_dir=tmp_path / "cao",
        mcp_url="http://127.0.0.1:9889/mcp",
        mcp_token="secret-token",
    )
    return LaunchContext(**{**base, **kw})


def test_launch_keeps_everything_per_terminal_and_the_token_out_of_argv_and_files(tmp_path: Path) -> None:
    launch = copilot_cli.build_launch(context(tmp_path, allowed_tools=["fs_read", "fs_list", "@cao-mcp-server"]))
    argv = launch.argv
    assert "secret-token" not in " ".join(argv) + json.dumps(launch.env)
    own = tmp_path / "cao" / "tmp" / "abcd1234"
    assert all("secret-token" not in p.read_text() for p in own.rglob("*") if p.is_file())
    mcp = json.loads((own / "copilot-mcp.json").read_text())["mcpServers"]["cao-mcp-server"]
    assert mcp["type"] == "http" and mcp["headers"] == {"X-CAO-Agent-Token": "${CAO_MCP_TOKEN}"}
    hooks = json.loads((own / "copilot-plugin" / "hooks.json").read_text())["hooks"]
    assert set(hooks) == {"userPromptSubmitted", "postToolUse", "agentStop"}
    # A reviewer-like set: writes and the shell are not even offered; what is left runs unasked.
    excluded = next(a for a in argv if a.startswith("--excluded-tools=")).split("=", 1)[1].split(",")
    assert {"create", "edit", "bash"} <= set(excluded) and "view" not in excluded
    assert "--allow-all-tools" in argv and "--yolo" not in argv
    assert launch.env["COPILOT_CUSTOM_INSTRUCTIONS_DIRS"].startswith(str(own))


def test_yolo_is_unrestricted_and_permission_mode_default_keeps_prompts(tmp_path: Path) -> None:
    yolo = copilot_cli.build_launch(context(tmp_path, allowed_tools=["fs_read"], yolo=True)).argv
    assert "--yolo" in yolo and not [a for a in yolo if a.startswith("--excluded-tools")]
    asks = copilot_cli.build_launch(
        context(tmp_path, allowed_tools=["fs_*", "execute_bash"], profile_extra={"permissionMode": "default"})
    ).argv
    assert "--allow-all-tools" not in asks and "--yolo" not in asks
