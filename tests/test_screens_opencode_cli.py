"""opencode provider on recorded screens (no tmux, no CLI): read_status and extract_reply
against tests/fixtures/screens/opencode_cli/, captured from opencode 1.18.33 by
scripts/record_screens/opencode_cli.py. Re-record after a CLI upgrade; a failure here
names the state that no longer reads right.

Also: the launch configuration (permissions, agent, MCP, the user's own config) and the
status plugin, run under Node against a stub fetch.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from screen_fixtures import ScreenFixtures

from cli_agent_orchestrator.models import TerminalStatus
from cli_agent_orchestrator.providers import opencode_cli as oc
from cli_agent_orchestrator.providers.base import LaunchContext, Screen

SCREENS = ScreenFixtures("opencode_cli", rows=50)  # each screen as the whole 50-row pane
STATES = SCREENS.states()
HISTORIES = SCREENS.states(".history.txt")
expected, screen = SCREENS.expected, SCREENS.screen


def test_every_state_was_recorded():
    assert {"idle", "composer", "working", "done", "tool_done", "permission", "error", "exited"} <= set(STATES)


@pytest.mark.parametrize("state", STATES)
def test_read_status_on_recorded_screen(state: str):
    want = expected(state)
    reading = oc.read_status(screen(state))
    assert reading.status.value == want["status"], (state, reading)
    if "composer_has_text" in want:
        assert reading.composer_has_text is want["composer_has_text"], (state, reading)
    if want["status"] == "error":
        assert "scripted refusal" in reading.reason


@pytest.mark.parametrize("state", HISTORIES)
def test_extract_reply_on_recorded_history(state: str):
    want = expected(state)
    raw = SCREENS.lines(state, ".history.txt")
    # As captured (reply rows keep their padding to the pane width) ...
    assert oc.extract_reply(raw) == want.get("reply"), state
    # ... and as cao-server hands it over today, every row right-stripped.
    stripped = oc.extract_reply([line.rstrip() for line in raw])
    if want.get("stripped_reply_known_wrong"):
        # A prompt with several paragraphs cannot be told apart from the reply without the
        # padding: its later paragraphs lead the extracted text.
        assert stripped and stripped.endswith(want["reply"]) and stripped != want["reply"]
    else:
        assert stripped == want.get("reply"), state


def test_a_turn_still_running_has_no_reply_yet():
    rows = SCREENS.lines("done", ".history.txt")
    assert oc.extract_reply(rows + ["", "› the next question", ""]) is None
    assert oc.extract_reply(["█▀▀█  OpenCode", "", "Ask anything..."]) is None


# --- the plugin's events ----------------------------------------------------------------
@pytest.mark.parametrize(
    "event, payload, status",
    [
        ("session.busy", {}, TerminalStatus.PROCESSING),
        ("permission.replied", {"reply": "once"}, TerminalStatus.PROCESSING),
        ("session.retry", {"attempt": 2, "message": "overloaded"}, TerminalStatus.PROCESSING),
        ("permission.asked", {"permission": "bash", "patterns": ["rm -rf x"]}, TerminalStatus.WAITING_USER_ANSWER),
        ("session.idle", {}, TerminalStatus.COMPLETED),
        ("session.idle", {"aborted": True}, TerminalStatus.IDLE),
        ("session.idle", {"error": "rate limited"}, TerminalStatus.ERROR),
    ],
)
def test_status_from_hook(event: str, payload: dict, status: TerminalStatus):
    reading = oc.status_from_hook(event, payload)
    assert reading is not None and reading.status == status
    if status == TerminalStatus.WAITING_USER_ANSWER:
        assert reading.reason == "opencode asks permission for bash: rm -rf x"
    if status == TerminalStatus.ERROR:
        assert reading.reason == "rate limited"


def test_unknown_events_are_ignored():
    assert oc.status_from_hook("message.part.delta", {}) is None


# --- launch -------------------------------------------------------------------------------
CREDENTIAL = "0123abcd." + "x" * 43  # the shape agent_credentials gives


def context(tmp_path: Path, **kw) -> LaunchContext:
    values = dict(
        terminal_id="0123abcd",
        profile_name="dev",
        system_prompt="Be brief.",
        working_directory=str(tmp_path),
        home_dir=tmp_path / "cao",
        mcp_server_argv=["/bin/cao-mcp"],
        mcp_url="http://127.0.0.1:9889/mcp",
        mcp_token=CREDENTIAL,
    )
    values.update(kw)
    return LaunchContext(**values)


def settings(tmp_path: Path, **kw) -> dict:
    launch = oc.build_launch(context(tmp_path, **kw))
    return json.loads(Path(launch.env["OPENCODE_CONFIG"]).read_text(encoding="utf-8"))


def test_launch_defines_agent_mcp_plugin_and_a_cleaning_script(tmp_path: Path):
    launch = oc.build_launch(context(tmp_path, model="scripted/fake-model"))
    own = tmp_path / "cao" / "tmp" / "0123abcd"
    assert launch.argv == ["/bin/sh", str(own / "opencode-launch.sh")]
    script = (own / "opencode-launch.sh").read_text()
    assert "--mini --agent cao-dev <&0 &" in script and "trap 'rm -rf \"$own\"' EXIT" in script
    assert 'TMPDIR="$own/tmp"' in script
    data = json.loads((own / "opencode.json").read_text())
    assert data["agent"]["cao-dev"] == {
        "description": "cao agent profile dev",
        "mode": "primary",
        "prompt": "Be brief.",
        "model": "scripted/fake-model",
    }
    # cao's endpoint over HTTP, the credential by reference to the pane's environment: opencode
    # fills in `{env:...}` as it reads the file, so the file never holds it.
    assert data["mcp"]["cao-mcp-server"] == {
        "type": "remote",
        "url": "http://127.0.0.1:9889/mcp",
        "headers": {"X-CAO-Agent-Token": "{env:CAO_MCP_TOKEN}"},
        "oauth": False,
        "enabled": True,
        "timeout": oc.MCP_CALL_TIMEOUT_MS,
    }
    assert CREDENTIAL not in (own / "opencode.json").read_text()
    assert oc.PROVIDER.mcp == "http" and oc.PROVIDER.lists_tools_at_start
    assert data["plugin"] == [(own / "opencode_status.js").as_uri()]
    assert "CaoStatus" in (own / "opencode_status.js").read_text()
    assert (own / "opencode.json").stat().st_mode & 0o077 == 0


def test_permissions_ask_by_default_and_allow_everything_in_yolo(tmp_path: Path):
    ask = settings(tmp_path)["permission"]
    assert {ask[k] for k in ("bash", "edit", "webfetch", "external_directory")} == {"ask"}
    assert ask["cao-mcp-server_*"] == "allow" and "*" not in ask
    assert settings(tmp_path, yolo=True)["permission"]["*"] == "allow"
    assert settings(tmp_path, profile_extra={"permissionMode": "bypassPermissions"})["permission"]["*"] == "allow"
    assert settings(tmp_path, profile_extra={"permissionMode": "acceptEdits"})["permission"].get("edit") is None


def test_allowed_tools_run_unasked_and_everything_else_is_denied(tmp_path: Path):
    rules = settings(tmp_path, allowed_tools=["@cao-mcp-server", "fs_read", "execute_bash"])["permission"]
    assert list(rules)[0] == "*" and rules["*"] == "deny"  # first: opencode applies the last match
    assert rules["read"] == rules["grep"] == rules["bash"] == "allow"  # inside the set: no prompt
    assert "edit" not in rules and rules["cao-mcp-server_*"] == "allow"
    assert rules["external_directory"] == "allow"
    yolo = settings(tmp_path, allowed_tools=["fs_read"], yolo=True)["permission"]
    assert yolo["*"] == "allow" and "bash" not in yolo  # --yolo: unrestricted, whatever the set


def test_other_profile_mcp_servers_are_carried_over(tmp_path: Path):
    extra = {
        "mcpServers": {
            "cao-mcp-server": {"command": "cao-mcp-server"},
            "docs": {"command": "docs-mcp", "args": ["--stdio"], "env": {"TOKEN": "t"}},
            "web": {"url": "https://example.invalid/mcp"},
        }
    }
    mcp = settings(tmp_path, profile_extra=extra)["mcp"]
    assert mcp["docs"] == {"type": "local", "command": ["docs-mcp", "--stdio"], "environment": {"TOKEN": "t"}}
    assert mcp["web"]["type"] == "remote"
    assert mcp["cao-mcp-server"]["url"] == "http://127.0.0.1:9889/mcp"  # the profile's own entry is not used
    assert "command" not in mcp["cao-mcp-server"]


def test_a_users_own_opencode_config_variable_is_kept_and_ours_goes_inline(tmp_path: Path):
    launch = oc.build_launch(context(tmp_path, environ={"OPENCODE_CONFIG": str(tmp_path / "mine.json")}))
    assert "OPENCODE_CONFIG" not in launch.env  # the user's variable reaches opencode unchanged
    ours = json.loads(launch.env["OPENCODE_CONFIG_CONTENT"])
    assert ours["agent"]["cao-dev"]["prompt"] == "Be brief."
    assert CREDENTIAL not in launch.env["OPENCODE_CONFIG_CONTENT"]


# --- the plugin, under Node ----------------------------------------------------------------
PLUGIN_DRIVER = """
import { pathToFileURL } from "node:url"
const posted = []
let down = 1  // cao-server misses the first post: the plugin must retry it
globalThis.fetch = async (url, init) => {
  if (down-- > 0) throw new Error("connection refused")
  posted.push([url, JSON.parse(init.body)])
  return {status: 200}
}
const { CaoStatus } = await import(pathToFileURL(process.argv[2]).href)
const hooks = await CaoStatus({})
const ev = (type, properties) => hooks.event({event: {type, properties}})
const S = "ses_main", C = "ses_child"
await ev("session.created", {sessionID: S, info: {id: S}})
await ev("session.status", {sessionID: S, status: {type: "busy"}})
await ev("session.status", {sessionID: S, status: {type: "busy"}})
await ev("session.created", {sessionID: C, info: {id: C, parentID: S}})
await ev("session.status", {sessionID: C, status: {type: "busy"}})
await ev("session.idle", {sessionID: C})
await ev("permission.asked", {sessionID: S, permission: "bash", patterns: ["ls"]})
await ev("permission.replied", {sessionID: S, reply: "once"})
await ev("session.error", {sessionID: S, error: {name: "APIError", data: {message: "boom"}}})
await ev("session.idle", {sessionID: S})
await ev("session.status", {sessionID: S, status: {type: "busy"}})
await ev("session.idle", {sessionID: S})
await new Promise((r) => setTimeout(r, 1500))
console.log(JSON.stringify(posted))
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_plugin_posts_each_turn_edge_once_in_order_retrying_and_ignoring_sub_agents(tmp_path: Path):
    plugin = tmp_path / "plugin.mjs"
    plugin.write_text(oc.PLUGIN)
    driver = tmp_path / "driver.mjs"
    driver.write_text(PLUGIN_DRIVER)
    env = {"PATH": "/usr/bin:/bin", "CAO_TERMINAL_ID": "0123abcd", "CAO_API_PORT": "4321"}
    out = subprocess.run(["node", str(driver), str(plugin)], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    posted = json.loads(out.stdout)
    assert {url for url, _ in posted} == {"http://127.0.0.1:4321/terminals/0123abcd/hooks"}
    assert [body["event"] for _, body in posted] == [
        "session.busy",
        "permission.asked",
        "permission.replied",
        "session.idle",
        "session.busy",
        "session.idle",
    ]
    assert posted[1][1]["payload"] == {"permission": "bash", "patterns": ["ls"]}
    assert posted[3][1]["payload"] == {"error": "boom"}
    assert posted[5][1]["payload"] == {}  # a new turn starts without the old error


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_plugin_outside_a_cao_terminal_does_nothing(tmp_path: Path):
    plugin = tmp_path / "plugin.mjs"
    plugin.write_text(oc.PLUGIN)
    code = (
        f"const m = await import({json.dumps(plugin.as_uri())}); console.log(JSON.stringify(await m.CaoStatus({{}})))"
    )
    out = subprocess.run(
        ["node", "--input-type=module", "-e", code],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0 and out.stdout.strip() == "{}", out.stderr


def test_permission_menu_is_answered_with_its_keys():
    screen = Screen(SCREENS.text("permission").splitlines())
    assert oc.dialog_keys(screen, "yes") == ["Enter"]
    assert oc.dialog_keys(screen, "always") == ["Right", "Enter"]
    assert oc.dialog_keys(screen, "no") == ["Escape"]
    assert oc.dialog_keys(screen, "something else") is None
    assert oc.dialog_keys(Screen(["  ctrl+p cmd"]), "yes") is None


def test_history_reaches_the_extractor_untrimmed():
    assert oc.PROVIDER.raw_history is True
