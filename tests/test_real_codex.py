"""The codex provider end to end: the real Codex CLI (pinned, from npm) in tmux under a real
cao-server, in its own temporary HOME, against the scripted model (Responses API).

Covers spawn → idle, text and shell turns (status from Codex's hooks, the exact reply
extracted), a permission prompt answered through cao's `answer_user_prompt`,
exit and delete leaving no process behind, handoff with Codex as supervisor and as worker,
assign with a Codex worker reporting back, cao's MCP endpoint over HTTP (a first message that
hands off, a kill -9 of cao-server, where the credential is), and the faults: binary missing,
crash at start, death mid-turn.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from conftest import CaoServer, wait_until
from crash_support import long_paste_survives_a_crash
from credential_support import agent_credential, argv_holding, files_holding
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

# Autouse: without tmux every test here skips, or fails under CI (CAO_REQUIRE_REAL_CLIS).
from real_cli_support import (
    npm_binary,
    real_cli_prerequisites,  # noqa: F401
    real_cli_server,
)
from sse_support import EventStream

from cao_testkit.scripted_model.harness import ScriptedModelServer

PACKAGE, VERSION = "@openai/codex", "0.171.0"
HELLO = "Hello from the scripted model."
LONG_MARKDOWN = "A long answer line that the terminal has to wrap. " * 6 + "END.\n\n**bold** and `code`"
RULES = [
    {"match": "say hello", "reply": HELLO},
    {"match": "answer at length", "reply": LONG_MARKDOWN},
    {"match": "greet the boss", "reply": "Hi boss, codex here."},
    {
        "match": "print the marker",
        "steps": [
            {"tool": "shell", "args": {"command": "echo marker-42"}},
            {"text": "The command printed the marker."},
        ],
    },
    {
        "match": "touch the file",
        "steps": [
            {
                "tool": "shell",
                "args": {
                    "command": "touch created.txt",
                    "sandbox_permissions": "require_escalated",
                    "justification": "create created.txt",
                },
            },
            {"text": "Created it."},
        ],
    },
    {"match": "break now", "steps": [{"error": 500, "message": "scripted failure", "times": 99}]},
    {"match": "take your time", "steps": [{"delay_ms": 30000}, {"text": "Done after a pause."}]},
    {
        "match": "delegate the sum",
        "steps": [
            {"tool": "mcp:cao-mcp-server:handoff", "args": {"agent_profile": "mock_worker", "message": "add 2 and 3"}},
            {"text": "The worker has answered."},
        ],
    },
    {
        "match": r"report (marker-\d+) to ([0-9a-f]{8})",
        "steps": [
            {"tool": "mcp:cao-mcp-server:send_message", "args": {"receiver_id": "{g2}", "message": "{g1}"}},
            {"text": "Reported {g1}."},
        ],
    },
    {
        "match": r"Assigned by terminal ([0-9a-f]{8})",
        "steps": [
            {"tool": "mcp:cao-mcp-server:send_message", "args": {"receiver_id": "{g1}", "message": "codex result 42"}},
            {"text": "Reported back."},
        ],
    },
]
PROFILES = {
    "codex_dev": "---\nname: codex_dev\nprovider: codex\nmodel: fake-model\n---\nYou are a careful developer.\n",
    # permissionMode: default keeps Codex's approval prompts (approval_policy on-request).
    "codex_asks": "---\nname: codex_asks\nprovider: codex\nmodel: fake-model\npermissionMode: default\n---\n"
    "You are a careful developer.\n",
    "codex_broken": (
        "---\nname: codex_broken\nprovider: codex\nmodel: fake-model\n"
        "codexConfig: {approval_policy: not-a-policy}\n---\nStarts with a bad setting.\n"
    ),
    # No retries of a failed model request, so a failing turn ends at once.
    "codex_fragile": (
        "---\nname: codex_fragile\nprovider: codex\nmodel: fake-model\ncodexConfig:\n"
        "  model_providers.cao_openai.request_max_retries: 0\n"
        "  model_providers.cao_openai.stream_max_retries: 0\n---\nGives up at once.\n"
    ),
    # Replaces cao's trust entry: Codex then stops at its "Trust this folder?" screen.
    "codex_untrusted": (
        "---\nname: codex_untrusted\nprovider: codex\nmodel: fake-model\n"
        "codexConfig: {projects: {}}\n---\nMeets the trust screen.\n"
    ),
    "mock_worker": "---\nname: mock_worker\nprovider: mock_cli\n---\nA mock worker.\n",
    "mock_inbox": "---\nname: mock_inbox\nprovider: mock_cli\n---\nReceives messages.\n",
    "mock_boss": (
        "---\nname: mock_boss\nprovider: mock_cli\nmock:\n  rules:\n"
        "    - match: 'hand off to codex'\n      steps:\n"
        "        - {tool: handoff, args: {agent_profile: codex_dev, message: 'please greet the boss'},"
        " save: out}\n      reply: 'FINAL {out}'\n"
        "    - match: 'assign to codex'\n      steps:\n"
        "        - {tool: assign, args: {agent_profile: codex_dev, message: 'count things'}, save: worker}\n"
        "      reply: 'ASSIGNED {worker}'\n---\nA mock supervisor.\n"
    ),
}


@dataclass
class Env:
    cao: CaoServer
    model: ScriptedModelServer
    work: Path


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    codex = npm_binary(PACKAGE, VERSION, "codex")
    root = tmp_path_factory.mktemp("codex")
    work = root / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)  # a git dir: Codex's trust screen trigger
    with ScriptedModelServer() as model:
        model.set_script("codex", RULES)
        cao = real_cli_server(
            root, [codex], {"OPENAI_BASE_URL": model.base_url("codex", "/v1"), "OPENAI_API_KEY": "scripted"}
        )
        store = cao.home / "agent-store"
        store.mkdir(parents=True, exist_ok=True)
        for name, text in PROFILES.items():
            (store / f"{name}.md").write_text(text)
        cao.start()
        try:
            yield Env(cao, model, work)
        finally:
            cao.cleanup()


def create(env: Env, profile: str = "codex_dev", yolo: bool = True) -> dict:
    # The provider comes from the profile's frontmatter.
    resp = env.cao.client.post(
        "/sessions", params={"agent_profile": profile, "working_directory": str(env.work), "yolo": yolo}
    )
    assert resp.status_code == 201, resp.text
    return resp.json()


def terminal(env: Env, tid: str) -> dict:
    return env.cao.client.get(f"/terminals/{tid}").json()


def last_reply(env: Env, tid: str) -> str:
    return env.cao.client.get(f"/terminals/{tid}/output", params={"mode": "last"}).json()["output"]


def reply_so_far(env: Env, tid: str) -> str:
    """The last reply, or "" while there is none yet (a turn still running)."""
    resp = env.cao.client.get(f"/terminals/{tid}/output", params={"mode": "last"})
    return resp.json()["output"] if resp.status_code == 200 else ""


def processes_of(tid: str, home: str | None = None) -> list[psutil.Process]:
    """Every process started for terminal `tid` (the pane's env carries CAO_TERMINAL_ID), and,
    given the test's HOME, any Codex app-server daemon of that HOME (it might drop the variable)."""
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            daemon = home is not None and env.get("HOME") == home and "app-server" in proc.cmdline()
            if env.get("CAO_TERMINAL_ID") == tid or daemon:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def delete_session(env: Env, term: dict) -> None:
    env.cao.client.delete(f"/sessions/{term['session_name']}")


def test_back_to_back_turns_each_get_their_own_reply(env: Env):
    """A turn sent the moment the previous one completed: the screen still shows the old
    answer under the new echo, and only Codex's hooks may say when the new turn is done."""
    term = create(env)
    tid = term["id"]
    try:
        for prompt, reply in (
            ("please say hello", HELLO),
            ("please print the marker", "The command printed the marker."),
            ("please say hello", HELLO),
            ("please print the marker", "The command printed the marker."),
        ):
            resp = env.cao.client.post(
                "/terminals/run-step",
                json={"agent": "codex_dev", "prompt": prompt, "reuse_terminal_id": tid, "timeout": 60},
                timeout=90,
            )
            assert resp.status_code == 200, resp.text
            assert resp.json()["last_message"] == reply, (prompt, resp.json())
        assert terminal(env, tid)["status_source"] == "hook:Stop"
    finally:
        delete_session(env, term)


def test_a_session_resumes_a_conversation_codex_recorded(env: Env):
    """POST /sessions with `resume_session_id` (what `cao launch --resume-session-id` sends): Codex
    starts as `codex resume ID` and sends the model the earlier turn with the new one."""

    def run(tid: str, prompt: str) -> str:
        resp = env.cao.client.post(
            "/terminals/run-step",
            json={"agent": "codex_dev", "prompt": prompt, "reuse_terminal_id": tid, "timeout": 60},
            timeout=90,
        )
        assert resp.status_code == 200, resp.text
        return resp.json()["last_message"]

    home = Path(env.cao.env["HOME"])
    before = set((home / ".codex" / "sessions").rglob("rollout-*.jsonl"))
    first = create(env)
    assert run(first["id"], "please say hello") == HELLO
    delete_session(env, first)
    # Codex records each conversation as $CODEX_HOME/sessions/Y/M/D/rollout-<time>-<id>.jsonl.
    (recorded,) = set((home / ".codex" / "sessions").rglob("rollout-*.jsonl")) - before
    conversation = re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", recorded.stem)
    assert conversation is not None, recorded
    resp = env.cao.client.post(
        "/sessions",
        params={
            "agent_profile": "codex_dev",
            "working_directory": str(env.work),
            "yolo": True,
            "resume_session_id": conversation.group(0),
        },
    )
    assert resp.status_code == 201, resp.text
    resumed = resp.json()
    try:
        assert run(resumed["id"], "please print the marker") == "The command printed the marker."
        asked = [r for r in env.model.requests("codex") if "please print the marker" in r["user_text"]]
        assert "please say hello" in json.dumps(asked[-1]["body"]), asked[-1]["body"]
    finally:
        delete_session(env, resumed)


def test_last_reply_is_the_exact_text_from_the_stop_hook(env: Env):
    """The screen wraps long lines and renders markdown; Codex's Stop hook carries the
    answer as the model wrote it, and that is what `mode=last` returns."""
    term = create(env)
    tid = term["id"]
    try:
        resp = env.cao.client.post(
            "/terminals/run-step",
            json={"agent": "codex_dev", "prompt": "please answer at length", "reuse_terminal_id": tid, "timeout": 60},
            timeout=90,
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["last_message"] == LONG_MARKDOWN
        assert last_reply(env, tid) == LONG_MARKDOWN
        env.cao.send(tid, "please say hello")  # the next turn replaces it
        env.cao.wait_status(tid, "completed", timeout=60)
        wait_until(lambda: last_reply(env, tid) == HELLO, 10, message="the new turn's reply")
    finally:
        delete_session(env, term)


def test_spawn_text_and_shell_turns(env: Env):
    term = create(env)
    tid = term["id"]
    try:
        assert term["status"] == "idle"
        env.cao.send(tid, "please say hello")
        env.cao.wait_status(tid, "completed", timeout=60)
        assert terminal(env, tid)["status_source"] == "hook:Stop"  # the CLI's own signal, not the screen
        assert last_reply(env, tid) == HELLO
        env.cao.send(tid, "please print the marker")
        env.cao.wait_status(tid, "completed", timeout=60)
        assert last_reply(env, tid) == "The command printed the marker."
        turn = [r for r in env.model.requests("codex") if r["user_text"] == "please print the marker"]
        call = turn[0]["reply"]["tool"]
        assert call["name"] == "exec_command" and "marker-42" in call["args"]["cmd"]
        assert "marker-42" in turn[-1]["tool_result"]  # the command really ran
        # The system prompt reached the model as developer instructions.
        body = next(r["body"] for r in env.model.requests("codex") if r["user_text"] == "please say hello")
        assert "You are a careful developer." in str(body["input"])
    finally:
        delete_session(env, term)


# --- permission prompt, answered through cao-mcp-server --------------------------------------


@asynccontextmanager
async def mcp_session(cao: CaoServer) -> AsyncIterator[ClientSession]:
    script = Path(sys.executable).parent / "cao-mcp-server"
    command, args = (
        (str(script), []) if script.exists() else (sys.executable, ["-m", "cli_agent_orchestrator.mcp_server.relay"])
    )
    child_env = {k: v for k, v in cao.env.items() if k != "CAO_TERMINAL_ID"}
    params = StdioServerParameters(command=command, args=args, env=child_env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@pytest.mark.anyio
async def test_permission_prompt_is_waiting_and_answered_through_mcp(env: Env):
    term = create(env, "codex_asks", yolo=False)  # no bypass, prompts kept: Codex asks before an escalated command
    tid = term["id"]
    try:
        (env.work / "created.txt").unlink(missing_ok=True)
        env.cao.send(tid, "please touch the file")
        env.cao.wait_status(tid, "waiting_user_answer", timeout=60)
        assert "Codex asks" in terminal(env, tid)["status_reason"]
        async with mcp_session(env.cao) as session:
            result = await session.call_tool(
                "answer_user_prompt", {"terminal_id": tid, "answer": "y"}, read_timeout_seconds=60
            )
        assert result.structured_content["success"] is True, result
        env.cao.wait_status(tid, "completed", timeout=60)
        assert last_reply(env, tid) == "Created it."
        assert (env.work / "created.txt").exists()
    finally:
        delete_session(env, term)


# --- exit and delete leave nothing behind ------------------------------------------------------


def test_exit_then_delete_leaves_no_process(env: Env):
    term = create(env)
    tid = term["id"]
    env.cao.send(tid, "please say hello")
    env.cao.wait_status(tid, "completed", timeout=60)
    programs = {Path(arg).name for p in processes_of(tid) for arg in p.cmdline()[:2]}
    # The CLI, and no MCP server process: it reaches cao-server's /mcp itself.
    assert "codex" in programs and "cao-mcp-server" not in programs, programs
    assert env.cao.client.post(f"/terminals/{tid}/exit").status_code == 200
    # `/quit` ends the CLI; the pane's process exits, which cao reports.
    wait_until(lambda: terminal(env, tid)["status"] == "error", timeout=30, message="codex exited")
    # tmux 3.3a sometimes never learns a dead pane's exit status; cao then says so.
    assert "the agent process exited (" in terminal(env, tid)["status_reason"]
    delete_session(env, term)
    wait_until(lambda: not processes_of(tid, env.cao.env["HOME"]), timeout=20, message=f"no process of {tid} left")


def test_delete_while_running_leaves_no_process(env: Env):
    term = create(env)
    tid = term["id"]
    env.cao.send(tid, "please say hello")
    env.cao.wait_status(tid, "completed", timeout=60)
    assert len(processes_of(tid)) >= 2  # the npm launcher (node) and the native CLI at least
    assert env.cao.client.delete(f"/terminals/{tid}").status_code == 200
    wait_until(lambda: not processes_of(tid, env.cao.env["HOME"]), timeout=20, message=f"no process of {tid} left")
    delete_session(env, term)


# --- orchestration through cao-mcp-server -----------------------------------------------------


def test_codex_supervisor_hands_off_to_a_mock_worker(env: Env):
    term = create(env, "codex_asks", yolo=False)  # cao-mcp-server's tools are pre-approved even then
    tid = term["id"]
    try:
        env.cao.send(tid, "please delegate the sum")
        env.cao.wait_status(tid, "completed", timeout=90)
        assert last_reply(env, tid) == "The worker has answered."
        results = [r["tool_result"] for r in env.model.requests("codex") if r["user_text"] == "please delegate the sum"]
        assert "MOCK: add 2 and 3" in results[-1]
        assert "Successfully handed off to mock_worker" in results[-1]
        # The worker was torn down after the handoff.
        terms = env.cao.client.get(f"/sessions/{term['session_name']}").json()["terminals"]
        assert [t["id"] for t in terms] == [tid]
    finally:
        delete_session(env, term)


def test_codex_worker_of_a_mock_supervisor(env: Env):
    boss = create(env, "mock_boss")
    try:
        env.cao.send(boss["id"], "hand off to codex")
        env.cao.wait_status(boss["id"], "completed", timeout=90)
        assert last_reply(env, boss["id"]) == "FINAL Hi boss, codex here."
    finally:
        delete_session(env, boss)


def test_assigned_codex_worker_reports_back(env: Env):
    boss = create(env, "mock_boss")
    try:
        env.cao.send(boss["id"], "assign to codex")
        env.cao.wait_status(boss["id"], "completed", timeout=60)

        def reported() -> bool:
            inbox = env.cao.client.get(f"/terminals/{boss['id']}/inbox/messages", params={"limit": 100}).json()
            return any(m["message"].startswith("codex result 42") for m in inbox)

        wait_until(reported, timeout=90, message="the codex worker's send_message")
    finally:
        delete_session(env, boss)


# --- cao's MCP endpoint (/mcp, over HTTP) ----------------------------------------------------------

FIRST = "first of all, delegate the sum"


def test_a_first_message_that_hands_off_does_so_on_the_first_try(env: Env):
    """The first message is typed only once Codex has listed cao's tools on /mcp: the model's
    first request offers handoff, and it is called once."""
    with EventStream(env.cao, "terminal.#") as events:
        resp = env.cao.client.post(
            "/sessions",
            params={"agent_profile": "codex_dev", "working_directory": str(env.work), "yolo": True},
            json={"initial_message": FIRST},
        )
        assert resp.status_code == 201, resp.text
        term = resp.json()
        tid = term["id"]
        events.until(lambda f: f.event == "InputSubmitted" and f.data["terminal_id"] == tid, timeout=60)
    try:
        order = [f.event for f in events.frames if f.data.get("terminal_id") == tid and f.event != "TerminalOutput"]
        assert "McpListed" in order and order.index("McpListed") < order.index("InputSubmitted"), order
        wait_until(lambda: reply_so_far(env, tid) == "The worker has answered.", 90, message="the handoff's answer")
        turn = [r for r in env.model.requests("codex") if r["user_text"] == FIRST and not r["side"]]
        cao_tools = {
            tool["name"]
            for group in turn[0]["body"]["tools"]
            if group.get("type") == "namespace" and group["name"] == "mcp__cao_mcp_server"
            for tool in group["tools"]
        }
        assert "handoff" in cao_tools, turn[0]["body"]["tools"]
        calls = [r["reply"]["tool"]["name"] for r in turn if (r["reply"] or {}).get("tool")]
        assert calls == ["handoff"], calls
        assert "MOCK: add 2 and 3" in turn[-1]["tool_result"]
    finally:
        delete_session(env, term)


def test_a_tool_call_after_cao_server_was_killed_and_restarted_is_done_once(env: Env):
    inbox = create(env, "mock_inbox")
    term = create(env)  # ready: Codex has listed cao's tools

    def report(marker: str) -> None:
        env.cao.send(term["id"], f"please report {marker} to {inbox['id']}")
        wait_until(lambda: reply_so_far(env, term["id"]) == f"Reported {marker}.", 60, message=f"{marker} reported")

    try:
        report("marker-87")
        try:
            env.cao.kill9()
        finally:
            env.cao.start()
        env.cao.wait_status(term["id"], {"idle", "completed"}, timeout=30)  # adopted again
        report("marker-88")
        messages = env.cao.client.get(f"/terminals/{inbox['id']}/inbox/messages", params={"limit": 100}).json()
        assert [m["message"].split("\n")[0] for m in messages] == ["marker-87", "marker-88"]  # each done once
    finally:
        delete_session(env, term)
        delete_session(env, inbox)


def test_the_credential_is_in_no_argv_and_no_file_and_its_config_goes_with_the_agent(env: Env):
    term = create(env)
    tid = term["id"]
    script = env.cao.home / "tmp" / tid / "codex-launch.sh"
    try:
        env.cao.send(tid, "please print the marker")  # a shell command: Codex snapshots its shell
        env.cao.wait_status(tid, "completed", timeout=60)
        secret = agent_credential(env.cao, tid)
        procs = processes_of(tid)
        assert procs and all(p.environ().get("CAO_MCP_TOKEN") == secret for p in procs)  # it is in the env
        assert argv_holding(secret, procs) == []
        # HOME (with $CODEX_HOME/shell_snapshots), the work dir and the cao home.
        assert files_holding(secret, env.work.parent) == []
        argv = " ".join(next(p.cmdline() for p in procs if p.name() == "codex" and "-c" in p.cmdline()))
        assert f'"url" = "{env.cao.url}/mcp"' in argv and '"X-CAO-Agent-Token" = "CAO_MCP_TOKEN"' in argv, argv
        assert script.stat().st_mode & 0o777 == 0o700
    finally:
        delete_session(env, term)
    wait_until(lambda: not script.parent.exists(), 20, message="the terminal's directory removed")


# --- faults ---------------------------------------------------------------------------------------


def test_missing_binary_is_refused_by_name(tmp_path: Path):
    path = os.pathsep.join(
        d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "codex").exists()
    )
    cao = real_cli_server(tmp_path, [], {"PATH": path})
    cao.start()
    try:
        resp = cao.client.post("/sessions", params={"agent_profile": "developer", "provider": "codex"})
        assert resp.status_code == 400 and "`codex`" in resp.json()["detail"], resp.text
        assert cao.client.get("/sessions").json() == []
        assert cao.client.get("/terminals").json() == []
    finally:
        cao.cleanup()


def test_crash_at_start_is_reported_and_cleaned_up(env: Env):
    """A CLI that exits while starting is a worker error (502, kind "error"), not a hang (504)
    and not a server fault (500): the answer names the exit and the CLI's own complaint."""
    resp = env.cao.client.post(
        "/sessions", params={"agent_profile": "codex_broken", "provider": "codex", "working_directory": str(env.work)}
    )
    assert resp.status_code == 502, resp.text
    detail = resp.json()["detail"]
    assert detail["kind"] == "error" and detail["terminal_id"], detail
    assert detail["message"].startswith("codex agent failed to start: "), detail
    assert "exited" in detail["message"] and "not-a-policy" in detail["message"], detail
    assert all(t["agent_profile"] != "codex_broken" for t in env.cao.client.get("/terminals").json())


def test_an_unexpected_dialog_at_start_is_reported_not_hung_on(env: Env):
    term = create(env, "codex_untrusted")  # returns at once instead of waiting out the start-up timeout
    try:
        assert term["status"] == "waiting_user_answer"
        assert "trust" in terminal(env, term["id"])["status_reason"]
    finally:
        delete_session(env, term)
    wait_until(lambda: not processes_of(term["id"]), timeout=20, message="no process left")


def test_a_failed_turn_is_an_error_and_the_next_turn_recovers(env: Env):
    term = create(env, "codex_fragile")
    tid = term["id"]
    try:
        env.cao.send(tid, "please break now")
        env.cao.wait_status(tid, "error", timeout=60)  # no Stop hook comes: the screen tells
        assert terminal(env, tid)["status_reason"]
        env.cao.send(tid, "please say hello")
        env.cao.wait_status(tid, "completed", timeout=60)
        assert last_reply(env, tid) == HELLO
    finally:
        delete_session(env, term)


def _name(proc: psutil.Process) -> str | None:
    """A process's name, None when it ended meanwhile (a short-lived child of the agent: seen once)."""
    try:
        return proc.name()
    except psutil.NoSuchProcess:
        return None


def test_death_mid_turn_is_an_error(env: Env):
    term = create(env)
    tid = term["id"]
    try:
        env.cao.send(tid, "please take your time")
        env.cao.wait_status(tid, "processing", timeout=30)
        cli = [p for p in processes_of(tid) if _name(p) == "codex"]
        assert cli, [p.cmdline() for p in processes_of(tid)]
        for proc in cli:
            proc.send_signal(signal.SIGKILL)
        env.cao.wait_status(tid, "error", timeout=30)
        assert "exited" in terminal(env, tid)["status_reason"]
    finally:
        delete_session(env, term)
    wait_until(lambda: not processes_of(tid, env.cao.env["HOME"]), timeout=20, message=f"no process of {tid} left")


def test_a_long_paste_interrupted_by_a_crash_is_submitted_once(env: Env):
    """Codex shows a long paste as `[Pasted Content N chars]`: after a crash between paste and
    Enter, cao presses Enter; the model gets the message once."""
    term = create(env)
    try:
        long_paste_survives_a_crash(
            env.cao,
            term["id"],
            lambda marker: sum(r["user_text"].count(marker) for r in env.model.requests("codex") if not r["side"]),
        )
    finally:
        delete_session(env, term)
