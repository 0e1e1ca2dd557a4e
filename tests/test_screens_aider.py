"""The aider provider's screen reading on recorded screens of the real CLI (no tmux, fast).

Fixtures: `tests/fixtures/screens/aider/`, captured from aider 0.86.2 (220x50 pane, launched with
the provider's own argv, `--no-pretty`, against the scripted model). `<state>.json` holds what
the provider must read and the cursor: aider draws nothing while the model works, so the cursor
leaving the prompt is what tells a submitted prompt from one still being typed.
"""

from __future__ import annotations

import pytest
from screen_fixtures import ScreenFixtures

from cli_agent_orchestrator.models import TerminalStatus
from cli_agent_orchestrator.providers import aider, tool_names
from cli_agent_orchestrator.providers.aider import answer_startup_dialog, dialog_keys, extract_reply, read_status
from cli_agent_orchestrator.providers.base import LaunchContext, Screen

SCREENS = ScreenFixtures("aider")
STATES = SCREENS.states(".json")


def test_every_state_was_recorded() -> None:
    assert {
        "git_question",
        "idle",
        "composer",
        "composer_multiline",
        "working",
        "done",
        "create_file",
        "edit_done",
        "permission",
        "permission_answered",
        "error",
    } <= set(STATES)


@pytest.mark.parametrize("state", STATES)
def test_status_and_reply_read_from_the_recorded_screen(state: str) -> None:
    expected = SCREENS.expected(state)
    reading = read_status(SCREENS.screen(state))
    assert reading.status == TerminalStatus(expected["status"]), reading
    assert reading.composer_has_text == expected.get("composer_has_text", False)
    if "reply" in expected:
        assert extract_reply(SCREENS.lines(state)) == expected["reply"]


def test_the_reply_is_the_models_raw_text_without_aiders_own_lines() -> None:
    assert extract_reply(SCREENS.lines("done", ".history.txt")) == "Hello from the scripted model.\nSecond line here."
    edit = extract_reply(SCREENS.lines("edit_done", ".history.txt"))
    # The edit block's ">>>>>>> REPLACE" row is not taken for a prompt; "Applied edit" is aider's, not the model's.
    assert (
        edit == "Creating notes.txt.\n\nnotes.txt\n```\n<<<<<<< SEARCH\n=======\nwritten by aider\n>>>>>>> REPLACE\n```"
    )
    assert (
        extract_reply(SCREENS.lines("permission_answered", ".history.txt"))
        == "Run this:\n\n```bash\ntouch marker.txt\n```"
    )


def test_a_failed_turn_has_no_reply_and_names_the_error() -> None:
    assert extract_reply(SCREENS.lines("error")) is None
    assert "scripted failure" in read_status(SCREENS.screen("error")).reason


def test_questions_name_what_they_ask_about() -> None:
    assert read_status(SCREENS.screen("permission")).reason == "Run shell command? (touch marker.txt)"
    assert read_status(SCREENS.screen("create_file")).reason == "Create new file? (notes.txt)"


def test_the_git_question_at_start_is_answered_no_and_nothing_else_is() -> None:
    assert answer_startup_dialog(SCREENS.screen("git_question")) == ["n", "Enter"]
    assert answer_startup_dialog(SCREENS.screen("permission")) is None
    assert answer_startup_dialog(SCREENS.screen("idle")) is None


@pytest.mark.parametrize(
    ("answer", "keys"),
    [
        ("yes", ["y", "Enter"]),
        ("1", ["y", "Enter"]),
        ("no", ["n", "Enter"]),
        ("d", ["d", "Enter"]),
        ("x", ["n", "Enter"]),
    ],
)
def test_answers_become_aiders_letters(answer: str, keys: list[str]) -> None:
    assert dialog_keys(Screen([]), answer) == keys


def _argv(tmp_path, **ctx: object) -> list[str]:
    base = {"terminal_id": "ab12cd34", "profile_name": "p", "system_prompt": "Be brief.", "home_dir": tmp_path}
    return aider.build_launch(LaunchContext(working_directory=str(tmp_path), **{**base, **ctx})).argv


def test_a_reviewers_set_turns_edits_and_shell_commands_off(tmp_path) -> None:
    reviewer = _argv(tmp_path, allowed_tools=["@builtin", "fs_read", "fs_list", "@cao-mcp-server"])
    assert {"--dry-run", "--no-suggest-shell-commands", "--yes-always"} <= set(reviewer)
    developer = _argv(tmp_path, allowed_tools=["@builtin", "fs_*", "execute_bash", "web_fetch"])
    assert "--dry-run" not in developer and "--no-suggest-shell-commands" not in developer
    asks = _argv(tmp_path, allowed_tools=["fs_*"], profile_extra={"permissionMode": "default"})
    assert "--yes-always" not in asks and "--no-suggest-shell-commands" in asks
    assert "--yes-always" in _argv(tmp_path, yolo=True, allowed_tools=["fs_read"])
    assert "--dry-run" not in _argv(tmp_path, yolo=True, allowed_tools=["fs_read"])
    assert tool_names.ENFORCEMENT["aider"] == "partial"


def test_the_profile_prompt_is_a_private_read_only_file_of_the_terminal(tmp_path) -> None:
    argv = _argv(tmp_path)
    prompt = tmp_path / "tmp" / "ab12cd34" / aider.PROFILE_FILE
    assert argv[argv.index("--read") + 1] == str(prompt) and prompt.read_text() == "Be brief.\n"
    assert prompt.stat().st_mode & 0o777 == 0o600
    assert "--no-git" in argv  # tmp_path is no repository: aider must not offer to make one
    (tmp_path / ".git").mkdir()
    assert "--no-git" not in _argv(tmp_path)
