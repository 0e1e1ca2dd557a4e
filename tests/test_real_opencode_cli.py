"""opencode (npm `opencode-ai` 1.18.33) end to end: the real binary in cao's tmux, against
the scripted model server, in a temporary home.

The temporary home stands in for a user's setup: `~/.config/opencode/opencode.json`
defines the model provider and `~/.local/share/opencode/auth.json` holds its key, as
`opencode auth login` leaves them. cao's per-terminal settings are merged over them
and both files must come out unchanged.

opencode takes 5-10 s to start and ~700 MB per process: every test starts one agent
and the module shares one cao-server and one model server.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

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
RULES = [
    {"match": "say hello", "reply": "Hello from the scripted model."},
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
    assert oc.wait_status(tid, {"completed", "error", "waiting_user_answer"}, TURN_S) == "completed"
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


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_a_long_paste_interrupted_by_a_crash_is_submitted_once(oc: CaoServer, model: ScriptedModelServer):
    """opencode shows no summary, only the last lines of a long paste: after a crash between
    paste and Enter, cao presses Enter; the model gets the message once."""
    term = create(oc, "oc_dev", yolo="true")
    long_paste_survives_a_crash(
        oc,
        term["id"],
        lambda marker: sum(r["user_text"].count(marker) for r in model.requests(SCRIPT) if not r["side"]),
    )
