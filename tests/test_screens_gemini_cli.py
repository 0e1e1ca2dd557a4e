"""The gemini_cli provider's screen reading on recorded screens of the real CLI (no tmux, fast).

Fixtures come from scripts/record_screens/gemini_cli.py: `<state>.txt` is the screen as
tmux shows it (220x50), `<state>.json` what the provider must read from it. After a CLI
upgrade, re-record and run this file to see at once which reading broke.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from screen_fixtures import ScreenFixtures

from cli_agent_orchestrator.bus import EventBus
from cli_agent_orchestrator.events import ComposerChanged, StatusChanged
from cli_agent_orchestrator.models import TerminalStatus
from cli_agent_orchestrator.providers import gemini_cli
from cli_agent_orchestrator.providers.base import Screen, StatusReading
from cli_agent_orchestrator.providers.gemini_cli import dialog_keys, extract_reply, read_status, status_from_title
from cli_agent_orchestrator.services.input import SUBMIT_CONFIRM_S, InputService
from cli_agent_orchestrator.services.status.view import TerminalView

SCREENS = ScreenFixtures("gemini_cli")
STATES = SCREENS.states(".txt")


def test_every_state_was_recorded() -> None:
    assert {
        "idle",
        "composer",
        "working",
        "done",
        "tool_done",
        "permission",
        "permission_answered",
        "error",
        "cancelled",
        "idle_yolo",
        "composer_newline",
        "trust",
        "sign_in",
    } <= set(STATES)


@pytest.mark.parametrize("state", STATES)
def test_status_and_reply_read_from_the_recorded_screen(state: str) -> None:
    expected = SCREENS.expected(state)
    lines = SCREENS.lines(state)
    reading = read_status(Screen(lines))
    assert reading.status == TerminalStatus(expected["status"]), reading
    assert reading.composer_has_text == expected.get("composer_has_text", False)
    if "composer_rows" in expected:  # where an Enter that became a newline is told from the rows
        assert reading.composer_rows == expected["composer_rows"]
    assert expected.get("reason", "") in reading.reason
    if "reply" in expected:
        assert extract_reply(lines) == expected["reply"]


def test_history_with_status_rows_below_the_answer_extracts_only_the_answer() -> None:
    history = [
        "",
        " > please say hello",
        "",
        "✦ First paragraph.",
        "",
        "  - a list item",
        "  Last line.",
        "",
        " ⠧ Executing Hooks: cao-hook (esc to cancel, 1s)" + " " * 40 + "? for shortcuts",
        "─" * 80,
        " >   Type your message or @path/to/file",
    ]
    assert extract_reply(history) == "First paragraph.\n\n- a list item\nLast line."
    assert read_status(Screen(history)).status == TerminalStatus.PROCESSING


def test_an_answer_quoting_the_busy_marker_is_not_busy() -> None:
    rows = [
        " > quote it",
        "✦ It says",
        "  (esc to cancel, 1s)",
        "",
        "─" * 80,
        " >   Type your message or @path/to/file",
    ]
    assert read_status(Screen(rows)).status == TerminalStatus.COMPLETED


def test_a_start_up_notice_before_any_prompt_is_not_a_failed_turn() -> None:
    rows = ["✕ MCP server 'other' failed to start", "", "─" * 80, " >   Type your message or @path/to/file"]
    assert read_status(Screen(rows)).status == TerminalStatus.IDLE


def test_an_mcp_connection_notice_after_the_answer_is_not_a_failed_turn() -> None:
    """Gemini prints it when a restarted cao-server cuts the stream its MCP client keeps open."""
    composer = ["", "─" * 80, " >   Type your message or @path/to/file"]
    rows = [" > assign it", "✦ Assigned.", "✕ MCP ERROR (cao-mcp-server)", *composer]
    assert read_status(Screen(rows)).status == TerminalStatus.COMPLETED
    assert extract_reply(rows) == "Assigned."
    failed = [" > assign it", "✕ [API Error: quota exceeded]", "✕ MCP ERROR (cao-mcp-server)", *composer]
    assert read_status(Screen(failed)) == StatusReading(TerminalStatus.ERROR, "[API Error: quota exceeded]")


def test_no_composer_and_no_dialog_is_still_starting() -> None:
    assert read_status(Screen(["", " Gemini CLI v0.61.0", ""])).status == TerminalStatus.UNKNOWN


# Titles as Gemini 0.61 writes them (padded to 80 columns), for a working directory "work".
READY, WORKING, ASKING = "◇  Ready (work)".ljust(80), "✦  Working… (work)".ljust(80), "✋  Action Required (work)"


def test_titles_map_to_statuses() -> None:
    busy = StatusReading(TerminalStatus.PROCESSING)
    assert status_from_title(WORKING, READY) == busy
    assert status_from_title("✦  Reading the files (work)", WORKING) == busy  # showStatusInTitle: the thought
    assert status_from_title("⏲  Working… (work)", WORKING) == busy  # a shell that prints nothing
    assert status_from_title(READY, WORKING) == StatusReading(TerminalStatus.COMPLETED)
    assert status_from_title(READY, ASKING) == StatusReading(TerminalStatus.COMPLETED)  # declined: the screen decides
    # Ready at start-up, or after a title that is not Gemini's (tmux's default: the host name), says nothing:
    # the screen tells when the composer takes input.
    assert status_from_title(READY, None) is None
    assert status_from_title(READY, "buildhost") is None
    # The confirmation dialog is read from the screen (it takes keys a moment after the title).
    assert status_from_title(ASKING, WORKING) is None
    assert status_from_title("Gemini CLI (work)", READY) is None  # ui.dynamicWindowTitle off: no status


def test_the_launch_keeps_the_status_title_on_and_adds_no_hooks(tmp_path) -> None:
    """A user's `ui.hideWindowTitle` or `ui.dynamicWindowTitle: false` would silence the title
    cao reads; cao's overlay turns both back, and configures no hook of its own."""
    import json

    from cli_agent_orchestrator.providers.base import LaunchContext

    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(
        json.dumps({"ui": {"hideWindowTitle": True, "dynamicWindowTitle": False}})
    )
    ctx = LaunchContext("0123abcd", "dev", "", str(tmp_path), tmp_path / "cao", environ={"GEMINI_CLI_HOME": str(home)})
    launch = gemini_cli.build_launch(ctx)
    settings = json.loads((Path(launch.env["GEMINI_CLI_HOME"]) / ".gemini" / "settings.json").read_text())
    assert settings["ui"]["hideWindowTitle"] is False and settings["ui"]["dynamicWindowTitle"] is True
    assert "hooks" not in settings


def test_cao_s_tools_come_from_its_endpoint_with_the_credential_only_by_reference(tmp_path) -> None:
    """Gemini reaches /mcp itself (`httpUrl`) and expands `${VAR}` in its settings from its own
    environment: the header names CAO_MCP_TOKEN, so no file and no argument holds the credential."""
    import json

    from cli_agent_orchestrator.providers.base import LaunchContext

    secret = "0123abcd.the-credential"
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    stale = {"cao-mcp-server": {"command": "cao-mcp-server", "env": {"CAO_TERMINAL_ID": "feedf00d"}}}
    (home / ".gemini" / "settings.json").write_text(json.dumps({"mcp": {"allowed": ["docs"]}, "mcpServers": stale}))
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
        environ={"GEMINI_CLI_HOME": str(home)},
    )
    launch = gemini_cli.build_launch(ctx)
    path = Path(launch.env["GEMINI_CLI_HOME"]) / ".gemini" / "settings.json"
    settings = json.loads(path.read_text())
    assert settings["mcpServers"]["cao-mcp-server"] == {  # whole: the user's stale entry lends it nothing
        "httpUrl": "http://127.0.0.1:9889/mcp",
        "headers": {"X-CAO-Agent-Token": "${CAO_MCP_TOKEN}"},
        "trust": True,
    }
    assert settings["mcp"] == {"allowed": ["docs", "cao-mcp-server"], "excluded": ["docs"]}  # outside the tool set
    assert path.stat().st_mode & 0o777 == 0o600
    assert secret not in json.dumps([launch.argv, launch.env])
    assert not [f for f in (tmp_path / "cao").rglob("*") if f.is_file() and secret in f.read_text()]


def test_dialogs_are_answered_with_menu_keys() -> None:
    for state in ("permission", "trust"):
        dialog = Screen(SCREENS.lines(state))
        assert dialog_keys(dialog, "yes") == ["1"]
        assert dialog_keys(dialog, " 2 ") == ["2"]
        # The menu ignores words and Enter would confirm option 1: anything else declines.
        assert dialog_keys(dialog, "no, do not run it") == ["Escape"]


def test_a_cancelled_turn_is_definitely_idle() -> None:
    reading = read_status(Screen(SCREENS.lines("cancelled")))
    assert reading.status == TerminalStatus.IDLE and reading.definite  # no hook reports it


# --- typing into Gemini (services/input.py with this provider's timings, fake tmux and monitor) ---


class _Typing:
    """A Gemini pane as cao's input service sees it, read from recorded screens: the paste is
    drawn `draw_s` later; the first `newlines` Enters become newlines (the composer grows a row),
    BSpace takes one back, any other Enter starts the turn."""

    def __init__(self, bus: EventBus, draw_s: float = 0.03, newlines: int = 0):
        self.bus, self.draw_s, self.newlines = bus, draw_s, newlines
        self.lines = SCREENS.lines("idle_yolo")
        self.drawn_at = 0.0
        self.keys: list[tuple[float, str]] = []

    @property
    def enters(self) -> list[float]:
        return [at for at, key in self.keys if key == "Enter"]

    def view(self, terminal_id: str) -> TerminalView:
        reading = read_status(Screen(list(self.lines)))
        return TerminalView(
            status=TerminalStatus.IDLE,
            source="screen",
            reason="",
            turn=0,
            settled=True,
            exited=False,
            provider=gemini_cli.PROVIDER,
            screen=Screen(list(self.lines)),
            composer_has_text=reading.composer_has_text,
            hook_reply=None,
            composer_rows=reading.composer_rows,
        )

    def show(self, state: str) -> None:
        self.lines = SCREENS.lines(state)
        reading = read_status(Screen(self.lines))
        self.bus.publish(ComposerChanged("t1", reading.composer_has_text, reading.composer_rows))

    async def paste(self, window_id: str, text: str) -> None:
        async def draw() -> None:
            await asyncio.sleep(self.draw_s)
            self.show("composer")
            self.drawn_at = asyncio.get_running_loop().time()

        asyncio.get_running_loop().create_task(draw())

    async def send_keys(self, window_id: str, keys: list[str]) -> None:
        for key in keys:
            self.keys.append((asyncio.get_running_loop().time(), key))
            if key == "BSpace":
                self.show("composer")
            elif self.newlines:
                self.newlines -= 1
                self.show("composer_newline")
            else:
                self.show("idle_yolo")
                self.bus.publish(StatusChanged("t1", TerminalStatus.PROCESSING, TerminalStatus.IDLE, "title", "", 1))


def _typed(pane_args: dict) -> tuple[_Typing, float]:
    async def scenario() -> tuple[_Typing, float]:
        bus = EventBus()
        bus.start()
        pane = _Typing(bus, **pane_args)
        service = InputService(pane, bus, pane)  # type: ignore[arg-type]
        t0 = asyncio.get_running_loop().time()
        assert await service.submit("t1", "w", "say hello") == 1
        await bus.stop()
        return pane, t0

    return asyncio.run(scenario())


def test_enter_follows_the_drawn_paste_by_the_pause() -> None:
    """Gemini takes an Enter for a newline until 40 ms after it has read a paste, and the draw of
    the paste is the first sign that it has: Enter waits for the draw, then the pause."""
    pane, t0 = _typed({})
    assert len(pane.enters) == 1
    assert pane.enters[0] - pane.drawn_at >= gemini_cli.PROVIDER.pause_after_echo_s
    assert pane.enters[0] - t0 < SUBMIT_CONFIRM_S / 2  # no retry: the draw plus the pause


@pytest.mark.parametrize("newlines", [1, 2])
def test_an_enter_read_as_a_newline_is_taken_back_and_pressed_again_at_once(newlines: int) -> None:
    """The short pause loses a race now and then: the composer grows a row instead of the turn
    starting. The newline is taken back (BSpace) and Enter pressed again as soon as the screen
    shows it, not after the retry wait; the text is sent without a stray newline."""
    pane, t0 = _typed({"newlines": newlines})
    assert [key for _, key in pane.keys] == ["Enter", *["BSpace", "Enter"] * newlines]
    assert pane.keys[-1][0] - t0 < gemini_cli.PROVIDER.submit_confirm_s  # no retry wait was needed
