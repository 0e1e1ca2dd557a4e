"""opencode (npm `opencode-ai` 1.18.33) end to end: the real binary in cao's tmux, against
the scripted model server, in a temporary home.

The temporary home stands in for a user's setup: `~/.config/opencode/opencode.json`
defines the model provider and `~/.local/share/opencode/auth.json` holds its key, as
`opencode auth login` leaves them. cao's per-terminal settings are merged over them
and both files must come out unchanged.

opencode reaches cao's tools over HTTP (cao-server's /mcp, the agent's credential taken from
its environment by `{env:CAO_MCP_TOKEN}` in the config) and lists them as it starts.

opencode takes 5-10 s to start and ~700 MB per process: every test starts one agent
and the module shares one cao-server and one model server.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from conftest import CaoServer, wait_until
from crash_support import long_paste_survives_a_crash
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from real_cli_support import npm_binary, real_cli_server

from cao_testkit.scripted_model.harness import ScriptedModelServer

PACKAGE, VERSION, BINARY = "opencode-ai", "1.18.33", "opencode"
SCRIPT = "opencode"
TURN_S = 90  # the first turn of a fresh opencode takes ~5 s alone; the machine is shared
# Longer than the pane is wide, with markdown: the screen wraps and styles it, opencode's stored
# answer (sent by cao's plugin with session.idle) is what the model wrote.
LONG_ANSWER = "A **bold** claim and `make release`: " + " ".join(f"word{n}" for n in range(60)) + "."
RULES = [
    {"match": "say hello", "reply": "Hello from the scripted model."},
    {"match": "answer at length", "reply": LONG_ANSWER},
    # $((6*7)) only becomes 42 if a real shell ran the command.
    {
        "match": "run the shell",
        "steps": [
            {"tool": "shell", "args": {"command": "echo shell-ran-$((6*7))"}},
            {"text": "The shell said: {tool_result}"},
        ],
    },
    {"match": "fail now", "steps": [{"error": 400, "message": "scripted refusal", "times": 1000}]},
    {"match": "slow turn", "steps": [{"delay_ms": 60000}, {"text": "too late"}]},
    {
        "match": "delegate to the mock",
        "steps": [
            {
                "tool": "mcp:cao-mcp-server:handoff",
                "args": {"agent_profile": "mock_worker", "message": "ping from opencode"},
            },
            {"text": "Worker answered: {tool_result}"},
        ],
    },
]
PROFILES = {
    "oc_dev": "---\nname: oc_dev\nprovider: opencode_cli\nrole: developer\n---\nYou are a careful developer.\n",
    "oc_asks": "---\nname: oc_asks\nprovider: opencode_cli\nrole: developer\npermissionMode: default\n---\n"
    "You are a careful developer.\n",
    "oc_sup": "---\nname: oc_sup\nprovider: opencode_cli\nrole: supervisor\n---\nYou delegate work with cao tools.\n",
    "mock_worker": "---\nname: mock_worker\nprovider: mock_cli\n---\nYou echo.\n",
    "mock_sup": (
        "---\nname: mock_sup\nprovider: mock_cli\nmock:\n  rules:\n    - match: delegate hello\n"
        "      steps:\n        - tool: handoff\n          args: {agent_profile: oc_dev, message: please say hello}\n"
        '          save: report\n      reply: "SUPERVISOR GOT: {report}"\n---\nYou supervise.\n'
    ),
}


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        server.set_script(SCRIPT, RULES)
        yield server


def user_setup(cao: CaoServer, model: ScriptedModelServer) -> list[Path]:
    """The user's own opencode config and login, as `opencode auth login` leaves them."""
    config = Path(cao.env["XDG_CONFIG_HOME"]) / "opencode" / "opencode.json"
    auth = Path(cao.env["XDG_DATA_HOME"]) / "opencode" / "auth.json"
    for path in (config, auth):
        path.parent.mkdir(parents=True, exist_ok=True)
    # "$schema" as opencode itself adds it to the global file on its first run.
    config.write_text(
        json.dumps(
            {
                "$schema": "https://opencode.ai/config.json",
                "model": "scripted/fake-model",
                "small_model": "scripted/fake-model",
                "provider": {
                    "scripted": {
                        "npm": "@ai-sdk/openai-compatible",
                        "name": "Scripted",
                        "options": {"baseURL": model.base_url(SCRIPT, "/v1")},
                        "models": {
                            "fake-model": {
                                "name": "Fake Model",
                                "tool_call": True,
                                "limit": {"context": 128000, "output": 8192},
                            }
                        },
                    }
                },
            },
            indent=2,
        )
    )
    auth.write_text(json.dumps({"scripted": {"type": "api", "key": "user-key"}}))
    return [config, auth]


@pytest.fixture(scope="module")
def oc(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer) -> Iterator[CaoServer]:
    binary = npm_binary(PACKAGE, VERSION, BINARY)
    server = real_cli_server(tmp_path_factory.mktemp("opencode"), [binary])
    user_files = user_setup(server, model)
    before = {path: path.read_bytes() for path in user_files}
    store = server.home / "agent-store"
    store.mkdir(parents=True, exist_ok=True)
    for name, text in PROFILES.items():
        (store / f"{name}.md").write_text(text)
    server.start()
    try:
        yield server
    finally:
        server.cleanup()
    assert {path: path.read_bytes() for path in user_files} == before, "the user's opencode files were modified"


@pytest.fixture(autouse=True)
def no_terminal_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test starts with no terminal, even when the one before it failed half-way."""
    yield
    if "oc" in request.fixturenames:
        server: CaoServer = request.getfixturevalue("oc")
        for term in server.client.get("/terminals").json():
            server.client.delete(f"/terminals/{term['id']}")


# --- helpers ------------------------------------------------------------------------
def create(cao: CaoServer, profile: str, **params: str) -> dict:
    resp = cao.client.post("/sessions", params={"agent_profile": profile, **params}, timeout=120)
    assert resp.status_code == 201, resp.text
    term = resp.json()
    assert term["status"] == "idle" and term["provider"] == "opencode_cli"
    return term


def last_reply(cao: CaoServer, terminal_id: str) -> str:
    resp = cao.client.get(f"/terminals/{terminal_id}/output", params={"mode": "last"})
    assert resp.status_code == 200, resp.text
    return resp.json()["output"]


def processes_with(name: str, value: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(name) == value:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def agent_processes(terminal_id: str) -> list[psutil.Process]:
    """Every process whose environment names this terminal (sh, opencode, cao-mcp-server, ...)."""
    return processes_with("CAO_TERMINAL_ID", terminal_id)


def server_processes(cao: CaoServer) -> list[psutil.Process]:
    """Every process started under this cao-server (its agents carry its CAO_HOME_DIR)."""
    return [p for p in processes_with("CAO_HOME_DIR", str(cao.home)) if p.pid != (cao.proc.pid if cao.proc else 0)]


def delete_and_check_nothing_left(cao: CaoServer, terminal_id: str) -> None:
    own_dir = cao.home / "tmp" / terminal_id
    assert cao.client.delete(f"/terminals/{terminal_id}").status_code == 200
    wait_until(lambda: not agent_processes(terminal_id), timeout=20, message="the agent's processes to end")
    # The launch script's trap removes the terminal's files, Bun's unpacked libraries included.
    wait_until(lambda: not own_dir.exists(), timeout=10, message=f"{own_dir} to be removed")


def tool_results(model: ScriptedModelServer) -> list[str]:
    return [r["tool_result"].strip() for r in model.requests(SCRIPT) if r.get("tool_result")]


def offered_tools(request: dict) -> set[str]:
    """The tool names opencode offered the model in one request (Chat Completions)."""
    return {(t.get("function") or {}).get("name") for t in request["body"].get("tools") or []}


class Follow:
    """cao-server's events whose topic matches `pattern` (GET /events, Server-Sent Events), in
    the order the bus published them, collected on a thread from the moment the stream is open
    until the block ends; with `types`, only events of those types are kept."""

    def __init__(self, cao: CaoServer, pattern: str, types: set[str] | None = None):
        self.url, self.pattern, self.types = cao.url + "/events", pattern, types
        self.events: list[dict] = []
        self._open = threading.Event()
        self._client = httpx.Client(timeout=httpx.Timeout(10, read=None))

    def __enter__(self) -> Follow:
        threading.Thread(target=self._read, daemon=True).start()
        assert self._open.wait(10), f"GET /events?pattern={self.pattern} did not open"
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.close()

    def _read(self) -> None:
        try:
            with self._client.stream("GET", self.url, params={"pattern": self.pattern}) as resp:
                kind = ""
                for line in resp.iter_lines():
                    if line.startswith(": connected"):
                        self._open.set()
                    elif line.startswith("event: "):
                        kind = line[len("event: ") :]
                    elif line.startswith("data: ") and (self.types is None or kind in self.types):
                        self.events.append(json.loads(line[len("data: ") :]))
        except (httpx.HTTPError, RuntimeError, ValueError):
            pass  # closed by __exit__, or the server went away

    def of(self, terminal_id: str, key: str = "terminal_id") -> list[dict]:
        return [e for e in self.events if e.get(key) == terminal_id]


def files_holding(text: str, *roots: Path) -> list[Path]:
    """Regular files under `roots` whose bytes contain `text` (FIFOs and sockets are skipped)."""
    needle, found = text.encode(), []
    for root in roots:
        for folder, _dirs, names in os.walk(root):
            for name in names:
                path = Path(folder) / name
                try:
                    if stat.S_ISREG(path.lstat().st_mode) and needle in path.read_bytes():
                        found.append(path)
                except OSError:
                    continue  # removed meanwhile
    return found


# --- tests --------------------------------------------------------------------------
def test_text_shell_and_error_turns_then_delete_leaves_no_process(oc: CaoServer, model: ScriptedModelServer):
    term = create(oc, "oc_dev", yolo="true")
    tid = term["id"]
    settings = json.loads((oc.home / "tmp" / tid / "opencode.json").read_text())
    assert settings["agent"]["cao-oc_dev"]["prompt"] == "You are a careful developer."
    assert settings["permission"]["*"] == "allow"  # yolo
    assert agent_processes(tid), "the agent runs with CAO_TERMINAL_ID in its environment"

    oc.send(tid, "please say hello")
    assert oc.wait_status(tid, {"completed", "error"}, TURN_S) == "completed"
    assert last_reply(oc, tid) == "Hello from the scripted model."

    oc.send(tid, "please answer at length")
    assert oc.wait_status(tid, {"completed", "error"}, TURN_S) == "completed"
    assert last_reply(oc, tid) == LONG_ANSWER

    oc.send(tid, "now run the shell")
    assert oc.wait_status(tid, {"completed", "error"}, TURN_S) == "completed"
    assert last_reply(oc, tid) == "The shell said: shell-ran-42"
    assert "shell-ran-42" in tool_results(model)

    oc.send(tid, "please fail now")
    assert oc.wait_status(tid, {"completed", "error"}, TURN_S) == "error"
    assert "scripted refusal" in oc.client.get(f"/terminals/{tid}").json()["status_reason"]

    delete_and_check_nothing_left(oc, tid)


@pytest.mark.anyio
async def test_permission_prompt_waits_then_mcp_answer_lets_it_run_and_a_killed_agent_is_an_error(
    oc: CaoServer, model: ScriptedModelServer, anyio_backend: str
):
    tid = create(oc, "oc_asks")["id"]  # no yolo, prompts kept: bash asks first
    runs = tool_results(model).count("shell-ran-42")
    oc.send(tid, "please run the shell for me")
    assert oc.wait_status(tid, {"waiting_user_answer", "completed", "error"}, TURN_S) == "waiting_user_answer"
    # Whichever saw the dialog last (the plugin's permission.asked or the screen) names the command.
    assert "echo shell-ran-$((6*7))" in oc.client.get(f"/terminals/{tid}").json()["status_reason"]
    assert tool_results(model).count("shell-ran-42") == runs  # nothing ran yet

    # opencode's dialog ignores typed text: the answer's Enter confirms "Allow once".
    env = {k: v for k, v in oc.env.items() if k != "CAO_TERMINAL_ID"}
    script = Path(sys.executable).parent / "cao-mcp-server"
    params = StdioServerParameters(command=str(script), args=[], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("answer_user_prompt", {"terminal_id": tid, "answer": "yes"})
    assert result.structured_content and result.structured_content["success"] is True, result
    # The dialog's status lasts until opencode reports the reply (its plugin's permission.replied).
    assert oc.wait_status(tid, {"completed", "error"}, TURN_S) == "completed"
    assert last_reply(oc, tid) == "The shell said: shell-ran-42"
    assert tool_results(model).count("shell-ran-42") == runs + 1

    # Death mid-turn: the model hangs, opencode is killed; cao reports it.
    oc.send(tid, "a slow turn please")
    oc.wait_status(tid, "processing", TURN_S)
    opencode = [p for p in agent_processes(tid) if p.name().startswith("opencode")]
    assert opencode, [p.name() for p in agent_processes(tid)]
    for proc in opencode:
        proc.send_signal(signal.SIGKILL)
    assert oc.wait_status(tid, {"error", "completed", "idle"}, 30) == "error"
    assert "exited" in oc.client.get(f"/terminals/{tid}").json()["status_reason"]
    delete_and_check_nothing_left(oc, tid)


def test_opencode_supervisor_hands_off_to_a_mock_worker(oc: CaoServer):
    sup = create(oc, "oc_sup")["id"]
    oc.send(sup, "please delegate to the mock")
    assert oc.wait_status(sup, {"completed", "error", "waiting_user_answer"}, TURN_S) == "completed"
    reply = last_reply(oc, sup)
    assert reply.startswith("Worker answered:") and "MOCK: ping from opencode" in reply, reply
    assert [t["id"] for t in oc.client.get("/terminals").json()] == [sup]  # the worker was torn down
    # /exit ends opencode and its MCP server; the launch script cleans up after it.
    assert oc.client.post(f"/terminals/{sup}/exit").status_code == 200
    wait_until(lambda: not agent_processes(sup), timeout=30, message="opencode to exit")
    wait_until(lambda: not (oc.home / "tmp" / sup).exists(), timeout=10, message="the terminal's files to go")
    delete_and_check_nothing_left(oc, sup)


def test_a_supervisor_whose_first_message_is_a_handoff_hands_off_on_the_first_try(
    oc: CaoServer, model: ScriptedModelServer
):
    """opencode lists cao's tools on /mcp as it starts; cao reports the agent ready, and delivers
    its first message, only once it has: the first request the model sees offers the handoff
    tool, and the call works."""
    model.clear_requests(SCRIPT)
    kinds = {"McpListed", "StatusChanged"}
    with Follow(oc, "terminal.*.*", kinds) as terminal, Follow(oc, "handoff.*.started") as handoffs:
        resp = oc.client.post(
            "/sessions",
            params={"agent_profile": "oc_sup"},
            json={"initial_message": "please delegate to the mock"},
            timeout=120,
        )
        assert resp.status_code == 201, resp.text
        sup = resp.json()["id"]
        assert oc.wait_status(sup, {"completed", "error", "waiting_user_answer"}, 2 * TURN_S) == "completed"
        assert [e["caller_id"] for e in handoffs.events] == [sup]  # one handoff, from the supervisor
    seen = [e["type"] if e["type"] == "McpListed" else e["status"] for e in terminal.of(sup)]
    assert "McpListed" in seen, f"opencode never listed cao's tools on /mcp: {seen}"
    assert "idle" not in seen[: seen.index("McpListed")], f"ready before it had cao's tools: {seen}"
    first = next(r for r in model.requests(SCRIPT) if not r["side"])
    assert "delegate to the mock" in first["user_text"]
    assert "cao-mcp-server_handoff" in offered_tools(first), sorted(offered_tools(first))
    [result] = tool_results(model)
    assert json.loads(result)["success"] is True and "MOCK: ping from opencode" in result
    reply = last_reply(oc, sup)
    assert reply.startswith("Worker answered:") and "MOCK: ping from opencode" in reply, reply
    delete_and_check_nothing_left(oc, sup)


def test_cao_server_killed_and_restarted_mid_session_the_next_tool_call_runs_once(
    oc: CaoServer, model: ScriptedModelServer
):
    """/mcp is stateless: no MCP session lives in the server, so a kill -9 and a restart cost the
    running opencode nothing; its next call reaches the new server and runs exactly once."""
    sup = create(oc, "oc_sup")["id"]  # 201 only once opencode has listed cao's tools
    oc.kill9()
    oc.start()
    assert oc.wait_status(sup, {"idle", "completed"}, 30)
    model.clear_requests(SCRIPT)
    with Follow(oc, "handoff.*.started") as handoffs:
        oc.send(sup, "please delegate to the mock")
        assert oc.wait_status(sup, {"completed", "error", "waiting_user_answer"}, TURN_S) == "completed"
        assert [e["caller_id"] for e in handoffs.events] == [sup]
    [result] = tool_results(model)
    assert json.loads(result)["success"] is True and "MOCK: ping from opencode" in result
    assert "MOCK: ping from opencode" in last_reply(oc, sup)
    delete_and_check_nothing_left(oc, sup)


def test_the_agents_credential_is_in_no_argv_no_file_and_no_answer(oc: CaoServer):
    """The credential reaches opencode only through its environment: its config names the
    variable, so no file (cao's, the user's, opencode's own logs) and no command line holds it."""
    sup = create(oc, "oc_sup")["id"]
    opencode = [p for p in agent_processes(sup) if p.name().startswith("opencode")]
    assert opencode, [p.name() for p in agent_processes(sup)]
    credential = opencode[0].environ()["CAO_MCP_TOKEN"]
    assert credential.startswith(f"{sup}.")
    for proc in agent_processes(sup):
        assert credential not in "\0".join(proc.cmdline()), proc.cmdline()
    own = oc.home / "tmp" / sup
    config = own / "opencode.json"
    assert json.loads(config.read_text())["mcp"]["cao-mcp-server"]["headers"] == {
        "X-CAO-Agent-Token": "{env:CAO_MCP_TOKEN}"
    }
    assert stat.S_IMODE(config.stat().st_mode) == 0o600 and stat.S_IMODE(own.stat().st_mode) == 0o700
    assert files_holding(credential, oc.home, Path(oc.env["HOME"]), Path(oc.env["TMPDIR"])) == []
    for path in ("/terminals", f"/terminals/{sup}", f"/terminals/{sup}/output"):
        assert credential not in oc.client.get(path).text, path
    delete_and_check_nothing_left(oc, sup)  # the terminal's directory goes with it


def test_opencode_worker_of_a_mock_supervisor(oc: CaoServer):
    resp = oc.client.post("/sessions", params={"agent_profile": "mock_sup"})
    assert resp.status_code == 201, resp.text
    sup = resp.json()["id"]
    oc.send(sup, "delegate hello")
    assert oc.wait_status(sup, {"completed", "error"}, 2 * TURN_S) == "completed"
    out = oc.client.get(f"/terminals/{sup}/output", params={"mode": "last"}).json()["output"]
    assert out == "SUPERVISOR GOT: Hello from the scripted model."
    assert [t["id"] for t in oc.client.get("/terminals").json()] == [sup]  # the worker was torn down
    wait_until(
        lambda: not [p for p in server_processes(oc) if p.name().startswith("opencode")],
        timeout=20,
        message="the opencode worker to end",
    )
    assert oc.client.delete(f"/terminals/{sup}").status_code == 200


def test_missing_binary_is_refused_naming_it(cao_factory):
    path = os.pathsep.join(
        d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / BINARY).exists()
    )
    server = cao_factory("no-opencode", PATH=path).start()
    resp = server.client.post("/sessions", params={"agent_profile": "developer", "provider": "opencode_cli"})
    assert resp.status_code == 400, resp.text
    assert "`opencode`" in resp.json()["detail"]
    assert server.client.get("/terminals").json() == []


def test_a_long_paste_interrupted_by_a_crash_is_submitted_once(oc: CaoServer, model: ScriptedModelServer):
    """opencode shows no summary, only the last lines of a long paste: after a crash between
    paste and Enter, cao presses Enter; the model gets the message once."""
    term = create(oc, "oc_dev", yolo="true")
    long_paste_survives_a_crash(
        oc,
        term["id"],
        lambda marker: sum(r["user_text"].count(marker) for r in model.requests(SCRIPT) if not r["side"]),
    )
