"""The codex provider's screen reading on recorded screens of the real CLI (no tmux, no CLI).

Fixtures come from scripts/record_screens/codex.py: `<state>.txt` is the visible screen,
`<state>.json` the cursor and the expected reading, `<state>.history.txt` the scrollback
of a finished turn. Re-record after a Codex upgrade; a failure here names the state
the provider no longer reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from screen_fixtures import ScreenFixtures

from cli_agent_orchestrator.models import TerminalStatus
from cli_agent_orchestrator.providers import codex
from cli_agent_orchestrator.providers.base import LaunchContext, Screen

SCREENS = ScreenFixtures("codex")
STATES = SCREENS.states()


def load(state: str) -> tuple[Screen, dict]:
    return SCREENS.screen(state), SCREENS.expected(state)


def test_fixtures_cover_every_state():
    assert {
        "idle",
        "composer",
        "queued",
        "working",
        "working_composer",
        "done",
        "tool_done",
        "permission",
        "permission_answered",
        "interrupted",
        "error",
        "trust",
        "hook_review",
        "idle_yolo",
    } <= set(STATES)


@pytest.mark.parametrize("state", STATES)
def test_read_status(state: str):
    screen, expect = load(state)
    reading = codex.read_status(screen)
    assert reading.status == TerminalStatus(expect["status"]), reading
    if "composer_has_text" in expect:
        assert reading.composer_has_text == expect["composer_has_text"], reading
    if reading.status == TerminalStatus.ERROR:
        assert reading.reason


@pytest.mark.parametrize("state", [s for s in STATES if SCREENS.has(s, ".history.txt")])
def test_extract_reply(state: str):
    _, expect = load(state)
    history = SCREENS.text(state, ".history.txt").splitlines()
    assert codex.extract_reply(history) == expect["reply"]


def test_typing_after_an_error_is_a_new_prompt():
    screen, _ = load("error")
    typed = Screen(screen.lines, screen.cursor_row, screen.cursor_col + 10)
    reading = codex.read_status(typed)
    assert (reading.status, reading.composer_has_text) == (TerminalStatus.IDLE, True)


def test_extract_reply_takes_the_last_turn_and_skips_tool_rows():
    history = [
        "› first",
        "",
        "• old answer",
        "",
        "  Worked for 1s • 10:00",
        "",
        "› second",
        "",
        "• Ran echo hi",
        "  └ hi",
        "",
        "• New answer,",
        "  two lines.",
        "",
        "  Worked for 1s • 10:01",
        "",
        "› Ask Codex to do anything",
        "",
        "  model · /w",
        "  ? for shortcuts",
    ]
    assert codex.extract_reply(history) == "New answer,\ntwo lines."
    assert codex.extract_reply(["› only a prompt", "", "› Ask Codex to do anything"]) is None


def test_quoted_markers_in_a_reply_do_not_fool_the_reader():
    # A finished reply that mentions the busy row and a dialog hint is still a finished turn.
    rows = [
        "› q",
        "",
        "• Working (1s • esc to interrupt)",
        "  Press enter to confirm or esc to cancel",
        "",
        "  Worked for 1s • 10:00",
        "",
        "› Ask Codex to do anything",
        "",
        "  m · /w",
        "  ← for agents · ? for shortcuts",
    ]
    assert codex.read_status(Screen(rows, 7, 2)).status == TerminalStatus.COMPLETED


def test_hooks_map_to_statuses():
    assert codex.status_from_hook("UserPromptSubmit", {}).status == TerminalStatus.PROCESSING
    assert codex.status_from_hook("Stop", {}).status == TerminalStatus.COMPLETED
    assert codex.status_from_hook("SessionStart", {}) is None  # fires at the first prompt, not at launch
    # Dialogs are the screen's: a hook-set "waiting" would outlive the dialog.
    assert codex.status_from_hook("PermissionRequest", {}) is None


CREDENTIAL = "abcd1234." + "m" * 43  # the shape agent_credentials gives


def test_launch_passes_settings_as_overrides_and_never_writes_codex_home(tmp_path):
    (tmp_path / "codex-home").mkdir()
    user_config = (
        '[projects."/elsewhere"]\ntrust_level = "trusted"\n'
        '[shell_environment_policy]\nexclude = ["MY_SECRET"]\n'
        '[hooks]\nStop = [{hooks = [{type = "command", command = "mine"}]}]\n'
    )
    (tmp_path / "codex-home" / "config.toml").write_text(user_config)
    prompt = 'Say "hi".\nTab\there, DEL \x7f, emoji 😀' + "x" * 20000  # longer than tmux takes in one command
    ctx = LaunchContext(
        terminal_id="abcd1234",
        profile_name="p",
        system_prompt=prompt,
        working_directory=str(tmp_path),
        home_dir=tmp_path / "cao",
        model="fake-model",
        environ={"CODEX_HOME": str(tmp_path / "codex-home"), "OPENAI_BASE_URL": "http://127.0.0.1:1/v1"},
        mcp_url="http://127.0.0.1:9889/mcp",
        mcp_token=CREDENTIAL,
    )
    launch = codex.build_launch(ctx)
    assert launch.argv[0] == "/bin/sh" and len(" ".join(launch.argv)) < 1000
    script = Path(launch.argv[1]).read_text()
    for part in (
        "--no-daemon",
        "--no-alt-screen",
        "--dangerously-bypass-hook-trust",
        "-m fake-model",
        "approval_policy=",
        "mcp_servers.cao-mcp-server=",
        "hooks.Stop=",
        '"mine"',
        "model_provider=",
        '"/elsewhere"',
        "check_for_update_on_startup=false",
    ):
        assert part in script, part
    assert "--dangerously-bypass-approvals-and-sandbox" not in script
    # cao's own server is cao-server's /mcp over HTTP: Codex reads the header's value from the
    # variable the entry names, so the credential is in neither argv nor the launch script; and
    # the shell Codex snapshots to $CODEX_HOME does not get it (the user's exclusions stay).
    settings = dict(codex.overrides(ctx))
    server = settings["mcp_servers.cao-mcp-server"]
    assert server["url"] == "http://127.0.0.1:9889/mcp" and "command" not in server
    assert server["env_http_headers"] == {"X-CAO-Agent-Token": "CAO_MCP_TOKEN"} and server["required"] is True
    assert settings["shell_environment_policy.exclude"] == ["MY_SECRET", "CAO_MCP_TOKEN"]
    assert CREDENTIAL not in script and not any(CREDENTIAL in arg for arg in launch.argv)
    assert codex.PROVIDER.mcp == "http" and codex.PROVIDER.lists_tools_at_start
    assert (tmp_path / "codex-home" / "config.toml").read_text() == user_config
    assert list((tmp_path / "codex-home").iterdir()) == [tmp_path / "codex-home" / "config.toml"]
    yolo = codex.build_launch(
        LaunchContext(
            terminal_id="abcd1235",
            profile_name="p",
            system_prompt="",
            working_directory=str(tmp_path),
            home_dir=tmp_path / "cao",
            yolo=True,
        )
    )
    assert "--dangerously-bypass-approvals-and-sandbox" in Path(yolo.argv[1]).read_text()


def test_toml_values_round_trip():
    import tomllib

    value = {"a b": ['x"y\\z\n\t\x01\x7f é 😀', 1, 2.5, True], "plain": {"k": "v"}}
    assert tomllib.loads(f"v = {codex.toml(value)}")["v"] == value


def test_approval_menu_is_answered_with_its_keys():
    from cli_agent_orchestrator.providers.base import Screen
    from cli_agent_orchestrator.providers.codex import dialog_keys

    screen = Screen(SCREENS.text("permission").splitlines())
    assert dialog_keys(screen, "yes") == ["y"]
    assert dialog_keys(screen, "2") == ["p"]
    assert dialog_keys(screen, "No") == ["Escape"]
    assert dialog_keys(screen, "use a different file name") is None  # free text is typed
    assert dialog_keys(Screen(["› hello"]), "yes") is None  # no menu on screen
