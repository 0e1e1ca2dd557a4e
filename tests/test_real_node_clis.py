"""Gemini CLI and Qwen Code end to end: the pinned real `gemini` (npm @google/gemini-cli) and
`qwen` (npm @qwen-code/qwen-code) in cao's tmux, confined to a temporary home, talking to the
scripted model, driven through cao-server's HTTP API and cao-mcp-server (official MCP client SDK).
Both CLIs reach cao's tools on cao-server's own MCP endpoint (/mcp, streamable HTTP).

Both CLIs come from one Node code base, so they share every scenario; a `NodeCli` row holds what
differs, and test ids name the CLI (`test_shell_tool_turn[qwen_cli]`). One cao-server and one
scripted model serve all the tests of one CLI; each test starts its own agents and uses its own
trigger words, so the tests do not depend on each other.
"""

from __future__ import annotations

import json
import os
import signal
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx
import psutil
import pytest
from conftest import CaoServer, wait_until
from crash_support import long_paste_survives_a_crash
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
DEV = "nodedev"  # the profile of the CLI under test
ASKS = "nodeasks"  # the same, keeping the CLI's permission prompts
# The scripted model's rules for both CLIs; each adds its `worker_rule`.
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
        "steps": [{"tool": "shell", "args": {"command": "touch second.txt"}}, {"text": "Second marker created."}],
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
    {
        "match": "hand off at once",
        "steps": [
            {
                "tool": "mcp:cao-mcp-server:handoff",
                "args": {"agent_profile": "mockworker", "message": "the first task"},
            },
            {"text": "First handoff finished."},
        ],
    },
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
]


# --- what differs: each CLI's part of two scenarios ----------------------------------------
def _gemini_worker_reports_back(cao: CaoServer) -> None:
    """Assigned by the mock supervisor, the gemini worker reports back with send_message."""
    resp = cao.client.post("/sessions", params={"agent_profile": "mocksup", "working_directory": workdir(cao)})
    assert resp.status_code == 201, resp.text
    sup = resp.json()
    cao.send(sup["id"], "hand out the work")
    cao.wait_status(sup["id"], "completed", timeout=TURN_S)
    worker = last_reply(cao, sup["id"]).removeprefix("assigned ").strip()
    assert cao.client.get(f"/terminals/{worker}").json()["provider"] == "gemini_cli"
    # The gemini worker calls send_message; the mock supervisor then echoes the report.
    wait_until(
        lambda: "report from gemini" in reply_or_empty(cao, sup["id"]),
        timeout=START_S + TURN_S,
        interval=0.5,
        message="the worker's report reaching the supervisor",
    )
    messages = cao.client.get(f"/terminals/{sup['id']}/inbox/messages").json()
    assert [m["sender_id"] for m in messages] == [worker]
    delete_and_check_nothing_left(cao, worker)
    assert cao.client.delete(f"/terminals/{sup['id']}").status_code == 200


def _qwen_worker_answers_a_handoff(cao: CaoServer) -> None:
    """Handoff, not assign + send_message: qwen has a built-in tool named send_message, which the
    scripted model would pick over cao's deferred MCP tool of the same name."""
    resp = cao.client.post("/sessions", params={"agent_profile": "mocksup", "working_directory": workdir(cao)})
    assert resp.status_code == 201, resp.text
    sup = resp.json()
    cao.send(sup["id"], "hand over the report")
    # The mock calls handoff; cao starts a qwen worker, types the task, reads its answer back.
    cao.wait_status(sup["id"], "completed", timeout=START_S + TURN_S)
    assert last_reply(cao, sup["id"]) == "worker said: report from qwen"
    assert [t["id"] for t in cao.client.get("/terminals").json()] == [sup["id"]]  # the worker is gone


def _gemini_user_files(marker: Path) -> dict[str, str]:
    return {
        # JSON with comments, as Gemini allows; the user's own hook must keep running.
        "settings.json": '{\n  // mine\n  "ui": {"hideTips": true},\n  "hooks": {"BeforeAgent": [{"hooks": '
        f'[{{"type": "command", "command": "touch {marker}"}}]}}]}},\n}}\n',
        "GEMINI.md": "User note: the user's own global context.\n",
        "oauth_creds.json": '{"token": "the user login"}\n',
    }


def _gemini_used_user_files(cao: CaoServer, model: ScriptedModelServer, terminal_id: str, config: Path) -> None:
    sent = json.dumps([r["body"] for r in model.requests("gemini") if not r["side"]])
    assert "You are a careful developer." in sent and "User note: the user" in sent  # profile + user context
    shadow = cao.home / "tmp" / terminal_id / "gemini-home" / ".gemini"
    assert (shadow / "oauth_creds.json").resolve() == (config / "oauth_creds.json").resolve()  # login kept


def _qwen_user_files(marker: Path) -> dict[str, str]:
    # JSON with comments; `$version` present, or Qwen itself (not cao) would add it to the file.
    return {
        "settings.json": '{\n  // mine\n  "$version": 4,\n  "ui": {"hideTips": true},\n  "hooks": '
        '{"UserPromptSubmit": '
        f'[{{"hooks": [{{"type": "command", "command": "touch {marker}"}}]}}]}}\n}}\n'
    }


def _qwen_used_user_files(cao: CaoServer, model: ScriptedModelServer, terminal_id: str, config: Path) -> None:
    systems = [
        m["content"]
        for r in model.requests("qwen")
        if not r["side"]
        for m in r["body"]["messages"]
        if m["role"] == "system"
    ]
    assert any("You are a careful developer." in json.dumps(c) for c in systems)  # the profile's prompt


@dataclass(frozen=True)
class NodeCli:
    """One CLI under test, and what its scenarios expect of it."""

    provider: str  # cao's provider name, and the test id
    package: str
    version: str
    binary: str  # also the name of its script at the scripted model
    turn_end_source: str  # the CLI's own signal that ends a text turn (a hook, its title)
    allow_answer: str  # what answer_user_prompt sends to allow a tool once
    after_decline: str  # the status a declined permission leaves
    worker_rule: dict  # the scripted model's rule for this CLI as the worker of a mock supervisor
    mock_supervisor: str  # the mock supervisor's profile for that
    worker_scenario: Callable[[CaoServer], None]  # and the test of it
    config_dir: str  # the user's configuration directory, under HOME
    user_hook: str  # the event of the user's own hook in user_files
    user_files: Callable[[Path], dict[str, str]]  # the user's configuration, given the user hook's marker file
    used_user_files: Callable[[CaoServer, ScriptedModelServer, str, Path], None]  # asserts they were used
    server_env: dict[str, str] = field(default_factory=dict)


GEMINI = NodeCli(
    provider="gemini_cli",
    package="@google/gemini-cli",
    version="0.61.0",
    binary="gemini",
    turn_end_source="title",  # Gemini's own status in its terminal title ("◇  Ready"), not the screen
    allow_answer="yes",  # the provider turns "yes" into the key "1" ("Allow once") for Gemini's option menu
    after_decline="idle",  # Gemini shows the turn as cancelled; its title says Ready, the screen says how (idle)
    worker_rule={
        "match": r"Assigned by terminal (?P<sup>[a-f0-9]{8})",
        "steps": [
            {
                "tool": "mcp:cao-mcp-server:send_message",
                "args": {"receiver_id": "{sup}", "message": "report from gemini"},
            },
            {"text": "Reported back."},
        ],
    },
    mock_supervisor=(
        "---\nname: mocksup\nprovider: mock_cli\nmock:\n  rules:\n    - match: 'hand out'\n"
        "      steps:\n        - tool: assign\n"
        f"          args: {{agent_profile: {DEV}, message: 'the assigned task'}}\n"
        "          save: worker\n      reply: 'assigned {worker}'\n---\nYou supervise.\n"
    ),
    worker_scenario=_gemini_worker_reports_back,
    config_dir=".gemini",
    user_hook="BeforeAgent",
    user_files=_gemini_user_files,
    used_user_files=_gemini_used_user_files,
)
QWEN = NodeCli(
    provider="qwen_cli",
    package="@qwen-code/qwen-code",
    version="0.15.10",
    binary="qwen",
    turn_end_source="hook:Notification",  # Qwen's own idle notice (through cao-hook), not the screen
    allow_answer="1",  # "1" picks "Yes, allow once" in Qwen's option list (a number key selects and confirms)
    after_decline="completed",  # Qwen's idle notice (a hook) ends the cancelled turn
    worker_rule={"match": "write the report", "reply": "report from qwen"},
    mock_supervisor=(
        "---\nname: mocksup\nprovider: mock_cli\nmock:\n  rules:\n    - match: 'hand over'\n"
        "      steps:\n        - tool: handoff\n"
        f"          args: {{agent_profile: {DEV}, message: 'write the report'}}\n"
        "          save: report\n      reply: 'worker said: {report}'\n---\nYou supervise.\n"
    ),
    worker_scenario=_qwen_worker_answers_a_handoff,
    config_dir=".qwen",
    user_hook="UserPromptSubmit",
    user_files=_qwen_user_files,
    used_user_files=_qwen_used_user_files,
    server_env={"OPENAI_MODEL": "fake-model"},
)


@pytest.fixture(scope="module", params=[GEMINI, QWEN], ids=lambda c: c.provider)
def cli(request: pytest.FixtureRequest) -> NodeCli:
    return request.param


@pytest.fixture(scope="module")
def binary(cli: NodeCli) -> Path:
    return npm_binary(cli.package, cli.version, cli.binary)


@pytest.fixture(scope="module")
def model(cli: NodeCli) -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        server.set_script(cli.binary, [*RULES, cli.worker_rule])
        yield server


@pytest.fixture(scope="module")
def cao(
    cli: NodeCli, binary: Path, model: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CaoServer]:
    root = tmp_path_factory.mktemp(cli.binary)
    server = real_cli_server(root, [binary], {**model.cli_env(cli.binary), **cli.server_env})
    store = server.home / "agent-store"
    store.mkdir(parents=True, exist_ok=True)
    profiles = {
        DEV: f"---\nname: {DEV}\nprovider: {cli.provider}\n---\nYou are a careful developer.\n",
        # permissionMode: default keeps the CLI's own prompts inside the tool set.
        ASKS: f"---\nname: {ASKS}\nprovider: {cli.provider}\npermissionMode: default\n---\nA developer who asks.\n",
        "mockworker": "---\nname: mockworker\nprovider: mock_cli\n---\nYou are a test worker.\n",
        "mocksup": cli.mock_supervisor,
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


def start(cao: CaoServer, cli: NodeCli, yolo: bool = True, profile: str = DEV) -> dict:
    resp = cao.client.post(
        "/sessions",
        params={"agent_profile": profile, "provider": cli.provider, "yolo": yolo, "working_directory": workdir(cao)},
        timeout=START_S + 30,
    )
    assert resp.status_code == 201, resp.text
    term = resp.json()
    assert term["status"] == "idle", term
    return term


# --- tests --------------------------------------------------------------------------------
def test_text_turn_completes_with_the_exact_answer_then_delete_leaves_no_process(cli: NodeCli, cao: CaoServer) -> None:
    term = start(cao, cli)
    cao.send(term["id"], "please greet the tester")
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    # The CLI's own signal (a hook, its title) ended the turn, not the screen.
    assert cao.client.get(f"/terminals/{term['id']}").json()["status_source"] == cli.turn_end_source
    assert last_reply(cao, term["id"]) == "Hello from the scripted model.\nSecond line, exact."
    delete_and_check_nothing_left(cao, term["id"])


def test_shell_tool_turn(cli: NodeCli, cao: CaoServer, model: ScriptedModelServer) -> None:
    term = start(cao, cli)
    cao.send(term["id"], "count the files")
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert last_reply(cao, term["id"]) == "The shell said: done."
    results = [r["tool_result"] for r in model.requests(cli.binary) if "count the files" in r["user_text"]]
    assert any("tool-output-77" in r for r in results), results
    delete_and_check_nothing_left(cao, term["id"])


def test_permission_prompt_is_waiting_and_answered_through_mcp(cli: NodeCli, cao: CaoServer) -> None:
    term = start(cao, cli, yolo=False, profile=ASKS)
    cao.send(term["id"], "create the marker")
    cao.wait_status(term["id"], "waiting_user_answer", timeout=TURN_S)
    assert not (Path(workdir(cao)) / "marker.txt").exists()

    async def answer() -> dict:
        async with mcp_session(mcp_env(cao, None)) as session:
            return await call(session, "answer_user_prompt", terminal_id=term["id"], answer=cli.allow_answer)

    assert anyio.run(answer)["success"] is True
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert last_reply(cao, term["id"]) == "Marker created."
    assert (Path(workdir(cao)) / "marker.txt").exists()
    delete_and_check_nothing_left(cao, term["id"])


def test_a_declined_permission_ends_the_turn_without_running_the_tool(cli: NodeCli, cao: CaoServer) -> None:
    term = start(cao, cli, yolo=False, profile=ASKS)
    cao.send(term["id"], "create the second marker")
    cao.wait_status(term["id"], "waiting_user_answer", timeout=TURN_S)
    cao.send(term["id"], "no")  # the provider answers the menu with Esc
    cao.wait_status(term["id"], cli.after_decline, timeout=TURN_S)
    assert not (Path(workdir(cao)) / "second.txt").exists()
    delete_and_check_nothing_left(cao, term["id"])


def test_exit_command_ends_the_cli_and_its_mcp_server(cli: NodeCli, cao: CaoServer) -> None:
    term = start(cao, cli)
    assert cao.client.post(f"/terminals/{term['id']}/exit").status_code == 200
    cao.wait_status(term["id"], "error", timeout=TURN_S)  # the pane's process is gone
    assert "exited" in cao.client.get(f"/terminals/{term['id']}").json()["status_reason"]
    wait_until(lambda: not agent_processes(term["id"]), timeout=20, interval=0.2, message="no leftover process")
    assert cao.client.delete(f"/terminals/{term['id']}").status_code == 200


def test_death_mid_turn_is_reported_as_error(cli: NodeCli, cao: CaoServer) -> None:
    term = start(cao, cli)
    cao.send(term["id"], "think slowly")
    cao.wait_status(term["id"], "processing", timeout=TURN_S)
    found = [p for p in agent_processes(term["id"]) if cli.binary in " ".join(p.cmdline())]
    assert found, f"the {cli.binary} process"
    found[0].send_signal(signal.SIGKILL)
    cao.wait_status(term["id"], "error", timeout=TURN_S)
    assert cao.client.delete(f"/terminals/{term['id']}").status_code == 200
    wait_until(lambda: not agent_processes(term["id"]), timeout=20, interval=0.2, message="no leftover process")


def test_supervisor_hands_off_to_a_mock_worker(cli: NodeCli, cao: CaoServer, model: ScriptedModelServer) -> None:
    sup = start(cao, cli)
    cao.send(sup["id"], "delegate the summary")
    cao.wait_status(sup["id"], "completed", timeout=TURN_S)
    assert last_reply(cao, sup["id"]) == "Handoff finished."
    results = [r["tool_result"] for r in model.requests(cli.binary) if "delegate the summary" in r["user_text"]]
    # The tool result is cao-mcp-server's JSON, possibly wrapped in text (Gemini wraps tool output in
    # <untrusted_context> tags).
    handed = [json.loads(r[r.index("{") : r.rindex("}") + 1]) for r in results if "MOCK: summarise the plan" in r]
    assert handed and handed[0]["success"] is True, results
    assert handed[0]["message"].startswith("Successfully handed off to mockworker (mock_cli)")
    assert cao.client.get(f"/terminals/{handed[0]['terminal_id']}").status_code == 404  # worker removed
    delete_and_check_nothing_left(cao, sup["id"])


def tool_results(model: ScriptedModelServer, cli: NodeCli, prompt: str, marker: str) -> list[dict]:
    """cao's JSON answers to the tool calls of the turn `prompt`, the ones that mention `marker`
    (Gemini wraps a tool's output in <untrusted_context> tags)."""
    results = [r["tool_result"] for r in model.requests(cli.binary) if prompt in r["user_text"]]
    return [json.loads(r[r.index("{") : r.rindex("}") + 1]) for r in results if marker in r]


def test_a_first_message_hands_off_on_the_first_try(cli: NodeCli, cao: CaoServer, model: ScriptedModelServer) -> None:
    """The message an agent is created with reaches a CLI that has cao's tools already (it listed
    them on /mcp as it started): the model's first call, a handoff, is offered and works."""
    resp = cao.client.post(
        "/sessions",
        params={"agent_profile": DEV, "provider": cli.provider, "yolo": True, "working_directory": workdir(cao)},
        json={"initial_message": "please hand off at once"},
        timeout=START_S + 30,
    )
    assert resp.status_code == 201, resp.text
    sup = resp.json()
    cao.wait_status(sup["id"], "completed", timeout=START_S + TURN_S)
    assert last_reply(cao, sup["id"]) == "First handoff finished."
    asked = [r for r in model.requests(cli.binary) if "hand off at once" in r["user_text"] and not r["side"]]
    assert asked and not [r for r in asked if "tool unavailable" in r["reply"]["source"]], asked
    handed = tool_results(model, cli, "hand off at once", "MOCK: the first task")
    assert len(handed) == 1 and handed[0]["success"] is True, handed
    delete_and_check_nothing_left(cao, sup["id"])


def test_after_a_kill_9_of_cao_server_the_agents_next_tool_call_works_once(
    cli: NodeCli, cao: CaoServer, model: ScriptedModelServer
) -> None:
    """MCP over HTTP, stateless: the CLI holds no session that a restarted server would not know.
    A tool call first: Gemini registers the tools it listed only once its whole MCP discovery is
    done (prompts, tools, then resources); a server killed in between leaves it without them."""
    term = start(cao, cli)

    def assign(when: str) -> str:
        expected = f"Assigned {when} the restart."
        cao.send(term["id"], f"assign {when} the restart")
        # The reply, not the status: after the restart it reads `completed` (the last turn) at once.
        wait_until(
            lambda: reply_or_empty(cao, term["id"]) == expected,
            timeout=TURN_S,
            interval=0.2,
            message=f"the reply to the call {when} the restart",
        )
        cao.wait_status(term["id"], "completed", timeout=TURN_S)
        answers = tool_results(model, cli, f"assign {when} the restart", '"success"')
        assert len(answers) == 1 and answers[0]["success"] is True, answers
        return answers[0]["terminal_id"]

    before = assign("before")
    cao.kill9()
    cao.start()
    cao.wait_status(term["id"], {"idle", "completed"}, timeout=TURN_S)  # adopted again, not an error
    after = assign("after")
    workers = [t["id"] for t in cao.client.get("/terminals").json() if t["agent_profile"] == "mockworker"]
    assert sorted(workers) == sorted([before, after])  # each call was done once
    delete_and_check_nothing_left(cao, term["id"])


def runs_cli(proc: psutil.Process, cli: NodeCli) -> bool:
    """`proc` is node running the CLI's script (not one of its short-lived children)."""
    try:
        argv = proc.cmdline()
    except psutil.Error:
        return False
    return len(argv) > 1 and Path(argv[1]).name == cli.binary


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


def test_the_credential_is_in_no_argv_and_no_file_outlives_the_agent(cli: NodeCli, cao: CaoServer) -> None:
    term = start(cao, cli)  # idle: its CLI has listed cao's tools, with the credential
    secret = mcp_env(cao, term["id"])["CAO_MCP_TOKEN"]
    clis = [p for p in agent_processes(term["id"]) if runs_cli(p, cli)]
    assert clis and all(p.environ().get("CAO_MCP_TOKEN") == secret for p in clis), clis  # where it belongs
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        assert secret.encode() not in argv, pid
    root = cao.home.parent  # the cao home, the CLI's home and TMPDIR, the working directory
    holding = files_holding(root, secret)
    own = cao.home / "tmp" / term["id"]
    assert all(mode == 0o600 and own in path.parents for path, mode in holding.items()), holding
    delete_and_check_nothing_left(cao, term["id"])
    assert files_holding(root, secret) == {}


def test_a_worker_of_a_mock_supervisor_reports_back(cli: NodeCli, cao: CaoServer) -> None:
    cli.worker_scenario(cao)


def test_user_configuration_is_used_and_never_written(cli: NodeCli, cao: CaoServer, model: ScriptedModelServer) -> None:
    config = Path(cao.env["HOME"]) / cli.config_dir
    config.mkdir(parents=True, exist_ok=True)
    marker = config.parent / "user-hook-ran"
    user_files = cli.user_files(marker)
    for name, text in user_files.items():
        (config / name).write_text(text)
    before = {name: (config / name).stat().st_mtime_ns for name in user_files}
    model.clear_requests(cli.binary)
    term = start(cao, cli)
    cao.send(term["id"], "please greet the tester")
    cao.wait_status(term["id"], "completed", timeout=TURN_S)
    assert marker.exists(), f"the user's own {cli.user_hook} hook ran too"
    cli.used_user_files(cao, model, term["id"], config)
    delete_and_check_nothing_left(cao, term["id"])
    for name, text in user_files.items():
        assert (config / name).read_text() == text and (config / name).stat().st_mtime_ns == before[name]
    for name in user_files:
        (config / name).unlink()


def test_crash_at_start_fails_the_create_and_leaves_nothing(cli: NodeCli, tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / cli.binary).write_text("#!/bin/sh\necho 'fatal: cannot start' >&2\nexit 3\n")
    (fake / cli.binary).chmod(0o755)
    server = real_cli_server(tmp_path, [fake / cli.binary])
    server.start()
    try:
        resp = server.client.post(
            "/sessions", params={"agent_profile": "developer", "provider": cli.provider}, timeout=START_S + 30
        )
        # A worker error (502), not a hang (504) nor a server fault (500); it names the cause.
        assert resp.status_code == 502, resp.text
        detail = resp.json()["detail"]
        assert detail["kind"] == "error", detail
        assert detail["message"].startswith(f"{cli.provider} agent failed to start: "), detail
        # The code as tmux reports it; tmux 3.3a sometimes never learns the code of a process
        # that exits at once (measured: asked again over 3.5 s, it still has none), and then
        # cao says so rather than inventing one.
        assert (
            "the agent process exited (code 3)" in detail["message"]
            or "the agent process exited (tmux did not learn its exit code)" in detail["message"]
        ), detail
        assert server.client.get("/terminals").json() == []
    finally:
        server.cleanup()


def test_missing_binary_fails_clearly_and_leaves_nothing(cli: NodeCli, tmp_path: Path) -> None:
    server = real_cli_server(tmp_path, [])
    server.env["PATH"] = "/usr/bin:/bin"  # no gemini or qwen here
    server.start()
    try:
        resp = server.client.post("/sessions", params={"agent_profile": "developer", "provider": cli.provider})
        # 400, not a 502/504 after waiting out a start: refused before anything was created.
        assert resp.status_code == 400, resp.text
        assert f"`{cli.binary}`" in resp.json()["detail"] and "PATH" in resp.json()["detail"]
        assert server.client.get("/terminals").json() == []
        assert server.client.get("/sessions").json() == []
    finally:
        server.cleanup()


def test_a_long_paste_interrupted_by_a_crash_is_submitted_once(
    cao: CaoServer, cli: NodeCli, model: ScriptedModelServer
):
    """Gemini shows a long paste as `[Pasted Text: 40 lines]`, Qwen as `[Pasted Content N chars]`:
    after a crash between paste and Enter, cao presses Enter; the model gets the message once."""
    term = start(cao, cli)
    long_paste_survives_a_crash(
        cao,
        term["id"],
        lambda marker: sum(r["user_text"].count(marker) for r in model.requests(cli.binary) if not r["side"]),
    )


@pytest.mark.parametrize("cli", [QWEN], indirect=True, ids=lambda c: c.provider)  # Gemini has no StopFailure
def test_a_failed_turn_stays_an_error_when_the_idle_notice_follows(cli: NodeCli, cao: CaoServer):
    """Qwen sends `Notification(idle_prompt)` right after `StopFailure`; the hook route used to ask
    the provider too, and its module-level memory then let the monitor's own reading turn the
    failed turn into `completed`. Posted through the real route, the error stays."""
    tid = start(cao, cli)["id"]
    seen: list[str] = []
    with (
        httpx.Client(base_url=cao.url, timeout=30) as sse,
        sse.stream("GET", "/events", params={"pattern": f"terminal.{tid}.status"}) as stream,
    ):
        lines = stream.iter_lines()
        assert next(lines).startswith(": connected")
        for event, payload in (
            ("UserPromptSubmit", {"session_id": "s"}),
            ("StopFailure", {"session_id": "s", "error_details": "400 scripted failure"}),
            ("Notification", {"session_id": "s", "notification_type": "idle_prompt"}),
            ("UserPromptSubmit", {"session_id": "s"}),
        ):  # hooks apply in order:
            assert cao.post_hook(tid, event, payload).status_code == 200  # this one closes the sequence
        for line in lines:
            if line.startswith("data: "):
                seen.append(json.loads(line[len("data: ") :])["status"])
                if len(seen) == 3:
                    break
    assert seen == ["processing", "error", "processing"]
