"""The hermes provider's screen reading on recorded screens of the real CLI (no tmux, fast).

Fixtures were captured from `hermes chat --cli` 0.19.0 in a 160x45 tmux pane against the scripted
model: `<state>.txt` is the screen as tmux shows it, `<state>.json` what the provider must read from
it, `done.history.txt` a whole scrollback. After a CLI upgrade, re-record and run this file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from screen_fixtures import ScreenFixtures

from cli_agent_orchestrator.models import TerminalStatus
from cli_agent_orchestrator.providers import hermes
from cli_agent_orchestrator.providers.base import LaunchContext, Screen
from cli_agent_orchestrator.providers.hermes import dialog_keys, extract_reply, read_status

SCREENS = ScreenFixtures("hermes")
STATES = SCREENS.states(".txt")


def test_every_state_was_recorded() -> None:
    assert {"starting", "idle_yolo", "composer", "busy", "done", "permission", "permission_answered"} <= set(STATES)


@pytest.mark.parametrize("state", [s for s in STATES if not s.endswith(".history")])
def test_status_and_reply_read_from_the_recorded_screen(state: str) -> None:
    expected = SCREENS.expected(state)
    lines = SCREENS.lines(state)
    reading = read_status(Screen(lines))
    assert reading.status == TerminalStatus(expected["status"]), reading
    assert reading.composer_has_text == expected.get("composer_has_text", False)
    assert expected.get("reason", "") in reading.reason
    if "reply" in expected:
        assert extract_reply(lines) == expected["reply"]


def test_the_last_answer_of_a_whole_history_is_extracted() -> None:
    assert extract_reply(SCREENS.lines("done", ".history.txt")) == "too late"


def test_an_answer_box_still_being_printed_is_not_done_yet() -> None:
    lines = SCREENS.lines("done")
    bottom = max(i for i, row in enumerate(lines) if row.startswith("╰"))
    assert read_status(Screen(lines[:bottom] + lines[bottom + 1 :])).status == TerminalStatus.IDLE


def test_a_multi_line_answer_keeps_its_lines_and_blank_rows() -> None:
    history = [
        "● say it",
        "╭─ ⚕ Hermes " + "─" * 40 + "╮",
        "    one",
        "",
        "    two",
        "╰" + "─" * 52 + "╯",
        " ⚕ m │ ⏲ 1s",
    ]
    assert extract_reply(history) == "one\n\ntwo"
    assert extract_reply(["● say it", "  ┊ 💻 $ echo hi"]) is None  # no answer box yet


@pytest.mark.parametrize(
    ("answer", "key"), [("yes", "1"), ("1", "1"), ("session", "2"), ("always", "3"), ("no", "4"), ("Deny.", "4")]
)
def test_the_dangerous_command_menu_is_answered_with_a_digit(answer: str, key: str) -> None:
    assert dialog_keys(Screen(SCREENS.lines("permission")), answer) == [key]
    assert dialog_keys(Screen(SCREENS.lines("idle_yolo")), answer) is None  # no menu: typed as text


def ctx(tmp_path: Path, **kw: object) -> LaunchContext:
    base: dict = {
        "terminal_id": "abcd1234",
        "profile_name": "dev",
        "system_prompt": "Be brief.",
        "working_directory": str(tmp_path),
        "home_dir": tmp_path / "cao",
        "mcp_url": "http://127.0.0.1:9889/mcp",
        "mcp_token": "secret-token",
        "environ": {"HOME": str(tmp_path / "home")},
    }
    return LaunchContext(**{**base, **kw})


def test_launch_shadows_the_user_home_and_never_writes_it(tmp_path: Path) -> None:
    user = tmp_path / "home" / ".hermes"
    user.mkdir(parents=True)
    (user / "config.yaml").write_text("model:\n  default: m\nmcp_servers:\n  mine:\n    url: http://x/mcp\n")
    (user / ".env").write_text("KEY=1\n")
    launch = hermes.build_launch(ctx(tmp_path, allowed_tools=["fs_read", "@builtin"]))
    home = Path(launch.env["HERMES_HOME"])
    text = (home / "config.yaml").read_text()
    assert "mine" in text and "cao-mcp-server" in text and "${CAO_MCP_TOKEN}" in text and "secret-token" not in text
    assert (home / ".env").resolve() == (user / ".env").resolve()
    assert launch.env["HERMES_EPHEMERAL_SYSTEM_PROMPT"] == "Be brief."
    assert launch.argv[-2:] == ["--toolsets", "file,todo,memory,skills,clarify,session_search,mcp-cao-mcp-server"]
    assert "--yolo" not in launch.argv
    assert (user / "config.yaml").read_text().startswith("model:")  # unchanged
    assert "--yolo" in hermes.build_launch(ctx(tmp_path, yolo=True)).argv
    assert "--yolo" in hermes.build_launch(ctx(tmp_path, allowed_tools=["execute_bash"])).argv  # the set runs
    asks = ctx(tmp_path, allowed_tools=["execute_bash"], profile_extra={"permissionMode": "default"})
    assert "--yolo" not in hermes.build_launch(asks).argv  # Hermes' own prompts kept


def test_a_running_clock_in_the_status_bar_is_busy_even_before_the_composer_says_so() -> None:
    lines = [row.replace("⏲ 20s │ ✓ 0s", "⏱ 0s") for row in SCREENS.lines("done")]
    assert read_status(Screen(lines)).status == TerminalStatus.PROCESSING


def test_the_busy_mark_alone_is_busy_a_redraw_not_finished_is_not_done() -> None:
    lines = SCREENS.lines("done")
    at = next(i for i, row in enumerate(lines) if row.rstrip() == "❯")
    lines[at] = "⚕ ❯"  # read between the mark and the hints of one redraw
    assert read_status(Screen(lines)).status == TerminalStatus.PROCESSING
