"""GitHub Copilot CLI end to end: the pinned real `copilot` (npm @github/copilot) in cao's tmux,
confined to a temporary home, talking to the scripted model through Copilot's own BYOK variables
(`COPILOT_PROVIDER_BASE_URL`, `COPILOT_OFFLINE`: no GitHub account), driven through cao-server's
HTTP API and the official MCP client SDK. Copilot reaches cao's tools on cao-server's /mcp itself.

One cao-server and one scripted model serve the module; each test starts its own agents and uses
its own trigger words, so the tests do not depend on each other.
"""

from __future__ import annotations

import json
import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from conftest import CaoServer, wait_until
from mcp_support import call, mcp_session

# Autouse: without tmux every test here skips, or fails under CI (CAO_REQUIRE_REAL_CLIS).
from real_cli_support import (
    agent_processes,
    delete_and_check_nothing_left,
    npm_binary,
    real_cli_prerequisites,  # noqa: F401
    real_cli_server,
    reply_or_empty,
    store_profiles,
)
from test_mcp_server import mcp_env

from cao_testkit.scripted_model.harness import ScriptedModelServer

PACKAGE, VERSION, BINARY = "@github/copilot", "1.0.102", "copilot"
PROVIDER, SCRIPT = "copilot_cli", "copilot"
START_S, TURN_S = 120, 60  # generous: two shared cores; the first start unpacks Copilot's package
WRITTEN = "written by copilot"
RULES = [
    {"match": "greet the tester", "reply": "Hello from the scripted model.\nSecond line, exact."},
    {
        "match": "count the files",
        "steps": [
            {"tool": "shell", "args": {"command": "echo tool-output-$((6*7))"}},
            {"text": "The shell said: done."},
        ],
    },
    {
        "match": "create the (?P<name>\\w+) marker",
        "steps": [{"tool": "shell", "args": {"command": "touch {name}.txt"}}, {"text": "Marker {name} created."}],
    },
    {"match": "think slowly", "steps": [{"delay_ms": 30000}, {"text": "too late"}]},
    {
        "match": "delegate the summary",
        "steps": [
            {
                "tool": "mcp:cao-mcp-server:handoff",
                "args": {"agent_profile": "mockworker", "message": "summarise the plan"},
            },
            {"text": "Handoff finished."},
        ],
    },
    {
        "match": r"Assigned by terminal (?P<sup>[a-f0-9]{8})",
        "steps": [
            {
                "tool": "mcp:cao-mcp-server:send_message",
                "args": {"receiver_id": "{sup}", "message": "report from copilot"},
            },
            {"text": "Reported back."},
        ],
    },
    {"match": "write the report", "reply": "report from copilot"},
]
DEV, ASKS, REV = "cpdev", "cpasks", "cprev"
PROFILES = {
    DEV: f"---\nname: {DEV}\nprovider: {PROVIDER}\n---\nYou are a careful developer.\n",
    # permissionMode: default keeps Copilot's own prompts inside the tool set.
    ASKS: f"---\nname: {ASKS}\nprovider: {PROVIDER}\npermissionMode: default\n---\nA developer who asks.\n",
    REV: f"---\nname: {REV}\nprovider: {PROVIDER}\nrole: reviewer\n---\nYou review; you never change files.\n",
    "mockworker": "---\nname: mockworker\nprovider: mock_cli\n---\nYou are a test worker.\n",
    "mockassigns": (
        "---\nname: mockassigns\nprovider: mock_cli\nmock:\n  rules:\n    - match: 'hand out'\n"
        "      steps:\n        - tool: assign\n"
        f"          args: {{agent_profile: {DEV}, message: 'the assigned task'}}\n"
        "          save: worker\n      reply: 'assigned {worker}'\n---\nYou supervise.\n"
    ),
    "mockhandsoff": (
        "---\nname: mockhandsoff\nprovider: mock_cli\nmock:\n  rules:\n    - match: 'hand over'\n"
        "      steps:\n        - tool: handoff\n"
        f"          args: {{agent_profile: {DEV}, message: 'write the report'}}\n"
        "          save: report\n      reply: 'worker said: {report}'\n---\nYou supervise.\n"
    ),
}


def model_env(model: ScriptedModelServer) -> dict[str, str]:
    """Copilot's own BYOK variables, as a user without a GitHub account sets them."""
    return {
        "COPILOT_PROVIDER_BASE_URL": model.base_url(SCRIPT, "/v1"),
        "COPILOT_PROVIDER_API_KEY": "scripted",
        "COPILOT_MODEL": "fake-model",
        "COPILOT_PROVIDER_MAX_PROMPT_TOKENS": "128000",
        "COPILOT_PROVIDER_MAX_OUTPUT_TOKENS": "8192",
        "COPILOT_OFFLINE": "true",
    }


@pytest.fixture(scope="module")
def binary() -> Path:
    return npm_binary(PACKAGE, VERSION, BINARY)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp(SCRIPT)
    (path / "work").mkdir()
    return path


@pytest.fixture(scope="module")
def model(root: Path) -> Iterator[ScriptedModelServer]:
    write = {  # Copilot's file tool takes an absolute path
        "match": r"write (?P<name>\w+)\.txt",
        "steps": [
            {"tool": "create", "args": {"path": f"{root / 'work'}/{{name}}.txt", "file_text": WRITTEN}},
            {"text": "Tried to write."},
        ],
    }
    with ScriptedModelServer() as server:
        server.set_script(SCRIPT, [*RULES, write])
        yield server


@pytest.fixture(scope="module")
def cao(root: Path, binary: Path, model: ScriptedModelServer) -> Iterator[CaoServer]:
    server = real_cli_server(root, [binary], model_env(model))
    store_profiles(server, PROFILES)
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


def workdir(cao: CaoServer) -> Path:
    return cao.home.parent / "work"


def start(cao: CaoServer, yolo: bool = True, profile: str = DEV) -> dict:
    resp = cao.client.post(
        "/sessions",
        params={"agent_profile": profile, "provider": PROVIDER, "yolo": yolo, "working_directory": str(workdir(cao))},
        timeout=START_S + 30,
    )
    assert resp.status_code == 201, resp.text
    term = resp.json()
    assert term["status"] == "idle", term
    return term


def last_reply(cao: CaoServer, terminal_id: str, expected: str | None = None) -> str:
    """The last reply. With `expected`: waited for (a few seconds at most). Copilot draws a streamed
    answer a few characters at a time for a while after its turn ended (agentStop), and cao's copy
    of the screen can hold the first characters only (seen under load); see docs/providers.md."""
    if expected is not None:
        wait_until(lambda: reply_or_empty(cao, terminal_id) == expected, timeout=5, interval=0.1, message=expected)
    resp = cao.client.get(f"/terminals/{terminal_id}/output", params={"mode": "last"})
    assert resp.status_code == 200, resp.text
    return resp.json()["output"]


def tool_results(model: ScriptedModelServer, prompt: str, marker: str) -> list[dict]:
    """cao's JSON answers to the tool calls of the turn `prompt` that mention `marker`."""
    results = [r["tool_result"] for r in model.requests(SCRIPT) if prompt in r["user_text"]]
    # Copilot passes the result's text, then its structured content: the first JSON object is cao's.
    return [json.JSONDecoder().raw_decode(r[r.index("{") :])[0] for r in results if marker in r]


# --- tests --------------------------------------------------------------------------------
def test_text_turn_completes_from_the_hook_with_the_exact_answer_then_delete_leaves_no_process(
    cao: CaoServer,
) -> None:
    term = start(cao)  # idle: Copilot has listed cao's tools, with the credential
    secret = mcp_env(cao, term["id"])["CAO_MCP_TOKEN"]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        assert secret.encode() not in argv, pid
    assert files_holding(cao.home.parent, secret) == {}  # cao home, Copilot's home, TMPDIR, workdir
    cao.send(term["id"], "please greet the tester")
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    # Copilot's own agentStop hook ended the turn, not the screen.
    assert cao.client.get(f"/terminals/{term['id']}").json()["status_source"] == "hook:agentStop"
    assert (
        last_reply(cao, term["id"], "Hello from the scripted model.\nSecond line, exact.")
        == "Hello from the scripted model.\nSecond line, exact."
    )
    delete_and_check_nothing_left(cao, term["id"])


def test_shell_tool_turn(cao: CaoServer, model: ScriptedModelServer) -> None:
    term = start(cao)
    cao.send(term["id"], "count the files")
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert last_reply(cao, term["id"], "The shell said: done.") == "The shell said: done."
    results = [r["tool_result"] for r in model.requests(SCRIPT) if "count the files" in r["user_text"]]
    assert any("tool-output-42" in r for r in results), results  # a real shell ran it
    delete_and_check_nothing_left(cao, term["id"])


def test_permission_prompt_is_waiting_and_answered_through_mcp(cao: CaoServer) -> None:
    term = start(cao, yolo=False, profile=ASKS)
    cao.send(term["id"], "create the first marker")
    cao.wait_status(term["id"], "waiting_user_answer", timeout=TURN_S)
    assert not (workdir(cao) / "first.txt").exists()

    async def answer() -> dict:
        async with mcp_session(mcp_env(cao, None)) as session:
            return await call(session, "answer_user_prompt", terminal_id=term["id"], answer="yes")

    assert anyio.run(answer)["success"] is True
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert last_reply(cao, term["id"], "Marker first created.") == "Marker first created."
    assert (workdir(cao) / "first.txt").exists()
    delete_and_check_nothing_left(cao, term["id"])


def test_a_declined_permission_ends_the_turn_without_running_the_tool(cao: CaoServer) -> None:
    term = start(cao, yolo=False, profile=ASKS)
    cao.send(term["id"], "create the second marker")
    cao.wait_status(term["id"], "waiting_user_answer", timeout=TURN_S)
    cao.send(term["id"], "no")  # the provider answers the menu with Esc
    # No hook says a cancelled turn ended: the screen ("Operation cancelled by user") does.
    cao.wait_status(term["id"], "idle", timeout=TURN_S)
    assert not (workdir(cao) / "second.txt").exists()
    delete_and_check_nothing_left(cao, term["id"])


def test_a_reviewer_asked_to_write_a_file_is_refused_by_copilot(cao: CaoServer, model: ScriptedModelServer) -> None:
    """Hard enforcement: Copilot is started with the reviewer's writes excluded, so the model is
    not even offered `create`; the developer's control call writes the file."""
    rev = start(cao, yolo=False, profile=REV)
    cao.send(rev["id"], "write review.txt")
    cao.wait_status(rev["id"], "completed", timeout=TURN_S)
    assert not (workdir(cao) / "review.txt").exists()
    answers = [r["reply"] for r in model.requests(SCRIPT) if not r["side"] and "write review.txt" in r["user_text"]]
    unavailable = [a["text"] for a in answers if a["source"].endswith("tool unavailable")]
    assert unavailable and "create" not in unavailable[-1].split("(tools: ", 1)[-1].split(", "), answers
    delete_and_check_nothing_left(cao, rev["id"])
    dev = start(cao, yolo=False)  # the developer's set runs without asking
    cao.send(dev["id"], "write developed.txt")
    cao.wait_status(dev["id"], "completed", timeout=TURN_S)
    assert (workdir(cao) / "developed.txt").read_text() == WRITTEN
    delete_and_check_nothing_left(cao, dev["id"])


def test_death_mid_turn_is_reported_as_error(cao: CaoServer) -> None:
    term = start(cao)
    cao.send(term["id"], "think slowly")
    cao.wait_status(term["id"], "processing", timeout=TURN_S)
    found = [p for p in agent_processes(term["id"]) if any(Path(a).name == BINARY for a in p.cmdline()[:2])]
    assert found, "the copilot process"
    found[0].send_signal(signal.SIGKILL)
    cao.wait_status(term["id"], "error", timeout=TURN_S)
    assert cao.client.delete(f"/terminals/{term['id']}").status_code == 200
    wait_until(lambda: not agent_processes(term["id"]), timeout=20, interval=0.2, message="no leftover process")


def test_supervisor_hands_off_to_a_mock_worker(cao: CaoServer, model: ScriptedModelServer) -> None:
    sup = start(cao)
    cao.send(sup["id"], "delegate the summary")
    cao.wait_status(sup["id"], "completed", timeout=TURN_S)
    assert last_reply(cao, sup["id"], "Handoff finished.") == "Handoff finished."
    handed = tool_results(model, "delegate the summary", "MOCK: summarise the plan")
    assert handed and handed[0]["success"] is True, handed
    assert handed[0]["message"].startswith("Successfully handed off to mockworker (mock_cli)")
    assert cao.client.get(f"/terminals/{handed[0]['terminal_id']}").status_code == 404  # worker removed
    delete_and_check_nothing_left(cao, sup["id"])


def test_an_assigned_worker_reports_back_with_send_message(cao: CaoServer) -> None:
    resp = cao.client.post("/sessions", params={"agent_profile": "mockassigns", "working_directory": str(workdir(cao))})
    assert resp.status_code == 201, resp.text
    sup = resp.json()
    cao.send(sup["id"], "hand out the work")
    cao.wait_status(sup["id"], "completed", timeout=START_S + TURN_S)
    worker = last_reply(cao, sup["id"]).removeprefix("assigned ").strip()
    assert cao.client.get(f"/terminals/{worker}").json()["provider"] == PROVIDER
    wait_until(
        lambda: "report from copilot" in reply_or_empty(cao, sup["id"]),
        timeout=START_S + TURN_S,
        interval=0.5,
        message="the worker's report reaching the supervisor",
    )
    messages = cao.client.get(f"/terminals/{sup['id']}/inbox/messages").json()
    assert [m["sender_id"] for m in messages] == [worker]
    delete_and_check_nothing_left(cao, worker)
    assert cao.client.delete(f"/terminals/{sup['id']}").status_code == 200


def test_a_handoff_worker_answers_its_mock_supervisor(cao: CaoServer) -> None:
    resp = cao.client.post(
        "/sessions", params={"agent_profile": "mockhandsoff", "working_directory": str(workdir(cao))}
    )
    assert resp.status_code == 201, resp.text
    sup = resp.json()
    cao.send(sup["id"], "hand over the report")
    cao.wait_status(sup["id"], "completed", timeout=START_S + TURN_S)
    expected = "worker said: report from copilot"
    assert last_reply(cao, sup["id"], expected) == expected
    assert [t["id"] for t in cao.client.get("/terminals").json()] == [sup["id"]]  # the worker is gone


def files_holding(root: Path, secret: str) -> dict[Path, int]:
    """Regular files under `root` (symlinks not followed) that contain `secret`, with their modes."""
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            try:
                info = path.lstat()
                held = stat.S_ISREG(info.st_mode) and info.st_size < 4_000_000 and secret.encode() in path.read_bytes()
            except OSError:  # gone meanwhile (a CLI's temporary file)
                continue
            if held:
                found[path] = stat.S_IMODE(info.st_mode)
    return found


def test_user_configuration_is_used_and_never_written(cao: CaoServer, model: ScriptedModelServer) -> None:
    config = Path(cao.env["HOME"]) / ".copilot"
    marker = config.parent / "user-hook-ran"
    user_files = {
        "settings.json": '{\n  // mine\n  "showTipsOnStartup": false\n}\n',
        "copilot-instructions.md": "User note: the user's own instructions.\n",
        "mcp-config.json": '{"mcpServers": {}}\n',
        "hooks/mine.json": json.dumps(
            {"version": 1, "hooks": {"userPromptSubmitted": [{"type": "command", "bash": f"touch {marker}"}]}}
        ),
    }
    for name, text in user_files.items():
        (config / name).parent.mkdir(parents=True, exist_ok=True)
        (config / name).write_text(text)
    before = {name: (config / name).stat().st_mtime_ns for name in user_files}
    model.clear_requests(SCRIPT)
    term = start(cao)
    cao.send(term["id"], "please greet the tester")
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert marker.exists(), "the user's own userPromptSubmitted hook ran too"
    sent = json.dumps([r["body"]["messages"] for r in model.requests(SCRIPT) if not r["side"]])
    assert "You are a careful developer." in sent and "User note: the user" in sent  # profile + user's
    delete_and_check_nothing_left(cao, term["id"])
    for name, text in user_files.items():
        assert (config / name).read_text() == text and (config / name).stat().st_mtime_ns == before[name], name
        (config / name).unlink()


def test_crash_at_start_fails_the_create_and_leaves_nothing(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / BINARY).write_text("#!/bin/sh\necho 'fatal: cannot start' >&2\nexit 3\n")
    (fake / BINARY).chmod(0o755)
    server = real_cli_server(tmp_path, [fake / BINARY])
    server.start()
    try:
        resp = server.client.post(
            "/sessions", params={"agent_profile": "developer", "provider": PROVIDER}, timeout=START_S + 30
        )
        assert resp.status_code == 502, resp.text  # a worker error that names the cause
        detail = resp.json()["detail"]
        assert detail["message"].startswith(f"{PROVIDER} agent failed to start: "), detail
        assert (
            "the agent process exited (code 3)" in detail["message"]
            or "the agent process exited (tmux did not learn its exit code)" in detail["message"]
        ), detail
        assert server.client.get("/terminals").json() == []
    finally:
        server.cleanup()
