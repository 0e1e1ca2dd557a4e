"""Gemini CLI end to end: the pinned real `gemini` (npm @google/gemini-cli) in cao's tmux,
confined to a temporary home, talking to the scripted model, driven through cao-server's
HTTP API and cao-mcp-server (official MCP client SDK).

One cao-server and one scripted model serve the whole module; each test starts its own
agents and uses its own trigger words, so the tests do not depend on each other.
"""
from __future__ import annotations

import json
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import psutil
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from cli_agent_orchestrator.scripted_model.harness import ScriptedModelServer
from conftest import CaoServer, wait_until
from real_cli_support import npm_binary, real_cli_server
from test_mcp_server import _mcp_command, mcp_env

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")

PACKAGE, VERSION, BINARY = "@google/gemini-cli", "0.61.0", "gemini"
PROVIDER = "gemini_cli"
SCRIPT = "gemini"
START_S, TURN_S = 90, 60  # generous: two shared cores, other developers' tests alongside

RULES = [
    {"match": "greet the tester", "reply": "Hello from the scripted model.\nSecond line, exact."},
    {"match": "count the files", "steps": [{"tool": "shell", "args": {"command": "echo tool-output-77"}},
                                           {"text": "The shell said: done."}]},
    {"match": "create the marker", "steps": [{"tool": "shell", "args": {"command": "touch marker.txt"}},
                                             {"text": "Marker created."}]},
    {"match": "create the second marker", "steps": [{"tool": "shell", "args": {"command": "touch second.txt"}},
                                                    {"text": "Second marker created."}]},
    {"match": "think slowly", "steps": [{"delay_ms": 20000}, {"text": "too late"}]},
    {"match": "delegate the summary", "steps": [
        {"tool": "mcp:cao-mcp-server:handoff",
         "args": {"agent_profile": "mockworker", "message": "summarise the plan"}},
        {"text": "Handoff finished."}]},
    {"match": r"Assigned by terminal (?P<sup>[a-f0-9]{8})", "steps": [
        {"tool": "mcp:cao-mcp-server:send_message", "args": {"receiver_id": "{sup}", "message": "report from gemini"}},
        {"text": "Reported back."}]},
]
PROFILES = {
    "gemdev": f"---\nname: gemdev\nprovider: {PROVIDER}\n---\nYou are a careful developer.\n",
    "mockworker": "---\nname: mockworker\nprovider: mock_cli\n---\nYou are a test worker.\n",
    "mocksup": ("---\nname: mocksup\nprovider: mock_cli\nmock:\n  rules:\n    - match: 'hand out'\n"
                "      steps:\n        - tool: assign\n"
                "          args: {agent_profile: gemdev, message: 'the assigned task'}\n"
                "          save: worker\n      reply: 'assigned {worker}'\n---\nYou supervise.\n"),
}


@pytest.fixture(scope="module")
def binary() -> Path:
    return npm_binary(PACKAGE, VERSION, BINARY)


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        server.set_script(SCRIPT, RULES)
        yield server


@pytest.fixture(scope="module")
def cao(binary: Path, model: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CaoServer]:
    root = tmp_path_factory.mktemp("gemini")
    server = real_cli_server(root, [binary], model.cli_env(SCRIPT))
    store = server.home / "agent-store"
    store.mkdir(parents=True, exist_ok=True)
    for name, text in PROFILES.items():
        (store / f"{name}.md").write_text(text)
    (root / "work").mkdir()
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(autouse=True)
def no_leftovers(request: pytest.FixtureRequest) -> Iterator[None]:
    """A failed test must not leave agents behind for the next one (the server is shared)."""
    yield
    if "cao" in request.fixturenames:
        server: CaoServer = request.getfixturevalue("cao")
        for term in server.client.get("/terminals").json():
            server.client.delete(f"/terminals/{term['id']}")


def workdir(cao: CaoServer) -> str:
    return str(cao.home.parent / "work")


def start(cao: CaoServer, yolo: bool = True) -> dict:
    resp = cao.client.post("/sessions", params={"agent_profile": "gemdev", "provider": PROVIDER, "yolo": yolo,
                                                "working_directory": workdir(cao)}, timeout=START_S + 30)
    assert resp.status_code == 201, resp.text
    term = resp.json()
    assert term["status"] == "idle", term
    return term


def last_reply(cao: CaoServer, terminal_id: str) -> str:
    resp = cao.client.get(f"/terminals/{terminal_id}/output", params={"mode": "last"})
    assert resp.status_code == 200, resp.text
    return resp.json()["output"]


def reply_or_empty(cao: CaoServer, terminal_id: str) -> str:
    resp = cao.client.get(f"/terminals/{terminal_id}/output", params={"mode": "last"})
    return resp.json()["output"] if resp.status_code == 200 else ""


def agent_processes(terminal_id: str) -> list[psutil.Process]:
    """Every process (the CLI, its MCP servers, hooks) carrying this terminal's identity."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("CAO_TERMINAL_ID") == terminal_id:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def delete_and_check_nothing_left(cao: CaoServer, terminal_id: str) -> None:
    assert agent_processes(terminal_id), "the agent should be running before the delete"
    assert cao.client.delete(f"/terminals/{terminal_id}").status_code == 200
    wait_until(lambda: not agent_processes(terminal_id), timeout=20, interval=0.2,
               message=f"no process with CAO_TERMINAL_ID={terminal_id}")


# --- tests --------------------------------------------------------------------------------
def test_text_turn_completes_with_the_exact_answer_then_delete_leaves_no_process(cao: CaoServer) -> None:
    term = start(cao)
    cao.send(term["id"], "please greet the tester")
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    # Gemini's own AfterAgent hook (through cao-hook) ended the turn, not the screen.
    assert cao.client.get(f"/terminals/{term['id']}").json()["status_source"] == "hook:AfterAgent"
    assert last_reply(cao, term["id"]) == "Hello from the scripted model.\nSecond line, exact."
    delete_and_check_nothing_left(cao, term["id"])


def test_shell_tool_turn(cao: CaoServer, model: ScriptedModelServer) -> None:
    term = start(cao)
    cao.send(term["id"], "count the files")
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert last_reply(cao, term["id"]) == "The shell said: done."
    results = [r["tool_result"] for r in model.requests(SCRIPT) if "count the files" in r["user_text"]]
    assert any("tool-output-77" in r for r in results), results
    delete_and_check_nothing_left(cao, term["id"])


def test_permission_prompt_is_waiting_and_answered_through_mcp(cao: CaoServer) -> None:
    term = start(cao, yolo=False)
    cao.send(term["id"], "create the marker")
    cao.wait_status(term["id"], "waiting_user_answer", timeout=TURN_S)
    assert not (Path(workdir(cao)) / "marker.txt").exists()

    async def answer() -> dict:
        # The provider turns "yes" into the key "1" ("Allow once") for Gemini's option menu.
        params = StdioServerParameters(command=_mcp_command()[0], args=_mcp_command()[1],
                                       env=mcp_env(cao, None))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("answer_user_prompt", {"terminal_id": term["id"], "answer": "yes"})
            return result.structured_content or {}

    assert anyio.run(answer)["success"] is True
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert last_reply(cao, term["id"]) == "Marker created."
    assert (Path(workdir(cao)) / "marker.txt").exists()
    delete_and_check_nothing_left(cao, term["id"])


def test_a_declined_permission_ends_the_turn_without_running_the_tool(cao: CaoServer) -> None:
    term = start(cao, yolo=False)
    cao.send(term["id"], "create the second marker")
    cao.wait_status(term["id"], "waiting_user_answer", timeout=TURN_S)
    cao.send(term["id"], "no")  # the provider answers the menu with Esc
    # Gemini shows the turn as cancelled; no hook fires, the screen says idle (definite).
    cao.wait_status(term["id"], "idle", timeout=TURN_S)
    assert not (Path(workdir(cao)) / "second.txt").exists()
    delete_and_check_nothing_left(cao, term["id"])


def test_exit_command_ends_the_cli_and_its_mcp_server(cao: CaoServer) -> None:
    term = start(cao)
    assert cao.client.post(f"/terminals/{term['id']}/exit").status_code == 200
    cao.wait_status(term["id"], "error", timeout=TURN_S)  # the pane's process is gone
    assert "exited" in cao.client.get(f"/terminals/{term['id']}").json()["status_reason"]
    wait_until(lambda: not agent_processes(term["id"]), timeout=20, interval=0.2, message="no leftover process")
    assert cao.client.delete(f"/terminals/{term['id']}").status_code == 200


def test_death_mid_turn_is_reported_as_error(cao: CaoServer) -> None:
    term = start(cao)
    cao.send(term["id"], "think slowly")
    cao.wait_status(term["id"], "processing", timeout=TURN_S)
    cli = [p for p in agent_processes(term["id"]) if "gemini" in " ".join(p.cmdline())]
    assert cli, "the gemini process"
    cli[0].send_signal(signal.SIGKILL)
    cao.wait_status(term["id"], "error", timeout=TURN_S)
    assert cao.client.delete(f"/terminals/{term['id']}").status_code == 200
    wait_until(lambda: not agent_processes(term["id"]), timeout=20, interval=0.2, message="no leftover process")


def test_gemini_supervisor_hands_off_to_a_mock_worker(cao: CaoServer, model: ScriptedModelServer) -> None:
    sup = start(cao)
    cao.send(sup["id"], "delegate the summary")
    cao.wait_status(sup["id"], "completed", timeout=TURN_S)
    assert last_reply(cao, sup["id"]) == "Handoff finished."
    results = [r["tool_result"] for r in model.requests(SCRIPT) if "delegate the summary" in r["user_text"]]
    # Gemini wraps tool output in <untrusted_context> tags; the JSON result is inside.
    handed = [json.loads(r[r.index("{"):r.rindex("}") + 1]) for r in results if "MOCK: summarise the plan" in r]
    assert handed and handed[0]["success"] is True, results
    assert handed[0]["message"].startswith("Successfully handed off to mockworker (mock_cli)")
    assert cao.client.get(f"/terminals/{handed[0]['terminal_id']}").status_code == 404  # worker removed
    delete_and_check_nothing_left(cao, sup["id"])


def test_gemini_worker_of_a_mock_supervisor_reports_back(cao: CaoServer) -> None:
    resp = cao.client.post("/sessions", params={"agent_profile": "mocksup", "working_directory": workdir(cao)})
    assert resp.status_code == 201, resp.text
    sup = resp.json()
    cao.send(sup["id"], "hand out the work")
    cao.wait_status(sup["id"], "completed", timeout=TURN_S)
    worker = last_reply(cao, sup["id"]).removeprefix("assigned ").strip()
    assert cao.client.get(f"/terminals/{worker}").json()["provider"] == PROVIDER
    # The gemini worker calls send_message; the mock supervisor then echoes the report.
    wait_until(lambda: "report from gemini" in reply_or_empty(cao, sup["id"]), timeout=START_S + TURN_S,
               interval=0.5, message="the worker's report reaching the supervisor")
    messages = cao.client.get(f"/terminals/{sup['id']}/inbox/messages").json()
    assert [m["sender_id"] for m in messages] == [worker]
    delete_and_check_nothing_left(cao, worker)
    assert cao.client.delete(f"/terminals/{sup['id']}").status_code == 200


def test_user_configuration_is_used_and_never_written(cao: CaoServer, model: ScriptedModelServer) -> None:
    gemini_dir = Path(cao.env["HOME"]) / ".gemini"
    gemini_dir.mkdir(parents=True, exist_ok=True)
    marker = gemini_dir.parent / "user-hook-ran"
    user_files = {
        # JSON with comments, as Gemini allows; the user's own hook must keep running.
        "settings.json": '{\n  // mine\n  "ui": {"hideTips": true},\n  "hooks": {"BeforeAgent": [{"hooks": '
                         f'[{{"type": "command", "command": "touch {marker}"}}]}}]}},\n}}\n',
        "GEMINI.md": "User note: the user's own global context.\n",
        "oauth_creds.json": '{"token": "the user login"}\n',
    }
    for name, text in user_files.items():
        (gemini_dir / name).write_text(text)
    before = {name: (gemini_dir / name).stat().st_mtime_ns for name in user_files}
    model.clear_requests(SCRIPT)
    term = start(cao)
    cao.send(term["id"], "please greet the tester")
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert marker.exists(), "the user's own BeforeAgent hook ran too"
    sent = json.dumps([r["body"] for r in model.requests(SCRIPT) if not r["side"]])
    assert "You are a careful developer." in sent and "User note: the user" in sent  # profile + user context
    shadow = cao.home / "tmp" / term["id"] / "gemini-home" / ".gemini"
    assert (shadow / "oauth_creds.json").resolve() == (gemini_dir / "oauth_creds.json").resolve()  # login kept
    delete_and_check_nothing_left(cao, term["id"])
    for name, text in user_files.items():
        assert (gemini_dir / name).read_text() == text and (gemini_dir / name).stat().st_mtime_ns == before[name]
    for name in user_files:
        (gemini_dir / name).unlink()


def test_crash_at_start_fails_the_create_and_leaves_nothing(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / BINARY).write_text("#!/bin/sh\necho 'fatal: cannot start' >&2\nexit 3\n")
    (fake / BINARY).chmod(0o755)
    server = real_cli_server(tmp_path, [fake / BINARY])
    server.start()
    try:
        resp = server.client.post("/sessions", params={"agent_profile": "developer", "provider": PROVIDER},
                                  timeout=START_S + 30)
        assert resp.status_code >= 400, resp.text
        assert "failed to start" in resp.text and "exited" in resp.text  # names the cause
        assert server.client.get("/terminals").json() == []
    finally:
        server.cleanup()


def test_missing_binary_fails_clearly_and_leaves_nothing(tmp_path: Path) -> None:
    server = real_cli_server(tmp_path, [])
    server.env["PATH"] = "/usr/bin:/bin"  # no gemini here
    server.start()
    try:
        started = time.monotonic()
        resp = server.client.post("/sessions", params={"agent_profile": "developer", "provider": PROVIDER})
        assert resp.status_code == 400, resp.text
        assert "`gemini`" in resp.json()["detail"] and "PATH" in resp.json()["detail"]
        assert time.monotonic() - started < 10
        assert server.client.get("/terminals").json() == []
        assert server.client.get("/sessions").json() == []
    finally:
        server.cleanup()
