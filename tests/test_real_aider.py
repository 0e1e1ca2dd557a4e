"""Aider end to end: the pinned real `aider` (PyPI aider-chat) in cao's tmux, confined to a
temporary home, talking to the scripted model's OpenAI Chat Completions endpoint, driven through
cao-server's HTTP API and cao-mcp-server (official MCP client SDK).

The temporary home stands in for a user's setup: `~/.aider.conf.yml` names the model and the edit
format, `~/.aider.model.metadata.json` describes the model, the working directory has its own
`.aider.conf.yml` and `.env`; all must come out byte for byte unchanged. Aider has no MCP: it is a
worker only, and its model's powers (edits, shell commands) are text in its reply, which aider
applies or asks about. One cao-server and one scripted model serve the module; each test starts
its own agents.
"""

from __future__ import annotations

import json
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
    pip_binary,
    real_cli_prerequisites,  # noqa: F401
    real_cli_server,
    store_profiles,
)
from test_mcp_server import mcp_env

from cao_testkit.scripted_model.harness import ScriptedModelServer

PACKAGE, VERSION, BINARY = "aider-chat", "0.86.2", "aider"
SCRIPT = "aider"
START_S, TURN_S = 90, 60  # generous: two shared cores, other developers' tests alongside


def _edit(name: str, old: str, new: str) -> str:
    """A reply with a SEARCH/REPLACE block (aider's diff edit format); `old` empty: a new file."""
    search = f"{old}\n" if old else ""
    return f"Editing {name}.\n\n{name}\n```\n<<<<<<< SEARCH\n{search}=======\n{new}\n>>>>>>> REPLACE\n```"


# Aider sends no tools: every request is a "side" one to the scripted model, hence `when: any`.
RULES = [
    {"match": "greet the tester", "reply": "Hello from the scripted model.\nSecond line, exact."},
    {"match": "write the notes", "reply": _edit("notes.txt", "", "written by aider")},
    {"match": "review the notes", "reply": _edit("review.txt", "the original text", "a reviewer wrote this")},
    {"match": "create the marker", "reply": "Run this:\n\n```bash\ntouch marker.txt\n```"},
    {"match": "create the second marker", "reply": "Run this:\n\n```bash\ntouch second.txt\n```"},
    {"match": "think slowly", "steps": [{"delay_ms": 20000}, {"text": "too late"}]},
    {"match": "break now", "steps": [{"error": 400, "message": "scripted failure", "times": 99}]},
    {"match": "write the report", "reply": "report from aider"},
]
DEV, ASKS, REVIEWER = "aiderdev", "aiderasks", "aiderreview"
PROFILES = {
    DEV: f"---\nname: {DEV}\nprovider: aider\n---\nYou are a careful developer.\n",
    ASKS: f"---\nname: {ASKS}\nprovider: aider\npermissionMode: default\n---\nA developer who asks.\n",
    REVIEWER: f"---\nname: {REVIEWER}\nprovider: aider\nrole: reviewer\n---\nYou review, never write.\n",
    "aidersup": "---\nname: aidersup\nprovider: aider\nrole: supervisor\n---\nYou supervise.\n",
    "mocksup": (
        "---\nname: mocksup\nprovider: mock_cli\nmock:\n  rules:\n    - match: 'hand over'\n"
        "      steps:\n        - tool: handoff\n"
        f"          args: {{agent_profile: {DEV}, message: 'write the report'}}\n"
        "          save: report\n      reply: 'worker said: {report}'\n---\nYou supervise.\n"
    ),
    "mockboss": (
        "---\nname: mockboss\nprovider: mock_cli\nmock:\n  rules:\n    - match: 'hand out'\n"
        "      steps:\n        - tool: assign\n"
        f"          args: {{agent_profile: {DEV}, message: 'write the report'}}\n"
        "          save: worker\n      reply: 'assigned {worker}'\n---\nYou supervise.\n"
    ),
}
# The user's own aider configuration: what a user of a local OpenAI-compatible model writes.
HOME_FILES = {
    ".aider.conf.yml": "# mine\nmodel: openai/fake-model\nedit-format: diff\n",
    ".aider.model.metadata.json": json.dumps(
        {
            "openai/fake-model": {
                "max_input_tokens": 128000,
                "max_output_tokens": 8192,
                "input_cost_per_token": 0,
                "output_cost_per_token": 0,
                "litellm_provider": "openai",
                "mode": "chat",
            }
        },
        indent=2,
    ),
}
WORK_FILES = {".aider.conf.yml": "# the project's own\nmap-tokens: 0\n", ".env": "AIDER_DARK_MODE=true\n"}


@pytest.fixture(scope="module")
def binary() -> Path:
    return pip_binary(PACKAGE, VERSION, BINARY)


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        server.set_script(SCRIPT, {"rules": [{**rule, "when": "any"} for rule in RULES]})
        yield server


@pytest.fixture(scope="module")
def cao(binary: Path, model: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CaoServer]:
    root = tmp_path_factory.mktemp("aider")
    server = real_cli_server(root, [binary], model.cli_env(SCRIPT))
    store_profiles(server, PROFILES)
    home = Path(server.env["HOME"])
    work = root / "work"  # not a git repository: aider asks to make one, cao says no
    work.mkdir()
    for directory, files in ((home, HOME_FILES), (work, WORK_FILES)):
        for name, text in files.items():
            (directory / name).write_text(text)
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


def start(cao: CaoServer, profile: str = DEV, yolo: bool = False) -> dict:
    resp = cao.client.post(
        "/sessions",
        params={"agent_profile": profile, "yolo": yolo, "working_directory": str(workdir(cao))},
        timeout=START_S + 30,
    )
    assert resp.status_code == 201, resp.text
    term = resp.json()
    assert term["status"] == "idle", term
    return term


def model_requests(model: ScriptedModelServer, prompt: str) -> list[dict]:
    return [r for r in model.requests(SCRIPT) if prompt in r["user_text"]]


# --- tests --------------------------------------------------------------------------------
def test_text_turn_completes_with_the_exact_answer_and_the_users_files_stay_unchanged(
    cao: CaoServer, model: ScriptedModelServer
) -> None:
    home, work = Path(cao.env["HOME"]), workdir(cao)
    files = {home / n: t for n, t in HOME_FILES.items()} | {work / n: t for n, t in WORK_FILES.items()}
    before = {path: path.stat().st_mtime_ns for path in files}
    term = start(cao)
    cao.send(term["id"], "please greet the tester")
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert cao.client.get(f"/terminals/{term['id']}").json()["status_source"] == "screen"  # aider has no hooks
    assert last_reply(cao, term["id"]) == "Hello from the scripted model.\nSecond line, exact."
    (asked,) = model_requests(model, "greet the tester")
    # The user's model and edit format (only their config names them), over Chat Completions.
    assert asked["path"] == "/v1/chat/completions" and asked["body"]["model"] == "fake-model"
    assert "SEARCH/REPLACE" in json.dumps(asked["body"])
    # The profile's prompt reached the model (a read-only chat file cao wrote for this terminal).
    assert "You are a careful developer." in json.dumps(asked["body"]["messages"])
    delete_and_check_nothing_left(cao, term["id"])
    assert not (cao.home / "tmp" / term["id"]).exists()  # its files went with it
    for path, text in files.items():
        assert path.read_text() == text and path.stat().st_mtime_ns == before[path], path
    # cao kept aider's history files in the terminal's own directory, not in the project.
    assert not [p.name for p in work.iterdir() if p.name.startswith(".aider") and p.name != ".aider.conf.yml"]


def test_an_edit_block_in_the_reply_is_applied(cao: CaoServer) -> None:
    term = start(cao, yolo=True)
    cao.send(term["id"], "write the notes")
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert (workdir(cao) / "notes.txt").read_text() == "written by aider\n"
    assert last_reply(cao, term["id"]).startswith("Editing notes.txt.\n\nnotes.txt\n```\n<<<<<<< SEARCH")
    delete_and_check_nothing_left(cao, term["id"])


def test_a_reviewer_cannot_write_a_file(cao: CaoServer) -> None:
    """The same kind of edit block as the developer's: aider runs with --dry-run and applies none."""
    target = workdir(cao) / "review.txt"
    target.write_text("the original text\n")
    term = start(cao, profile=REVIEWER)
    cao.send(term["id"], "review the notes")
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert last_reply(cao, term["id"]).startswith("Editing review.txt.")
    history = cao.client.get(f"/terminals/{term['id']}/output", params={"mode": "full"}).json()["output"]
    assert "Did not apply edit to review.txt (--dry-run)" in history
    assert target.read_text() == "the original text\n"
    delete_and_check_nothing_left(cao, term["id"])


def test_a_shell_command_waits_for_an_answer_given_through_mcp_and_a_no_declines_it(cao: CaoServer) -> None:
    term = start(cao, profile=ASKS)
    cao.send(term["id"], "create the marker")
    cao.wait_status(term["id"], "waiting_user_answer", timeout=TURN_S)
    assert "Run shell command?" in cao.client.get(f"/terminals/{term['id']}").json()["status_reason"]
    assert not (workdir(cao) / "marker.txt").exists()

    async def answer() -> dict:
        async with mcp_session(mcp_env(cao, None)) as session:
            return await call(session, "answer_user_prompt", terminal_id=term["id"], answer="yes")

    assert anyio.run(answer)["success"] is True
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert (workdir(cao) / "marker.txt").exists()
    assert last_reply(cao, term["id"]) == "Run this:\n\n```bash\ntouch marker.txt\n```"
    # The next command, declined: typed "no" becomes aider's "n".
    cao.send(term["id"], "create the second marker")
    cao.wait_status(term["id"], "waiting_user_answer", timeout=TURN_S)
    cao.send(term["id"], "no")
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert not (workdir(cao) / "second.txt").exists()
    delete_and_check_nothing_left(cao, term["id"])


def test_a_failed_model_request_is_an_error(cao: CaoServer) -> None:
    term = start(cao)
    cao.send(term["id"], "please break now")
    cao.wait_status(term["id"], "error", timeout=TURN_S)
    assert "scripted failure" in cao.client.get(f"/terminals/{term['id']}").json()["status_reason"]
    delete_and_check_nothing_left(cao, term["id"])


def test_death_mid_turn_is_reported_as_error(cao: CaoServer) -> None:
    term = start(cao)
    cao.send(term["id"], "think slowly")
    cao.wait_status(term["id"], "processing", timeout=TURN_S)
    found = [p for p in agent_processes(term["id"]) if any(Path(a).name == BINARY for a in p.cmdline()[:2])]
    assert found, "the aider process"
    found[0].send_signal(signal.SIGKILL)
    cao.wait_status(term["id"], "error", timeout=TURN_S)
    assert cao.client.delete(f"/terminals/{term['id']}").status_code == 200
    wait_until(lambda: not agent_processes(term["id"]), timeout=20, interval=0.2, message="no leftover process")


def test_exit_command_ends_the_cli(cao: CaoServer) -> None:
    term = start(cao)
    assert cao.client.post(f"/terminals/{term['id']}/exit").status_code == 200
    cao.wait_status(term["id"], "error", timeout=TURN_S)  # the pane's process is gone
    assert "exited" in cao.client.get(f"/terminals/{term['id']}").json()["status_reason"]
    wait_until(lambda: not agent_processes(term["id"]), timeout=20, interval=0.2, message="no leftover process")
    assert cao.client.delete(f"/terminals/{term['id']}").status_code == 200


def test_a_mock_supervisor_hands_off_to_an_aider_worker(cao: CaoServer) -> None:
    resp = cao.client.post("/sessions", params={"agent_profile": "mocksup", "working_directory": str(workdir(cao))})
    assert resp.status_code == 201, resp.text
    sup = resp.json()
    cao.send(sup["id"], "hand over the report")
    # The mock calls handoff; cao starts an aider worker, types the task, reads its answer back.
    cao.wait_status(sup["id"], "completed", timeout=START_S + TURN_S)
    assert last_reply(cao, sup["id"]) == "worker said: report from aider"
    assert [t["id"] for t in cao.client.get("/terminals").json()] == [sup["id"]]  # the worker is gone


def test_an_assigned_aider_worker_s_reply_reaches_its_caller_as_a_message(cao: CaoServer) -> None:
    """Aider has no MCP, so it cannot send_message its result: cao posts the reply of its task's
    turn to the caller's inbox in the worker's name, as the worker would have."""
    resp = cao.client.post("/sessions", params={"agent_profile": "mockboss", "working_directory": str(workdir(cao))})
    assert resp.status_code == 201, resp.text
    boss = resp.json()
    cao.send(boss["id"], "hand out the work")
    cao.wait_status(boss["id"], "completed", timeout=START_S)
    worker = last_reply(cao, boss["id"]).removeprefix("assigned ").strip()
    assert cao.client.get(f"/terminals/{worker}").json()["provider"] == "aider"
    messages = wait_until(
        lambda: cao.client.get(f"/terminals/{boss['id']}/inbox/messages").json(),
        timeout=START_S + TURN_S,
        interval=0.5,
        message="the aider worker's reply in its caller's inbox",
    )
    assert [(m["sender_id"], m["message"]) for m in messages] == [(worker, "report from aider")]


def test_an_aider_supervisor_is_refused_with_the_reason(cao: CaoServer) -> None:
    resp = cao.client.post("/sessions", params={"agent_profile": "aidersup", "working_directory": str(workdir(cao))})
    assert resp.status_code == 400, resp.text
    assert "has no MCP client" in resp.json()["detail"] and "never a supervisor" in resp.json()["detail"]
    assert cao.client.get("/terminals").json() == []


def test_crash_at_start_fails_the_create_and_leaves_nothing(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / BINARY).write_text("#!/bin/sh\necho 'fatal: cannot start' >&2\nexit 3\n")
    (fake / BINARY).chmod(0o755)
    server = real_cli_server(tmp_path, [fake / BINARY])
    server.start()
    try:
        resp = server.client.post(
            "/sessions", params={"agent_profile": "developer", "provider": "aider"}, timeout=START_S + 30
        )
        assert resp.status_code == 502, resp.text
        message = resp.json()["detail"]["message"]
        assert message.startswith("aider agent failed to start: "), message
        assert (
            "the agent process exited (code 3)" in message
            or "the agent process exited (tmux did not learn its exit code)" in message
        ), message
        assert server.client.get("/terminals").json() == []
    finally:
        server.cleanup()
