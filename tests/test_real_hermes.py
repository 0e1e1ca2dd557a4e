"""Hermes Agent (PyPI `hermes-agent[mcp]` 0.19.0) end to end: the real `hermes` in cao's tmux, confined
to a temporary home, talking to the scripted model (OpenAI Chat Completions), driven through
cao-server's HTTP API and cao-mcp-server (official MCP client SDK).

The temporary home stands in for a user's setup: `~/.hermes/config.yaml` points Hermes at the
model, as `hermes model` leaves it. cao gives each terminal a shadow Hermes home (HERMES_HOME) with
a merged copy of that file, and the user's file must come out unchanged. Hermes reaches cao's tools on
cao-server's own MCP endpoint (/mcp, streamable HTTP). The `mcp` extra is what gives Hermes an
MCP client at all. One cao-server and one scripted model serve the module; every test starts its
own agents and uses its own trigger words.
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
    last_reply,
    pip_binary,
    real_cli_prerequisites,  # noqa: F401
    real_cli_server,
    reply_or_empty,
)
from test_mcp_server import mcp_env

from cao_testkit.scripted_model.harness import ScriptedModelServer

PACKAGE, VERSION, BINARY = "hermes-agent[mcp]", "0.19.0", "hermes"
SCRIPT = "hermes"
START_S, TURN_S = 90, 60  # generous: two shared cores, other developers' tests alongside
DEV, ASKS = "hermesdev", "hermesasks"
RULES = [
    {"match": "greet the tester", "reply": "Hello from the scripted model.\nSecond line, exact."},
    {
        "match": "count the files",
        "steps": [
            {"tool": "shell", "args": {"command": "echo tool-output-$((6*7))"}},
            {"text": "The shell said: done."},
        ],
    },
    # `chmod 666` is one of Hermes' dangerous patterns: it asks before running it.
    {
        "match": "create the (?P<name>first|second) marker",
        "steps": [
            {"tool": "shell", "args": {"command": "touch {name}.txt && chmod 666 {name}.txt"}},
            {"text": "Marker step over."},
        ],
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
    {"match": "write the report", "reply": "report from hermes"},
    {
        "match": r"Assigned by terminal (?P<sup>[a-f0-9]{8})",
        "steps": [
            {
                "tool": "mcp:cao-mcp-server:send_message",
                "args": {"receiver_id": "{sup}", "message": "report from hermes"},
            },
            {"text": "Reported back."},
        ],
    },
]


def _mock(name: str, match: str, tool: str, args: str, reply: str) -> str:
    return (
        f"---\nname: {name}\nprovider: mock_cli\nmock:\n  rules:\n    - match: '{match}'\n"
        f"      steps:\n        - tool: {tool}\n          args: {args}\n          save: out\n"
        f"      reply: '{reply}'\n---\nYou supervise.\n"
    )


def user_config(model: ScriptedModelServer) -> str:
    """The user's own ~/.hermes/config.yaml: the model, and no network at start (tirith's download,
    the model catalog, lazy pip installs are the user's choices, made here for a machine offline)."""
    return (
        "# mine\nmodel:\n  provider: custom\n"
        f"  base_url: {model.base_url(SCRIPT, '/v1')}\n  default: fake-model\n  api_key: scripted\n"
        "  context_length: 128000\n"
        "security:\n  tirith_enabled: false\n  allow_lazy_installs: false\n"
        "approvals:\n  mode: manual\nmodel_catalog:\n  enabled: false\n"
    )


@pytest.fixture(scope="module")
def binary() -> Path:
    return pip_binary(PACKAGE, VERSION, BINARY)


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        server.set_script(SCRIPT, RULES)
        yield server


@pytest.fixture(scope="module")
def cao(binary: Path, model: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CaoServer]:
    root = tmp_path_factory.mktemp("hermes")
    server = real_cli_server(root, [binary])
    config = Path(server.env["HOME"]) / ".hermes"
    config.mkdir(parents=True)
    (config / "config.yaml").write_text(user_config(model))
    store = server.home / "agent-store"
    store.mkdir(parents=True, exist_ok=True)
    profiles = {
        DEV: f"---\nname: {DEV}\nprovider: hermes\n---\nYou are a careful developer.\n",
        ASKS: f"---\nname: {ASKS}\nprovider: hermes\npermissionMode: default\n---\nA developer who asks.\n",
        "mockworker": "---\nname: mockworker\nprovider: mock_cli\n---\nYou are a test worker.\n",
        "mockhandoff": _mock(
            "mockhandoff",
            "hand over",
            "handoff",
            f"{{agent_profile: {DEV}, message: 'write the report'}}",
            "worker said: {out}",
        ),
        "mockassign": _mock(
            "mockassign",
            "hand out",
            "assign",
            f"{{agent_profile: {DEV}, message: 'the assigned task'}}",
            "assigned {out}",
        ),
    }
    for name, text in profiles.items():
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


def start(cao: CaoServer, yolo: bool = True, profile: str = DEV) -> dict:
    resp = cao.client.post(
        "/sessions",
        params={"agent_profile": profile, "provider": "hermes", "yolo": yolo, "working_directory": workdir(cao)},
        timeout=START_S + 30,
    )
    assert resp.status_code == 201, resp.text
    term = resp.json()
    assert term["status"] == "idle", term
    return term


def _answer(text: str) -> dict:
    """cao's JSON in a tool result: Hermes hands an MCP tool's answer to the model as
    `{"result": <the answer, text or structured>}`, possibly with text around it."""
    value = json.loads(text[text.index("{") : text.rindex("}") + 1])
    inner = value.get("result", value) if isinstance(value, dict) else value
    return _answer(inner) if isinstance(inner, str) else inner


def tool_results(model: ScriptedModelServer, prompt: str, marker: str) -> list[dict]:
    """cao's JSON answers to the tool calls of the turn `prompt` that mention `marker`."""
    found = [r["tool_result"] for r in model.requests(SCRIPT) if prompt in r["user_text"]]
    return [_answer(r) for r in found if marker in r]


# --- tests --------------------------------------------------------------------------------
# Hermes takes ~10 s to start and ~5 s to build its agent at the first message on this machine:
# scenarios that need no fresh agent share one.
def test_text_shell_and_handoff_turns_with_the_credential_in_no_argv_or_file(
    cao: CaoServer, model: ScriptedModelServer
) -> None:
    config = Path(cao.env["HOME"]) / ".hermes" / "config.yaml"
    before = (config.read_bytes(), config.stat().st_mtime_ns)
    term = start(cao)  # idle: Hermes has listed cao's tools, with the credential
    cao.send(term["id"], "please greet the tester")
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert last_reply(cao, term["id"]) == "Hello from the scripted model.\nSecond line, exact."
    sent = json.dumps([r["body"]["messages"] for r in model.requests(SCRIPT) if "greet the tester" in r["user_text"]])
    assert "You are a careful developer." in sent  # the profile's prompt reached the model

    cao.send(term["id"], "count the files")
    wait_until(lambda: reply_or_empty(cao, term["id"]) == "The shell said: done.", timeout=TURN_S, interval=0.3)
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    results = [r["tool_result"] for r in model.requests(SCRIPT) if "count the files" in r["user_text"]]
    assert any("tool-output-42" in r for r in results), results  # a real shell ran it

    # As a supervisor: cao's handoff through cao-server's MCP endpoint, to a mock worker.
    cao.send(term["id"], "delegate the summary")
    wait_until(lambda: reply_or_empty(cao, term["id"]) == "Handoff finished.", timeout=TURN_S, interval=0.3)
    handed = tool_results(model, "delegate the summary", "MOCK: summarise the plan")
    assert handed and handed[0]["success"] is True, handed
    assert handed[0]["message"].startswith("Successfully handed off to mockworker (mock_cli)")
    assert cao.client.get(f"/terminals/{handed[0]['terminal_id']}").status_code == 404  # worker removed

    secret = mcp_env(cao, term["id"])["CAO_MCP_TOKEN"]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        assert secret.encode() not in argv, pid
    own = cao.home / "tmp" / term["id"]
    holding = files_holding(cao.home.parent, secret)  # the shell tool's environment snapshot, in its TMPDIR
    assert all(mode == 0o600 and own in path.parents for path, mode in holding.items()), holding
    ours = own / "hermes-home" / "config.yaml"  # names ${CAO_MCP_TOKEN}, never the credential
    assert "${CAO_MCP_TOKEN}" in ours.read_text() and stat.S_IMODE(ours.stat().st_mode) == 0o600
    assert "fake-model" in ours.read_text()  # the user's settings, merged in
    delete_and_check_nothing_left(cao, term["id"])
    assert not ours.exists() and files_holding(cao.home.parent, secret) == {}
    assert (config.read_bytes(), config.stat().st_mtime_ns) == before  # the user's file, untouched


def test_permission_prompts_are_waiting_then_allowed_through_mcp_or_declined(
    cao: CaoServer, model: ScriptedModelServer
) -> None:
    term = start(cao, yolo=False, profile=ASKS)
    cao.send(term["id"], "create the first marker")
    cao.wait_status(term["id"], "waiting_user_answer", timeout=TURN_S)
    assert "touch first.txt" in cao.client.get(f"/terminals/{term['id']}").json()["status_reason"]
    assert not (Path(workdir(cao)) / "first.txt").exists()

    async def answer() -> dict:
        async with mcp_session(mcp_env(cao, None)) as session:
            return await call(session, "answer_user_prompt", terminal_id=term["id"], answer="yes")

    assert anyio.run(answer)["success"] is True
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert last_reply(cao, term["id"]) == "Marker step over."
    assert (Path(workdir(cao)) / "first.txt").exists()

    cao.send(term["id"], "create the second marker")
    cao.wait_status(term["id"], "waiting_user_answer", timeout=TURN_S)
    cao.send(term["id"], "no")  # the provider answers the menu with its "4. Deny"
    cao.wait_status(term["id"], "completed", timeout=TURN_S)  # the model is told, and ends its turn
    assert not (Path(workdir(cao)) / "second.txt").exists()
    results = [r["tool_result"] for r in model.requests(SCRIPT) if "create the second marker" in r["user_text"]]
    assert any("denied" in r.lower() for r in results), results
    delete_and_check_nothing_left(cao, term["id"])


def test_death_mid_turn_is_reported_as_error(cao: CaoServer) -> None:
    term = start(cao)
    cao.send(term["id"], "think slowly")
    cao.wait_status(term["id"], "processing", timeout=TURN_S)
    found = [p for p in agent_processes(term["id"]) if BINARY in " ".join(p.cmdline()[:2])]
    assert found, "the hermes process"
    found[0].send_signal(signal.SIGKILL)
    cao.wait_status(term["id"], "error", timeout=TURN_S)
    assert cao.client.delete(f"/terminals/{term['id']}").status_code == 200
    wait_until(lambda: not agent_processes(term["id"]), timeout=20, interval=0.2, message="no leftover process")


def test_a_handoff_worker_answers_a_mock_supervisor(cao: CaoServer) -> None:
    resp = cao.client.post("/sessions", params={"agent_profile": "mockhandoff", "working_directory": workdir(cao)})
    assert resp.status_code == 201, resp.text
    sup = resp.json()
    cao.send(sup["id"], "hand over the report")
    cao.wait_status(sup["id"], "completed", timeout=START_S + TURN_S)
    assert last_reply(cao, sup["id"]) == "worker said: report from hermes"
    assert [t["id"] for t in cao.client.get("/terminals").json()] == [sup["id"]]  # the worker is gone


def test_an_assigned_worker_reports_back_with_send_message(cao: CaoServer) -> None:
    resp = cao.client.post("/sessions", params={"agent_profile": "mockassign", "working_directory": workdir(cao)})
    assert resp.status_code == 201, resp.text
    sup = resp.json()
    cao.send(sup["id"], "hand out the work")
    cao.wait_status(sup["id"], "completed", timeout=START_S + TURN_S)
    worker = last_reply(cao, sup["id"]).removeprefix("assigned ").strip()
    assert cao.client.get(f"/terminals/{worker}").json()["provider"] == "hermes"
    wait_until(
        lambda: [m["sender_id"] for m in cao.client.get(f"/terminals/{sup['id']}/inbox/messages").json()] == [worker],
        timeout=START_S + TURN_S,
        interval=0.5,
        message="the worker's send_message reaching the supervisor",
    )
    delete_and_check_nothing_left(cao, worker)


def files_holding(root: Path, secret: str) -> dict[Path, int]:
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            try:
                info = path.lstat()
                held = stat.S_ISREG(info.st_mode) and info.st_size < 4_000_000 and secret.encode() in path.read_bytes()
            except OSError:
                continue
            if held:
                found[path] = stat.S_IMODE(info.st_mode)
    return found


def test_crash_at_start_fails_the_create_and_leaves_nothing(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / BINARY).write_text("#!/bin/sh\necho 'fatal: cannot start' >&2\nexit 3\n")
    (fake / BINARY).chmod(0o755)
    server = real_cli_server(tmp_path, [fake / BINARY])
    server.start()
    try:
        resp = server.client.post(
            "/sessions", params={"agent_profile": "developer", "provider": "hermes"}, timeout=START_S + 30
        )
        assert resp.status_code == 502, resp.text
        detail = resp.json()["detail"]
        assert detail["message"].startswith("hermes agent failed to start: "), detail
        assert (
            "the agent process exited (code 3)" in detail["message"]
            or "the agent process exited (tmux did not learn its exit code)" in detail["message"]
        ), detail
        assert server.client.get("/terminals").json() == []
    finally:
        server.cleanup()
