"""The grok_cli provider's screen reading on recorded screens of the real CLI (no tmux, fast).

Fixtures were captured from the pinned Grok CLI 0.0.34 (launched as the provider launches it,
shim included, 220x50) against the scripted model: `<state>.txt` is the screen as tmux shows it,
`<state>.json` what the provider must read from it. Grok has no hooks or title, so these readings
are all of its status. After a CLI upgrade, re-record and run this file to see what broke.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from screen_fixtures import ScreenFixtures

from cli_agent_orchestrator.models import TerminalStatus
from cli_agent_orchestrator.providers import grok_cli, tool_names
from cli_agent_orchestrator.providers._grok_cli_shim import shim_text
from cli_agent_orchestrator.providers.base import LaunchContext, Screen
from cli_agent_orchestrator.providers.grok_cli import dialog_keys, extract_reply, read_status

SCREENS = ScreenFixtures("grok_cli")
STATES = SCREENS.states(".json")
COMPOSER = ["  ╭" + "─" * 60 + "╮", "  │ ❯ Ask me anything..." + " " * 37 + "│", "  ╰" + "─" * 60 + "╯"]
FOOTER = "  ⏸ auto-edit: off (shift + tab)  ≋ fake-model"


def test_every_state_was_recorded() -> None:
    assert {
        "idle",
        "composer",
        "working",
        "done",
        "markdown",
        "tool_done",
        "permission",
        "permission_answered",
        "declined",
        "error",
        "cancelled",
        "idle_yolo",
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


@pytest.mark.parametrize("state", [s for s in STATES if SCREENS.has(s, ".history.txt")])
def test_reply_from_the_whole_history(state: str) -> None:
    assert extract_reply(SCREENS.lines(state, ".history.txt")) == SCREENS.expected(state)["reply"]


def test_a_declined_confirmation_is_still_processing_until_the_model_answers() -> None:
    """Grok drops its spinner at once when a confirmation is declined, but asks the model again."""
    rows = ["  > make another", "", "  ⏺ Bash", "    ⎿ Operation cancelled by user (pressed Escape)", ""]
    assert read_status(Screen([*rows, *COMPOSER, "", FOOTER])).status == TerminalStatus.PROCESSING
    streaming = [*rows, "  ⏺ Made no", "    █", ""]
    assert read_status(Screen([*streaming, *COMPOSER, "", FOOTER])).status == TerminalStatus.PROCESSING
    done = [*rows, "  ⏺ Made no other.", ""]
    assert read_status(Screen([*done, *COMPOSER, "", FOOTER])).status == TerminalStatus.COMPLETED
    assert extract_reply([*done, *COMPOSER, "", FOOTER]) == "Made no other."


def test_a_multi_line_prompt_drawn_over_its_echo_row_still_starts_the_turn() -> None:
    """Grok echoes a pasted message with its carriage returns: the last line overwrites the row."""
    rows = ["  > before", "", "  ⏺ Old answer.", "", "and the secondof two lines", "", "  ⏺ New answer.", ""]
    assert read_status(Screen([*rows, *COMPOSER, "", FOOTER])).status == TerminalStatus.COMPLETED
    assert extract_reply([*rows, *COMPOSER, "", FOOTER]) == "New answer."
    waiting = rows[:5]
    assert read_status(Screen([*waiting, "", *COMPOSER, "", FOOTER])).status == TerminalStatus.IDLE


def test_a_running_tool_is_processing_and_a_finished_one_ends_the_turn() -> None:
    running = ["  > ls the tree", "", "  ⏺ Bash(ls)", "    ⎿ Executing...", ""]
    assert read_status(Screen([*running, *COMPOSER, "", FOOTER])).status == TerminalStatus.PROCESSING
    finished = ["  > ls the tree", "", "  ⏺ Bash(ls)", "    ⎿ a.txt", ""]
    assert read_status(Screen([*finished, *COMPOSER, "", FOOTER])).status == TerminalStatus.COMPLETED


def test_the_menu_is_answered_with_arrows_and_enter() -> None:
    screen = Screen(SCREENS.lines("permission"))
    assert dialog_keys(screen, "yes") == ["Enter"]
    assert dialog_keys(screen, "1") == ["Enter"]
    assert dialog_keys(screen, "2") == ["Down", "Enter"]
    assert dialog_keys(screen, "no") == ["Escape"]


def _ctx(tmp_path: Path, tools: list[str] | None, **kw) -> LaunchContext:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return LaunchContext(
        terminal_id="abcd1234",
        profile_name="p",
        system_prompt="Be brief.",
        working_directory=str(work),
        home_dir=tmp_path / "cao",
        allowed_tools=tools,
        environ={"HOME": str(tmp_path / "home"), "NODE_OPTIONS": "--max-old-space-size=4096"},
        **kw,
    )


def _config(launch_dir: Path) -> dict:
    text = (launch_dir / "grok-shim.mjs").read_text()
    start = text.index("const CONFIG = ") + len("const CONFIG = ")
    return json.loads(text[start : text.index(";\n", start)])


def test_launch_writes_only_per_terminal_files_and_keeps_the_users_node_options(tmp_path: Path) -> None:
    grok_dir = tmp_path / "work" / ".grok"
    grok_dir.mkdir(parents=True)
    (grok_dir / "settings.json").write_text(json.dumps({"model": "m", "mcpServers": {"docs": {"command": "d"}}}))
    launch = grok_cli.build_launch(_ctx(tmp_path, ["fs_read", "fs_list", "@cao-mcp-server"]))
    own = tmp_path / "cao" / "tmp" / "abcd1234"
    assert launch.argv == ["grok"] and launch.env["NODE_OPTIONS"].endswith(" --max-old-space-size=4096")
    assert (own / "grok-shim.mjs").as_uri() in launch.env["NODE_OPTIONS"]
    project = json.loads((own / "grok-project-settings.json").read_text())
    assert project["model"] == "m" and set(project["mcpServers"]) == {"cao-mcp-server"}  # docs: outside the set
    assert "env" not in project["mcpServers"]["cao-mcp-server"]["transport"]  # the token stays in the env
    config = _config(own)
    assert config["approved"] == [] and config["systemPrompt"] == "Be brief."
    assert {"bash", "create_file", "str_replace_editor"} <= set(config["refused"])
    assert "view_file" not in config["refused"] and config["mcpAllowed"] == ["mcp__cao-mcp-server"]
    assert sorted(p.name for p in grok_dir.iterdir()) == ["settings.json"]


def test_yolo_approves_everything_and_a_developer_set_runs_without_asking(tmp_path: Path) -> None:
    grok_cli.build_launch(_ctx(tmp_path, ["fs_read"], yolo=True))
    own = tmp_path / "cao" / "tmp" / "abcd1234"
    assert _config(own)["approved"] == ["allOperations"] and _config(own)["refused"] == []
    grok_cli.build_launch(_ctx(tmp_path, ["@builtin", "fs_*", "execute_bash", "web_fetch", "@cao-mcp-server"]))
    assert _config(own)["approved"] == ["bashCommands", "fileOperations"] and _config(own)["refused"] == []
    kept = _ctx(tmp_path, ["fs_*", "execute_bash"], profile_extra={"permissionMode": "default"})
    grok_cli.build_launch(kept)
    assert _config(own)["approved"] == [] and _config(own)["refused"] == ["create_todo_list", "update_todo_list"]


def test_the_shim_inlines_its_configuration_as_json_and_node_can_parse_it(tmp_path: Path) -> None:
    text = shim_text({"systemPrompt": 'quote " and </script>', "refused": []})
    assert 'const CONFIG = {"systemPrompt": "quote \\" and </script>", "refused": []};' in text
    assert "process.exit(78)" in text
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node here")
    (tmp_path / "shim.mjs").write_text(text)
    checked = subprocess.run([node, "--check", str(tmp_path / "shim.mjs")], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def test_grok_column_and_enforcement() -> None:
    assert tool_names.ENFORCEMENT["grok_cli"] == "hard"
    assert tool_names.names("grok_cli", ["execute_bash", "@docs/search"]) == ["bash", "mcp__docs__search"]


def test_preflight_asks_for_a_key(tmp_path: Path) -> None:
    assert grok_cli.preflight("p", {"HOME": str(tmp_path)}) is not None
    assert grok_cli.preflight("p", {"HOME": str(tmp_path), "GROK_API_KEY": "k"}) is None
    (tmp_path / ".grok").mkdir()
    (tmp_path / ".grok" / "user-settings.json").write_text('{"apiKey": "k"}')
    assert grok_cli.preflight("p", {"HOME": str(tmp_path)}) is None
