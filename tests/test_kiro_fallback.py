"""Kiro's start-up fallback (core contract §11): a TUI that does not come up within the start-up
timeout is replaced, in the same window, by the same agent with `--legacy-ui`; once only.

kiro-cli cannot be installed here, so the program on PATH named `kiro-cli` is a stand-in
written from the contract: `chat --help` lists the launch line's flags; the TUI launch draws
Kiro's boot line and never becomes ready (the failure the fallback exists for); the
`--legacy-ui` launch first starts the agent file's MCP servers as Kiro does (each with its own
environment plus the entry's `env`; initialize, tools/list; the boot line counts them), then
shows the line UI's prompt and answers each line ("call TOOL {json}" calls that cao tool). Everything
else is real: cao-server, tmux, `cao install`'s agent file, cao-mcp-server (the relay), the
kiro_cli provider's launch line, status reading and extraction.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from conftest import CaoServer

FAKE_KIRO = textwrap.dedent(
    """\
    #!{python}
    import json, os, subprocess, sys, time
    def start_mcp_servers(agent):
        path = os.path.join(os.environ["CAO_AGENTS_DIR"], agent + ".json")
        servers = json.load(open(path)).get("mcpServers", {{}})
        sys.stdout.write("0 of %d mcp servers initialized. ctrl-c to start chatting now\\r\\n" % len(servers))
        sys.stdout.flush()
        started = {{}}
        for name, spec in servers.items():
            proc = subprocess.Popen([spec["command"], *spec.get("args", [])], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, env={{**os.environ, **spec.get("env", {{}})}})
            def rpc(message, proc=proc):
                proc.stdin.write((json.dumps(message) + "\\n").encode())
                proc.stdin.flush()
                return json.loads(proc.stdout.readline()) if "id" in message else None
            rpc({{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {{"protocolVersion": "2025-06-18",
                 "capabilities": {{}}, "clientInfo": {{"name": "fake-kiro", "version": "0"}}}}}})
            rpc({{"jsonrpc": "2.0", "method": "notifications/initialized"}})
            tools = rpc({{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}})["result"]["tools"]
            started[name] = (rpc, [t["name"] for t in tools])
        return started
    args = sys.argv[1:]
    if args[:2] == ["chat", "--help"]:
        print("Usage: kiro-cli chat [OPTIONS]\\n      --agent <AGENT>\\n      --agent-engine <ENGINE>")
        print("      --model <MODEL>\\n  -a, --trust-all-tools\\n      --legacy-ui\\n  -h, --help")
        sys.exit(0)
    with open(os.environ["FAKE_KIRO_LOG"], "a") as log:
        log.write(json.dumps(args) + "\\n")
    agent = args[args.index("--agent") + 1]
    if "--legacy-ui" not in args or os.environ.get("FAKE_KIRO_LEGACY_HANGS"):
        sys.stdout.write(" " + agent + " · model · 0%\\r\\n Initializing · type to queue a message\\r\\n")
        sys.stdout.flush()
        time.sleep(3600)
    servers = start_mcp_servers(agent)
    turn = 0
    while True:
        sys.stdout.write("[" + agent + "] " + str(turn) + "% > ")
        sys.stdout.flush()
        line = sys.stdin.readline()
        if not line or line.strip() == "/exit":
            break
        if line.strip().startswith("call "):
            turn += 1
            rpc, _ = servers["cao-mcp-server"]
            _, name, *arguments = line.strip().split(None, 2)
            call = {{"name": name, "arguments": json.loads(arguments[0] if arguments else "{{}}")}}
            answer = rpc({{"jsonrpc": "2.0", "id": 2 + turn, "method": "tools/call", "params": call}})
            text = "".join(c.get("text", "") for c in answer.get("result", {{}}).get("content", []))
            sys.stdout.write("> " + (text or json.dumps(answer)).replace("\\n", " ")[:150] + "\\r\\n▸ Credits: 0.01\\r\\n")
        elif line.strip():
            turn += 1
            time.sleep(0.3)
            sys.stdout.write("> Hello from the line UI.\\r\\n▸ Credits: 0.01 • Time: 1s\\r\\n")
    """
)


@pytest.fixture
def kiro_home(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "kiro-cli"
    fake.write_text(FAKE_KIRO.format(python=sys.executable))
    fake.chmod(0o755)
    return bin_dir, tmp_path / "kiro-launches.jsonl"


def start(cao_factory, kiro_home, **env: str) -> CaoServer:
    bin_dir, log = kiro_home
    server = cao_factory(
        "home",
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        FAKE_KIRO_LOG=str(log),
        CAO_PROVIDER_INIT_TIMEOUT="4",
        **env,
    ).start()
    installed = server.client.post("/agents/profiles/install", json={"source": "developer", "provider": "kiro_cli"})
    assert installed.status_code == 200, installed.text
    return server


def launches(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_a_tui_that_does_not_come_up_is_started_again_in_the_line_ui(cao_factory, kiro_home):
    cao = start(cao_factory, kiro_home)
    t0 = time.monotonic()
    resp = cao.client.post("/sessions", params={"agent_profile": "developer", "provider": "kiro_cli"})
    assert resp.status_code == 201, resp.text
    term = resp.json()
    assert term["status"] == "idle" and time.monotonic() - t0 >= 4  # after the TUI's timeout
    first, second = launches(kiro_home[1])
    assert "--legacy-ui" not in first and "--legacy-ui" in second
    assert second == [
        *first[: first.index("--trust-all-tools")],
        "--legacy-ui",
        *first[first.index("--trust-all-tools") :],
    ]
    # The same terminal, window and session: nothing of the first try shows.
    windows = cao.tmux("list-windows", "-a", "-F", "#{session_name} #{window_name}").stdout.split("\n")
    assert f"{term['session_name']} {term['name']}" in windows
    assert "Initializing" not in cao.client.get(f"/terminals/{term['id']}/output").json()["output"]
    cao.send(term["id"], "please say hello")
    cao.wait_status(term["id"], "completed", timeout=20)
    last = cao.client.get(f"/terminals/{term['id']}/output", params={"mode": "last"}).json()["output"]
    assert last == "Hello from the line UI."


def test_the_fallback_is_tried_once_and_a_line_ui_start_has_none(cao_factory, kiro_home):
    cao = start(cao_factory, kiro_home, FAKE_KIRO_LEGACY_HANGS="1")
    resp = cao.client.post("/sessions", params={"agent_profile": "developer", "provider": "kiro_cli"})
    assert resp.status_code == 504, resp.text
    assert len(launches(kiro_home[1])) == 2  # TUI, then line UI, then it gives up
    assert cao.client.get("/terminals").json() == []  # nothing left behind
    kiro_home[1].unlink()
    yolo = cao.client.post("/sessions", params={"agent_profile": "developer", "provider": "kiro_cli", "yolo": "true"})
    assert yolo.status_code == 504, yolo.text
    [only] = launches(kiro_home[1])
    assert "--legacy-ui" in only  # unrestricted tools start in the line UI: no second try


def test_kiro_gets_cao_tools_from_the_relay_as_its_own_terminal_across_a_server_restart(cao_factory, kiro_home):
    """The agent file is one per profile: cao-mcp-server (the relay) takes this agent's endpoint
    and credential from the environment Kiro starts it with. Kiro is ready once the relay has
    listed cao's tools; a call made through it after cao-server was killed -9 and restarted runs
    once, as the Kiro terminal."""
    cao = start(cao_factory, kiro_home)
    agent_file = Path(cao.env["CAO_AGENTS_DIR"]) / "developer.json"
    entry = json.loads(agent_file.read_text())["mcpServers"]["cao-mcp-server"]
    assert Path(entry["command"]).name == "cao-mcp-server" and "env" not in entry
    # yolo: the line UI at once (no TUI timeout first); 201 only once the relay listed the tools.
    params = {"agent_profile": "developer", "provider": "kiro_cli", "yolo": "true"}
    resp = cao.client.post("/sessions", params=params)
    assert resp.status_code == 201, resp.text
    tid = resp.json()["id"]
    relay = [
        p
        for p in psutil.process_iter(["environ", "cmdline"])
        if (p.info["environ"] or {}).get("CAO_TERMINAL_ID") == tid
        and any("cao-mcp-server" in a for a in p.info["cmdline"] or [])
    ]
    assert relay, "Kiro did not start cao-mcp-server"
    credential = relay[0].info["environ"]["CAO_MCP_TOKEN"]
    assert credential.startswith(f"{tid}.") and relay[0].info["environ"]["CAO_MCP_URL"] == f"{cao.url}/mcp"
    assert credential not in " ".join(relay[0].info["cmdline"]) and credential not in agent_file.read_text()
    assert tid not in agent_file.read_text()

    receiver = cao.create_session("developer", session_name="inbox")["id"]  # a mock agent
    cao.kill9()
    cao.start()
    message = {"receiver_id": receiver, "message": "from kiro, after the restart"}
    cao.send(tid, "call send_message " + json.dumps(message))
    cao.wait_status(tid, "completed", timeout=30)
    assert '"success": true' in cao.client.get(f"/terminals/{tid}/output", params={"mode": "last"}).json()["output"]
    inbox = cao.client.get(f"/terminals/{receiver}/inbox/messages").json()
    assert [(m["sender_id"], m["message"].split("\n")[0]) for m in inbox] == [(tid, "from kiro, after the restart")]


def test_the_fallback_starts_the_line_ui_in_a_hostile_directory_as_only_a_path(cao_factory, kiro_home, tmp_path):
    """respawn-pane's `-c` is expanded as a tmux format, like new-window's: the fallback must
    pass the working directory as data, or tmux runs a `#(…)` in it (tmux 3.3a does)."""
    marker = tmp_path / "pwned"
    # Every kind of syntax a path can carry into tmux or a shell; only `#(…)`/`#{…}` are live
    # for tmux, the rest would be if the path ever reached a shell unquoted.
    workdir = tmp_path / "d#(touch $CAO_TEST_MARKER)#{pane_id};$(touch $CAO_TEST_MARKER)`touch $CAO_TEST_MARKER`'\""
    workdir.mkdir()
    cao = start(cao_factory, kiro_home, CAO_TEST_MARKER=str(marker))  # the tmux server's shell would expand it
    resp = cao.client.post(
        "/sessions",
        params={"agent_profile": "developer", "provider": "kiro_cli", "working_directory": str(workdir)},
    )
    assert resp.status_code == 201, resp.text
    term = resp.json()
    first, second = launches(kiro_home[1])
    assert "--legacy-ui" not in first and "--legacy-ui" in second  # the respawn happened
    # The pane's live directory, as tmux reports it (the route reads #{pane_current_path}).
    path = cao.client.get(f"/terminals/{term['id']}/working-directory").json()["working_directory"]
    assert path == str(workdir)
    cao.send(term["id"], "please say hello")  # the respawned agent works there, and answers
    cao.wait_status(term["id"], "completed", timeout=20)
    assert not marker.exists()
