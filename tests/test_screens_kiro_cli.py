"""Kiro CLI provider on screens SYNTHESISED by hand from the reference markers (shared notes,
core-contract §11) — kiro-cli cannot be installed here, so nothing in
tests/fixtures/screens/kiro_cli/ was captured from the real CLI (see its README.md).

Every status rule of §11 has at least one fixture (the `rule` field names it), plus the
consent dialog's answer, the launch line and each extraction form.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from screen_fixtures import ScreenFixtures

from cli_agent_orchestrator.errors import InvalidInput
from cli_agent_orchestrator.profiles import kiro_agent, roles
from cli_agent_orchestrator.profiles.loading import load_profile
from cli_agent_orchestrator.providers import kiro_cli as kiro
from cli_agent_orchestrator.providers import tool_names
from cli_agent_orchestrator.providers.base import LaunchContext, Screen
from cli_agent_orchestrator.providers.registry import get_provider

SCREENS = ScreenFixtures("kiro_cli", rows=50)  # each screen as the whole 50-row pane
STATES = SCREENS.states()
HISTORIES = SCREENS.states(".history.txt")
expected, screen = SCREENS.expected, SCREENS.screen


def test_fixtures_are_labelled_synthesised_and_cover_every_status_rule():
    rules = set()
    for state in STATES:
        data = expected(state)
        assert "NOT captured" in data["synthesised"], state
        # "N: ..." names the deciding rule; "N does not apply ... → M" the one that decides instead.
        deciding = re.search(r"→ (\d+)", data["rule"]) or re.match(r"(\d+)", data["rule"])
        assert deciding, (state, data["rule"])
        rules.add(int(deciding.group(1)))
    assert rules == set(range(1, 12)), sorted(rules)


@pytest.mark.parametrize("state", STATES)
def test_read_status_follows_the_reference_rules(state: str):
    want = expected(state)
    reading = kiro.read_status(screen(state))
    assert reading.status.value == want["status"], (state, want["rule"], reading)
    if "composer_has_text" in want:
        assert reading.composer_has_text is want["composer_has_text"], state


@pytest.mark.parametrize("state", [s for s in STATES if "startup_keys" in expected(s)])
def test_only_the_consent_dialog_with_its_cursor_on_no_exit_is_answered(state: str):
    assert kiro.answer_startup_dialog(screen(state)) == expected(state)["startup_keys"]


@pytest.mark.parametrize("state", HISTORIES)
def test_extract_reply(state: str):
    lines = SCREENS.lines(state, ".history.txt")
    assert kiro.extract_reply(lines) == expected(state)["reply"], state


def test_error_reason_quotes_the_message():
    assert "trouble responding" in kiro.read_status(screen("error_trouble")).reason


def test_idle_prompt_matches_any_profile_and_its_optional_parts():
    for prompt in ("[developer] >", "[my-agent_2] 45% >", "[x] λ >", "[x] !>", "[x] 7% λ !> typed"):
        assert kiro.read_status(Screen([prompt])).status.value == "idle", prompt
    assert kiro.read_status(Screen(["[x] 7% λ !> typed"])).composer_has_text
    assert not kiro.read_status(Screen(["[x] >   "])).composer_has_text


# --- launch ------------------------------------------------------------------------
def context(**kw) -> LaunchContext:
    values = dict(
        terminal_id="0123abcd",
        profile_name="developer",
        system_prompt="",
        working_directory="/tmp",
        home_dir=Path("/tmp/cao"),
    )
    values.update(kw)
    return LaunchContext(**values)


def test_launch_line_starts_the_tui_with_trust_all_tools():
    argv = kiro.build_launch(context(model="claude-sonnet-4.5")).argv
    assert Path(argv[0]).name == "kiro-cli"
    assert argv[1:] == [
        "chat",
        "--agent-engine",
        "v2",
        "--trust-all-tools",
        "--model",
        "claude-sonnet-4.5",
        "--agent",
        "developer",
    ]


@pytest.mark.parametrize("kw", [{"allowed_tools": ["*"]}, {"yolo": True}])
def test_unrestricted_tools_start_the_legacy_ui(kw: dict):
    argv = kiro.build_launch(context(**kw)).argv
    assert argv[1:] == ["chat", "--agent-engine", "v2", "--legacy-ui", "--trust-all-tools", "--agent", "developer"]


def test_registered_as_the_default_provider_with_its_binary_and_exit():
    spec = get_provider("kiro_cli")
    assert (spec.binary, spec.exit_command, spec.accepts_input_while_busy) == ("kiro-cli", "/exit", False)


# --- the agent the launch line names -----------------------------------------------------
@pytest.mark.parametrize(("profile", "legacy"), [("code_supervisor", False), ("developer", False), ("free", True)])
def test_launch_names_the_agent_cao_install_writes_with_the_same_tool_set(tmp_path: Path, profile: str, legacy: bool):
    """`--agent NAME` loads `<agents dir>/NAME.json`: its `name` is the profile's, its `tools` the
    set the launch was given (unrestricted ⇔ `--legacy-ui` and `tools: ["*"]`)."""
    store = tmp_path / "agent-store"
    store.mkdir()
    (store / "free.md").write_text("---\nname: free\nallowedTools: ['*']\n---\nAnything.\n", encoding="utf-8")
    loaded = load_profile(tmp_path, profile)
    tools = roles.resolve_tools(tmp_path, loaded.name, loaded.allowed_tools, loaded.role, loaded.mcp_servers)
    document = kiro_agent.agent_document(loaded, tools.tools, ["/opt/cao/bin/cao-mcp-server"])
    argv = kiro.build_launch(context(profile_name=profile, allowed_tools=tools.tools)).argv
    assert argv[argv.index("--agent") + 1] == document["name"] == profile
    assert ("--legacy-ui" in argv) is legacy and (document["tools"] == ["*"]) is legacy
    assert document["tools"] == kiro.agent_tools(tools.tools)["tools"]
    cao = document["mcpServers"]["cao-mcp-server"]
    assert (cao["command"], cao["timeout"]) == ("/opt/cao/bin/cao-mcp-server", kiro_agent.CAO_MCP_TIMEOUT_MS)
    # One file for every terminal of the profile: the relay takes the agent's endpoint and
    # credential from the environment Kiro gives it, so the file names neither.
    assert not {"env", "url", "headers"} & set(cao), cao
    assert tool_names.ENFORCEMENT["kiro_cli"] == "hard"


def test_kiro_reaches_cao_tools_through_the_relay_listed_at_start():
    assert (kiro.PROVIDER.mcp, kiro.PROVIDER.lists_tools_at_start) == ("stdio", True)


@pytest.mark.parametrize("name", kiro_agent.PER_TERMINAL_ENV)
def test_a_profile_that_pins_a_per_terminal_variable_for_cao_mcp_server_is_refused(tmp_path: Path, name: str):
    store = tmp_path / "agent-store"
    store.mkdir()
    (store / "pinned.md").write_text(
        f"---\nname: pinned\nmcpServers:\n  cao-mcp-server:\n    command: cao-mcp-server\n"
        f"    env: {{{name}: '${{{name}}}', KEEP: '1'}}\n---\nx\n",
        encoding="utf-8",
    )
    loaded = load_profile(tmp_path, "pinned")
    tools = roles.resolve_tools(tmp_path, loaded.name, loaded.allowed_tools, loaded.role, loaded.mcp_servers)
    with pytest.raises(InvalidInput, match=f"env sets {name}; cao gives each agent its own"):
        kiro_agent.agent_document(loaded, tools.tools, ["/opt/cao/bin/cao-mcp-server"])


# --- the flag probe (contract §11) ---------------------------------------------------------------
# A `kiro-cli chat --help` written by hand from the flags the contract names (Kiro cannot be
# installed here, so this is synthesised, not captured).
SYNTHESISED_CHAT_HELP = """Usage: kiro-cli chat [OPTIONS] [INPUT]

Options:
      --agent <AGENT>            Agent to use
      --agent-engine <ENGINE>    Agent engine [possible values: v2]
      --model <MODEL>            Model to use
  -a, --trust-all-tools          Allow the model to use any tool without asking
      --legacy-ui                Use the line-mode interface
  -h, --help                     Print help
"""


def test_the_flag_probe_names_what_an_older_kiro_lacks():
    assert kiro.missing_flags(SYNTHESISED_CHAT_HELP) == []
    older = SYNTHESISED_CHAT_HELP.replace("--agent-engine", "--engine").replace("--legacy-ui", "--classic")
    assert kiro.missing_flags(older) == ["--agent-engine", "--legacy-ui"]
    # `--agent` is not found inside `--agent-engine` alone.
    only_engine = "      --agent-engine <ENGINE>\n  -a, --trust-all-tools\n      --legacy-ui\n"
    assert kiro.missing_flags(only_engine) == ["--agent"]


def test_preflight_without_kiro_on_path_asks_for_the_agent_file_only(tmp_path):
    env = {"CAO_AGENTS_DIR": str(tmp_path), "PATH": str(tmp_path / "bin"), "HOME": str(tmp_path)}
    assert "run `cao install dev --provider kiro_cli` first" in (kiro.preflight("dev", env) or "")
    (tmp_path / "dev.json").write_text("{}")
    assert kiro.preflight("dev", env) is None  # no kiro-cli: the launch's own check reports that
