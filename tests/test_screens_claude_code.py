"""Claude Code's recorded screens (scripts/record_screens/claude_code.py) against the
provider's pure functions: no tmux, no CLI. After a CLI upgrade, re-record and run
this file to see at once which screen the provider no longer reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from screen_fixtures import ScreenFixtures

from cli_agent_orchestrator.models import TerminalStatus
from cli_agent_orchestrator.providers import claude_code
from cli_agent_orchestrator.providers.base import LaunchContext, Screen

SCREENS = ScreenFixtures("claude_code")
STATES = SCREENS.states()


def load(state: str) -> tuple[list[str], dict]:
    return SCREENS.text(state).splitlines(), SCREENS.expected(state)


def test_fixtures_are_recorded() -> None:
    assert {"idle", "working", "done", "permission", "trust", "error"} <= set(STATES)


@pytest.mark.parametrize("state", STATES)
def test_status(state: str) -> None:
    lines, expected = load(state)
    reading = claude_code.read_status(Screen(lines[-50:]))  # what a 50-row pane shows
    assert reading.status == TerminalStatus(expected["status"]), reading
    assert reading.composer_has_text == expected.get("composer_has_text", False), reading
    if reading.status in (TerminalStatus.ERROR, TerminalStatus.WAITING_USER_ANSWER):
        assert reading.reason  # always says why


@pytest.mark.parametrize("state", STATES)
def test_startup_answer(state: str) -> None:
    lines, expected = load(state)
    # Only first-run and trust screens are answered; a permission prompt never is.
    assert claude_code.answer_startup_dialog(Screen(lines[-50:])) == expected.get("startup_keys")


@pytest.mark.parametrize("state", [s for s in STATES if "reply" in load(s)[1]])
def test_reply(state: str) -> None:
    lines, expected = load(state)
    assert claude_code.extract_reply(lines) == expected["reply"]


def test_reply_skips_tool_calls_and_wrapped_arguments() -> None:
    history = [
        "❯ run it",
        "",
        '● cao-mcp-server - handoff (MCP)(agent_profile: "developer",',
        '  message: "a long task")',
        '  ⎿  {"success": true}',
        "",
        "● Worker said: done",
        "",
        "✻ Baked for 1s",
        "",
        "─" * 40,
        "❯ ",
        "─" * 40,
        "  ? for shortcuts",
    ]
    assert claude_code.extract_reply(history) == "Worker said: done"
    assert claude_code.extract_reply(history[:6] + history[8:]) is None
    assert claude_code.read_status(Screen(history)).status == TerminalStatus.COMPLETED


def test_no_reply_before_the_first_turn() -> None:
    assert claude_code.extract_reply(load("idle")[0]) is None


def test_quoted_dialog_text_in_an_answer_is_not_a_dialog() -> None:
    lines, _ = load("done")
    quoted = [
        line.replace("Hello from the scripted model.", "Press Enter to continue · Do you want to proceed?")
        for line in lines
    ]
    assert claude_code.read_status(Screen(quoted)).status == TerminalStatus.COMPLETED
    assert claude_code.answer_startup_dialog(Screen(quoted)) is None


@pytest.mark.parametrize(
    "event,payload,status",
    [
        ("SessionStart", {"source": "startup"}, "idle"),
        ("SessionStart", {"source": "compact"}, None),
        ("UserPromptSubmit", {"prompt": "x"}, "processing"),
        ("Stop", {"last_assistant_message": "hi"}, "completed"),
        ("StopFailure", {"error": "server_error", "last_assistant_message": "API Error: 500 boom"}, "error"),
        ("Notification", {"notification_type": "permission_prompt"}, None),
        ("SessionEnd", {}, None),
    ],
)
def test_hooks(event: str, payload: dict, status: str | None) -> None:
    reading = claude_code.status_from_hook(event, payload)
    assert (reading.status if reading else None) == (TerminalStatus(status) if status else None)
    if event == "StopFailure":
        assert reading is not None and reading.reason == "API Error: 500 boom"


CREDENTIAL = "abcd1234." + "m" * 43  # the shape agent_credentials gives


def _ctx(tmp_path: Path, **kw) -> LaunchContext:
    base = dict(
        terminal_id="abcd1234",
        profile_name="dev",
        system_prompt="Be brief.\nAlways.",
        working_directory=str(tmp_path),
        home_dir=tmp_path / "cao",
        mcp_url="http://127.0.0.1:9889/mcp",
        mcp_token=CREDENTIAL,
    )
    return LaunchContext(**{**base, **kw})


def test_launch_puts_everything_in_the_terminal_dir(tmp_path: Path) -> None:
    ctx = _ctx(
        tmp_path,
        model="claude-sonnet-4-6",
        allowed_tools=["@other", "execute_bash"],
        profile_extra={"mcpServers": {"other": {"command": "x"}, "cao-mcp-server": {"command": "y"}}},
    )
    launch = claude_code.build_launch(ctx)
    argv = launch.argv
    tdir = tmp_path / "cao" / "tmp" / "abcd1234"
    settings = json.loads((tdir / "settings.json").read_text())
    mcp = json.loads((tdir / "mcp.json").read_text())["mcpServers"]
    assert argv[argv.index("--settings") + 1] == str(tdir / "settings.json")
    assert argv[argv.index("--append-system-prompt-file") + 1] == str(tdir / "system_prompt.md")
    assert (tdir / "system_prompt.md").read_text() == "Be brief.\nAlways."
    assert "--strict-mcp-config" in argv and argv[argv.index("--model") + 1] == "claude-sonnet-4-6"
    assert "--dangerously-skip-permissions" not in argv and "skipDangerousModePermissionPrompt" not in settings
    allow, deny = settings["permissions"]["allow"], settings["permissions"]["deny"]
    assert allow == ["mcp__cao-mcp-server", "mcp__other", "Bash", "BashOutput", "KillShell"]
    assert {"Read", "Write", "Edit", "WebFetch"} <= set(deny) and "Bash" not in deny
    assert set(settings["hooks"]) == {"SessionStart", "UserPromptSubmit", "Stop", "StopFailure"}
    assert settings["hooks"]["Stop"][0]["hooks"][0]["command"].endswith(f"bash {tdir / 'cao-hook.sh'} Stop")
    assert mcp["other"] == {"command": "x"}
    # cao's own server is cao-server's /mcp; the credential travels as a header that names the
    # pane's CAO_MCP_TOKEN (Claude expands it): it is in neither the file nor argv.
    assert mcp["cao-mcp-server"] == {
        "type": "http",
        "url": "http://127.0.0.1:9889/mcp",
        "headers": {"Authorization": "Bearer ${CAO_MCP_TOKEN}"},
        "alwaysLoad": True,
    }
    assert not any(CREDENTIAL in arg for arg in argv)
    assert not [f.name for f in tdir.iterdir() if f.is_file() and CREDENTIAL in f.read_text()]
    assert all(f.stat().st_mode & 0o777 == 0o600 for f in tdir.iterdir())
    assert claude_code.PROVIDER.mcp == "http" and claude_code.PROVIDER.lists_tools_at_start
    assert launch.env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and launch.env["DISABLE_AUTOUPDATER"] == "1"
    assert "ANTHROPIC_AUTH_TOKEN" not in launch.env and "HOME" not in launch.env


def test_launch_bypass_modes(tmp_path: Path) -> None:
    for ctx in (
        _ctx(tmp_path, yolo=True),
        _ctx(tmp_path, allowed_tools=["*"]),
        _ctx(tmp_path, profile_extra={"permissionMode": "bypassPermissions"}),
    ):
        launch = claude_code.build_launch(ctx)
        settings = json.loads((tmp_path / "cao" / "tmp" / "abcd1234" / "settings.json").read_text())
        assert "--dangerously-skip-permissions" in launch.argv and settings["skipDangerousModePermissionPrompt"]
    plan = claude_code.build_launch(_ctx(tmp_path, profile_extra={"permissionMode": "plan"})).argv
    assert plan[plan.index("--permission-mode") + 1] == "plan"


def test_composer_with_blank_lines_and_no_break_spaces() -> None:
    # A pasted multi-line message (an assign's task has a blank line before its note).
    rule = "─" * 60
    rows = [
        "● Earlier answer.",
        "",
        rule,
        "❯\xa0say hello",
        "",
        "  [Assigned by terminal 0123abcd.]",
        rule,
        "  ⏵⏵ bypass permissions on (shift+tab to cycle)",
    ]
    reading = claude_code.read_status(Screen(rows))
    assert reading.status == TerminalStatus.IDLE and reading.composer_has_text
    empty = claude_code.read_status(Screen(rows[:3] + ["❯\xa0"] + rows[6:]))
    assert empty.status == TerminalStatus.COMPLETED and not empty.composer_has_text


@pytest.mark.parametrize(
    "answer,keys",
    [
        ("yes", ["1"]),
        ("1", ["1"]),
        ("Yes.", ["1"]),
        ("2", ["2"]),
        ("yes, and always", ["2"]),
        ("no", ["3"]),
        ("3", ["3"]),
        ("whatever you think", ["3"]),
    ],
)
def test_permission_answers_become_menu_keys(answer: str, keys: list[str]) -> None:
    # Claude's menus ignore pasted text (then Enter would confirm "Yes"); an unclear answer refuses.
    assert claude_code.dialog_keys(Screen(load("permission")[0]), answer) == keys


def test_no_keys_without_a_menu() -> None:
    for state in ("interrupted", "done", "composer"):
        assert claude_code.dialog_keys(Screen(load(state)[0]), "yes") is None


def test_a_ticked_choice_is_being_applied_not_asked_again() -> None:
    lines = [r.replace("Yes, I trust this folder", "Yes, I trust this folder ✔") for r in load("trust")[0]]
    reading = claude_code.read_status(Screen(lines))
    assert reading.status == TerminalStatus.PROCESSING  # so cao does not see a dialog to answer again


def test_a_half_drawn_dialog_is_not_reported() -> None:
    lines = load("trust")[0]
    last = max(i for i, line in enumerate(lines) if line.strip())
    partial = Screen(lines[:last])  # every row but the key hints, which Claude draws last
    assert claude_code.read_status(partial).status == TerminalStatus.UNKNOWN
