"""Grok CLI end to end: the pinned real `grok` (npm @vibe-kit/grok-cli 0.0.34) in cao's tmux,
confined to a temporary home, talking to the scripted model (OpenAI Chat Completions at
GROK_BASE_URL), driven through cao-server's HTTP API and the official MCP client SDK.

Grok has no hooks, events or title: every status here comes from its screen. It reaches cao's
tools through the stdio relay `cao-mcp-server`, configured by cao's start-up shim in a
per-terminal copy of Grok's settings. One cao-server and one scripted model serve the module;
each test starts its own agents and uses its own trigger words.
"""

from __future__ import annotations

import json
import os
import signal
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
    npm_binary,
    real_cli_prerequisites,  # noqa: F401
    real_cli_server,
    reply_or_empty,
)
from test_mcp_server import mcp_env

from cao_testkit.scripted_model.harness import ScriptedModelServer

START_S, TURN_S = 90, 60  # generous: two shared cores, other developers' tests alongside
SCRIPT = "grok"
DEV, ASKS, REVIEWER = "grokdev", "grokasks", "grokreviewer"
RULES = [
    {"match": "greet the tester", "reply": "Hello from the scripted model.\nSecond line, exact."},
    {
        "match": "count the files",
        "steps": [{"tool": "shell", "args": {"command": "echo tool-output-77"}}, {"text": "The shell said: done."}],
    },
    {
        "match": "create the marker",
        "steps": [{"tool": "shell", "args": {"command": "touch marker.txt"}}, {"text": "Marker created."}],
    },
    {
        "match": "create the second marker",
        "steps": [{"tool": "shell", "args": {"command": "touch second.txt"}}, {"text": "Second marker step over."}],
    },
    {
        "match": "write the review file",
        "steps": [
            {"tool": "create_file", "args": {"path": "review.txt", "content": "written by the agent\n"}},
            {"text": "Review step over."},
        ],
    },
    {"match": "think slowly", "steps": [{"delay_ms": 20000}, {"text": "too late"}]},
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
    {"match": "write the report", "reply": "report from grok"},
    {"match": "first of two lines", "reply": "Two lines read."},
    {
        "match": "assign (before|after) the restart",
        "steps": [
            {
                "tool": "mcp:cao-mcp-server:assign",
                "args": {"agent_profile": "mockworker", "message": "work {g1} the restart"},
            },
            {"text": "Assigned {g1} the restart."},
        ],
    },
    {
        "match": r"Assigned by terminal (?P<sup>[a-f0-9]{8})",
        "steps": [
            {
                "tool": "mcp:cao-mcp-server:send_message",
                "args": {"receiver_id": "{sup}", "message": "assigned report from grok"},
            },
            {"text": "Reported back."},
        ],
    },
]
MOCK_HANDOFF_SUP = (
    "---\nname: mockhandoff\nprovider: mock_cli\nmock:\n  rules:\n    - match: 'hand over'\n"
    "      steps:\n        - tool: handoff\n"
    f"          args: {{agent_profile: {DEV}, message: 'write the report'}}\n"
    "          save: report\n      reply: 'worker said: {report}'\n---\nYou supervise.\n"
)
MOCK_ASSIGN_SUP = (
    "---\nname: mockassign\nprovider: mock_cli\nmock:\n  rules:\n    - match: 'hand out'\n"
    "      steps:\n        - tool: assign\n"
    f"          args: {{agent_profile: {DEV}, message: 'the assigned task'}}\n"
    "          save: worker\n      reply: 'assigned {worker}'\n---\nYou supervise.\n"
)


@pytest.fixture(scope="module")
def binary() -> Path:
    return npm_binary("@vibe-kit/grok-cli", "0.0.34", "grok")


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        server.set_script(SCRIPT, RULES)
        yield server


def grok_env(model: ScriptedModelServer) -> dict[str, str]:
    return {"GROK_BASE_URL": model.base_url(SCRIPT, "/v1"), "GROK_API_KEY": "scripted", "GROK_MODEL": "fake-model"}


@pytest.fixture(scope="module")
def cao(binary: Path, model: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CaoServer]:
    root = tmp_path_factory.mktemp("grok")
    server = real_cli_server(root, [binary], grok_env(model))
    store = server.home / "agent-store"
    store.mkdir(parents=True, exist_ok=True)
    profiles = {
        DEV: f"---\nname: {DEV}\nprovider: grok_cli\n---\nYou are a careful developer.\n",
        ASKS: f"---\nname: {ASKS}\nprovider: grok_cli\npermissionMode: default\n---\nA developer who asks.\n",
        REVIEWER: f"---\nname: {REVIEWER}\nprovider: grok_cli\nrole: reviewer\n---\nYou review.\n",
        "mockworker": "---\nname: mockworker\nprovider: mock_cli\n---\nYou are a test worker.\n",
        "mockhandoff": MOCK_HANDOFF_SUP,
        "mockassign": MOCK_ASSIGN_SUP,
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


def workdir(cao: CaoServer) -> Path:
    return cao.home.parent / "work"


def start(cao: CaoServer, yolo: bool = True, profile: str = DEV) -> dict:
    resp = cao.client.post(
        "/sessions",
        params={"agent_profile": profile, "provider": "grok_cli", "yolo": yolo, "working_directory": str(workdir(cao))},
        timeout=START_S + 30,
    )
    assert resp.status_code == 201, resp.text
    term = resp.json()
    assert term["status"] == "idle", term
    return term


def tool_results(model: ScriptedModelServer, prompt: str, marker: str) -> list[dict]:
    results = [r["tool_result"] for r in model.requests(SCRIPT) if prompt in r["user_text"]]
    return [json.loads(r[r.index("{") : r.rindex("}") + 1]) for r in results if marker in r]


# --- tests --------------------------------------------------------------------------------
def test_text_turn_completes_with_the_exact_answer_then_delete_leaves_no_process(
    cao: CaoServer, model: ScriptedModelServer
) -> None:
    term = start(cao)
    cao.send(term["id"], "please greet the tester")
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert last_reply(cao, term["id"]) == "Hello from the scripted model.\nSecond line, exact."
    systems = [m["content"] for r in model.requests(SCRIPT) for m in r["body"]["messages"] if m["role"] == "system"]
    assert any("You are a careful developer." in s for s in systems)  # the profile's prompt, appended
    relay = [p for p in agent_processes(term["id"]) if "cao-mcp-server" in " ".join(p.cmdline())]
    assert relay, "grok started cao's relay"
    delete_and_check_nothing_left(cao, term["id"])


def test_a_multi_line_message_reaches_the_model_with_its_newlines(cao: CaoServer, model: ScriptedModelServer) -> None:
    term = start(cao)
    cao.send(term["id"], "the first of two lines\nand the second")
    wait_until(
        lambda: reply_or_empty(cao, term["id"]) == "Two lines read.", timeout=TURN_S, interval=0.2, message="the reply"
    )
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    asked = [r["user_text"] for r in model.requests(SCRIPT) if "first of two lines" in r["user_text"]]
    assert asked and asked[-1].endswith("the first of two lines\nand the second"), asked
    delete_and_check_nothing_left(cao, term["id"])


def test_shell_tool_turn_runs_without_asking_in_yolo(cao: CaoServer, model: ScriptedModelServer) -> None:
    term = start(cao)
    cao.send(term["id"], "count the files")
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert last_reply(cao, term["id"]) == "The shell said: done."
    results = [r["tool_result"] for r in model.requests(SCRIPT) if "count the files" in r["user_text"]]
    assert any("tool-output-77" in r for r in results), results
    delete_and_check_nothing_left(cao, term["id"])


def test_permission_prompt_is_waiting_and_answered_through_mcp(cao: CaoServer) -> None:
    term = start(cao, yolo=False, profile=ASKS)
    cao.send(term["id"], "create the marker")
    cao.wait_status(term["id"], "waiting_user_answer", timeout=TURN_S)
    assert "touch marker.txt" in cao.client.get(f"/terminals/{term['id']}").json()["status_reason"]
    assert not (workdir(cao) / "marker.txt").exists()

    async def answer() -> dict:
        async with mcp_session(mcp_env(cao, None)) as session:
            return await call(session, "answer_user_prompt", terminal_id=term["id"], answer="yes")

    assert anyio.run(answer)["success"] is True
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert last_reply(cao, term["id"]) == "Marker created."
    assert (workdir(cao) / "marker.txt").exists()
    delete_and_check_nothing_left(cao, term["id"])


def test_a_declined_permission_runs_nothing(cao: CaoServer, model: ScriptedModelServer) -> None:
    term = start(cao, yolo=False, profile=ASKS)
    cao.send(term["id"], "create the second marker")
    cao.wait_status(term["id"], "waiting_user_answer", timeout=TURN_S)
    cao.send(term["id"], "no")  # the provider answers the menu with Esc
    # Grok hands the refusal to the model as the tool's result, and the turn goes on to its end.
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert last_reply(cao, term["id"]) == "Second marker step over."
    assert not (workdir(cao) / "second.txt").exists()
    results = [r["tool_result"] for r in model.requests(SCRIPT) if "create the second marker" in r["user_text"]]
    assert any("cancelled by user" in r for r in results), results
    delete_and_check_nothing_left(cao, term["id"])


def test_a_reviewer_cannot_write_and_a_developer_can(cao: CaoServer, model: ScriptedModelServer) -> None:
    """Hard enforcement: Grok offers the reviewer no write or shell tool (the scripted model then
    says the tool is unavailable); the same call from a developer writes the file."""
    target = workdir(cao) / "review.txt"
    term = start(cao, yolo=False, profile=REVIEWER)
    cao.send(term["id"], "write the review file now")
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    asked = [r for r in model.requests(SCRIPT) if "write the review file now" in r["user_text"]]
    offered = {t["function"]["name"] for r in asked for t in r["body"].get("tools", [])}
    assert "view_file" in offered and not offered & {"create_file", "str_replace_editor", "bash"}, offered
    assert "tool unavailable" in asked[0]["reply"]["source"], asked[0]["reply"]
    assert not target.exists()
    delete_and_check_nothing_left(cao, term["id"])

    dev = start(cao, yolo=False, profile=DEV)  # the developer role's set runs without asking
    cao.send(dev["id"], "write the review file again")
    cao.wait_status(dev["id"], "completed", timeout=TURN_S)
    assert target.read_text() == "written by the agent\n"
    target.unlink()
    delete_and_check_nothing_left(cao, dev["id"])


def test_death_mid_turn_is_reported_as_error(cao: CaoServer) -> None:
    term = start(cao)
    cao.send(term["id"], "think slowly")
    try:
        cao.wait_status(term["id"], "processing", timeout=TURN_S)
    except AssertionError as exc:  # say what the screen showed instead
        screen = cao.client.get(f"/terminals/{term['id']}/output").json()["output"].rstrip()[-1500:]
        raise AssertionError(f"{exc}\nstatus {cao.status(term['id'])}, screen:\n{screen}") from None
    found = [p for p in agent_processes(term["id"]) if p.name() == "node" or "grok" in " ".join(p.cmdline())]
    grok = [p for p in found if any(Path(a).name == "grok" for a in p.cmdline()[1:2])]
    assert grok, found
    grok[0].send_signal(signal.SIGKILL)
    cao.wait_status(term["id"], "error", timeout=TURN_S)
    assert cao.client.delete(f"/terminals/{term['id']}").status_code == 200
    wait_until(lambda: not agent_processes(term["id"]), timeout=20, interval=0.2, message="no leftover process")


def test_supervisor_hands_off_to_a_mock_worker(cao: CaoServer, model: ScriptedModelServer) -> None:
    sup = start(cao)
    cao.send(sup["id"], "delegate the summary")
    cao.wait_status(sup["id"], "completed", timeout=TURN_S)
    assert last_reply(cao, sup["id"]) == "Handoff finished."
    handed = tool_results(model, "delegate the summary", "MOCK: summarise the plan")
    assert handed and handed[0]["success"] is True, handed
    assert handed[0]["message"].startswith("Successfully handed off to mockworker (mock_cli)")
    assert cao.client.get(f"/terminals/{handed[0]['terminal_id']}").status_code == 404  # worker removed
    delete_and_check_nothing_left(cao, sup["id"])


def test_a_handoff_worker_answers_a_mock_supervisor(cao: CaoServer) -> None:
    resp = cao.client.post("/sessions", params={"agent_profile": "mockhandoff", "working_directory": str(workdir(cao))})
    assert resp.status_code == 201, resp.text
    sup = resp.json()
    cao.send(sup["id"], "hand over the report")
    cao.wait_status(sup["id"], "completed", timeout=START_S + TURN_S)
    assert last_reply(cao, sup["id"]) == "worker said: report from grok"
    assert [t["id"] for t in cao.client.get("/terminals").json()] == [sup["id"]]  # the worker is gone


def test_an_assigned_worker_reports_back_with_send_message(cao: CaoServer) -> None:
    resp = cao.client.post("/sessions", params={"agent_profile": "mockassign", "working_directory": str(workdir(cao))})
    assert resp.status_code == 201, resp.text
    sup = resp.json()
    cao.send(sup["id"], "hand out the work")
    cao.wait_status(sup["id"], "completed", timeout=TURN_S)
    worker = last_reply(cao, sup["id"]).removeprefix("assigned ").strip()
    assert cao.client.get(f"/terminals/{worker}").json()["provider"] == "grok_cli"
    wait_until(
        lambda: "assigned report from grok" in reply_or_empty(cao, sup["id"]),
        timeout=START_S + TURN_S,
        interval=0.5,
        message="the worker's report reaching the supervisor",
    )
    messages = cao.client.get(f"/terminals/{sup['id']}/inbox/messages").json()
    assert [m["sender_id"] for m in messages] == [worker]
    delete_and_check_nothing_left(cao, worker)
    assert cao.client.delete(f"/terminals/{sup['id']}").status_code == 200


def test_exit_command_ends_grok_and_its_relay(cao: CaoServer) -> None:
    term = start(cao)
    assert cao.client.post(f"/terminals/{term['id']}/exit").status_code == 200
    cao.wait_status(term["id"], "error", timeout=TURN_S)  # the pane's process is gone
    assert "exited" in cao.client.get(f"/terminals/{term['id']}").json()["status_reason"]
    wait_until(lambda: not agent_processes(term["id"]), timeout=20, interval=0.2, message="no leftover process")
    assert cao.client.delete(f"/terminals/{term['id']}").status_code == 200


def files_holding(root: Path, secret: str) -> list[Path]:
    found = []
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            try:
                if path.is_file() and not path.is_symlink() and secret.encode() in path.read_bytes():
                    found.append(path)
            except OSError:  # gone meanwhile
                continue
    return found


def test_the_credential_is_in_no_argv_and_no_file(cao: CaoServer) -> None:
    term = start(cao)  # idle: its relay has listed cao's tools, with the credential from the environment
    secret = mcp_env(cao, term["id"])["CAO_MCP_TOKEN"]
    procs = agent_processes(term["id"])
    assert any("cao-mcp-server" in " ".join(p.cmdline()) for p in procs), procs
    assert all(secret not in " ".join(p.cmdline()) for p in procs)
    assert files_holding(cao.home.parent, secret) == []  # not even in cao's per-terminal files
    delete_and_check_nothing_left(cao, term["id"])


def test_after_a_kill_9_of_cao_server_the_agents_next_tool_call_works_once(
    cao: CaoServer, model: ScriptedModelServer
) -> None:
    """The relay reconnects to the restarted cao-server; each call is done once."""
    term = start(cao)

    def assign(when: str) -> str:
        expected = f"Assigned {when} the restart."
        cao.send(term["id"], f"assign {when} the restart")
        wait_until(
            lambda: reply_or_empty(cao, term["id"]) == expected,
            timeout=TURN_S,
            interval=0.2,
            message=f"the reply to the call {when} the restart",
        )
        cao.wait_status(term["id"], "completed", timeout=TURN_S)
        answers = tool_results(model, f"assign {when} the restart", '"success"')
        assert len(answers) == 1 and answers[0]["success"] is True, answers
        return answers[0]["terminal_id"]

    before = assign("before")
    cao.kill9()
    cao.start()
    cao.wait_status(term["id"], {"idle", "completed"}, timeout=TURN_S)  # adopted again, not an error
    after = assign("after")
    workers = [t["id"] for t in cao.client.get("/terminals").json() if t["agent_profile"] == "mockworker"]
    assert sorted(workers) == sorted([before, after])
    delete_and_check_nothing_left(cao, term["id"])


def test_user_configuration_is_used_and_never_written(cao: CaoServer, model: ScriptedModelServer) -> None:
    """Grok itself would create the working directory's .grok/settings.json and migrate the user's
    settings (this one is version 1); cao's copies take both writes, and the user's files stay."""
    home = Path(cao.env["HOME"]) / ".grok"
    home.mkdir(parents=True, exist_ok=True)
    user_files = {
        home / "user-settings.json": json.dumps({"apiKey": "user-key", "models": ["mine"], "settingsVersion": 1}),
        home / "GROK.md": "User note: the user's own instructions.\n",
    }
    for path, text in user_files.items():
        path.write_text(text)
    before = {path: path.stat().st_mtime_ns for path in user_files}
    model.clear_requests(SCRIPT)
    term = start(cao)
    cao.send(term["id"], "please greet the tester")
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    systems = [m["content"] for r in model.requests(SCRIPT) for m in r["body"]["messages"] if m["role"] == "system"]
    assert any("User note: the user's own instructions." in s and "You are a careful developer." in s for s in systems)
    copy = json.loads((cao.home / "tmp" / term["id"] / "grok-user-settings.json").read_text())
    assert copy["settingsVersion"] == 2 and "mine" in copy["models"]  # Grok migrated cao's copy
    delete_and_check_nothing_left(cao, term["id"])
    for path, text in user_files.items():
        assert path.read_text() == text and path.stat().st_mtime_ns == before[path]
        path.unlink()
    assert not (workdir(cao) / ".grok").exists()


def test_crash_at_start_fails_the_create_and_leaves_nothing(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "grok").write_text("#!/bin/sh\necho 'fatal: cannot start' >&2\nexit 3\n")
    (fake / "grok").chmod(0o755)
    server = real_cli_server(tmp_path, [fake / "grok"], {"GROK_API_KEY": "scripted"})
    server.start()
    try:
        resp = server.client.post(
            "/sessions", params={"agent_profile": "developer", "provider": "grok_cli"}, timeout=START_S + 30
        )
        assert resp.status_code == 502, resp.text
        detail = resp.json()["detail"]
        assert detail["message"].startswith("grok_cli agent failed to start: "), detail
        assert (
            "the agent process exited (code 3)" in detail["message"]
            or "the agent process exited (tmux did not learn its exit code)" in detail["message"]
        ), detail
        assert server.client.get("/terminals").json() == []
    finally:
        server.cleanup()


def test_no_api_key_is_refused_before_anything_starts(tmp_path: Path, binary: Path) -> None:
    server = real_cli_server(tmp_path, [binary])
    server.start()
    try:
        resp = server.client.post("/sessions", params={"agent_profile": "developer", "provider": "grok_cli"})
        assert resp.status_code == 400, resp.text
        assert "GROK_API_KEY" in resp.json()["detail"]
        assert server.client.get("/terminals").json() == []
    finally:
        server.cleanup()
