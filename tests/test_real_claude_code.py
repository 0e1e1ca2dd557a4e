"""The real Claude Code CLI (pinned, installed from npm by the test set-up) in cao
terminals, confined to a temporary HOME, against the scripted model server.

One cao-server serves the module; every test makes its own terminals and checks
that none of their processes outlive them. The test prepares its fake HOME's
`~/.claude.json` with the first-run flag only (as a user who has run Claude
before): folder trust is left to the provider's start-up dialog answer.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path

import anyio
import psutil
import pytest
from conftest import CaoServer, cli, wait_until
from crash_support import long_paste_survives_a_crash
from credential_support import agent_credential, argv_holding, files_holding
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

# Autouse: without tmux every test here skips, or fails under CI (CAO_REQUIRE_REAL_CLIS).
from real_cli_support import (
    isolated_home_env,
    npm_binary,
    real_cli_prerequisites,  # noqa: F401
    real_cli_server,
    store_profiles,
)
from sse_support import EventStream

from cao_testkit.scripted_model.harness import ScriptedModelServer

VERSION = "2.1.197"
HELLO = "Hello from the scripted model."
SCRIPT = [
    {"match": "say hello", "reply": HELLO},
    {
        "match": "list the marker",
        "steps": [
            {"tool": "shell", "args": {"command": "echo marker-42"}},
            {"text": "The command printed {tool_result}."},
        ],
    },
    {
        "match": "create the file",
        "steps": [{"tool": "shell", "args": {"command": "touch created.txt"}}, {"text": "Created it."}],
    },
    {
        "match": "create another",
        "steps": [{"tool": "shell", "args": {"command": "touch other.txt"}}, {"text": "Created another."}],
    },
    {"match": "take your time", "steps": [{"delay_ms": 60000}, {"text": "late"}]},
    {
        "match": "delegate the greeting",
        "steps": [
            {
                "tool": "mcp:cao-mcp-server:handoff",
                "args": {"agent_profile": "mock_worker", "message": "greet the team"},
            },
            {"text": "Handoff finished."},
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
        "match": "report back the marker",
        "steps": [
            {"tool": "mcp:cao-mcp-server:send_message", "args": {"message": "worker result marker-77"}},
            {"text": "Sent."},
        ],
    },
]
PROFILES = {
    "claude_dev": "---\nname: claude_dev\nprovider: claude_code\n---\nYou are the cao test developer ZX81.\n",
    # permissionMode: default keeps Claude's permission prompts inside the tool set.
    "claude_asks": "---\nname: claude_asks\nprovider: claude_code\npermissionMode: default\n---\n"
    "You are the cao test developer ZX81.\n",
    "claude_worker": "---\nname: claude_worker\nprovider: claude_code\npermissionMode: bypassPermissions\n---\n"
    "You are a worker.\n",
    "mock_worker": "---\nname: mock_worker\nprovider: mock_cli\n---\nA mock worker.\n",
    "mock_inbox": "---\nname: mock_inbox\nprovider: mock_cli\n---\nReceives messages.\n",
    "mock_sup": "---\nname: mock_sup\nprovider: mock_cli\nmock:\n  rules:\n"
    "    - match: 'hand it over'\n      steps: [{tool: handoff, args: {agent_profile: claude_worker,"
    " message: 'say hello'}, save: out}]\n      reply: 'SUP GOT: {out}'\n"
    "    - match: 'assign it'\n      steps: [{tool: assign, args: {agent_profile: claude_worker,"
    " message: 'report back the marker'}, save: worker}]\n      reply: 'ASSIGNED {worker}'\n"
    "    - match: '(marker-\\d+)'\n      reply: 'SUP RECEIVED {g1}'\n---\nA mock supervisor.\n",
}


@pytest.fixture(scope="module")
def wait_for_mcp_shim():
    """cao types into a Claude agent only once Claude has listed cao's tools on /mcp, but Claude
    2.1.197 hands a server's tools to the model only after it has processed them and listed the
    server's prompts and resources too: 0.01-0.5 s later on a loaded 2-core machine. A message in
    that window is sent with a `WaitForMcpServers` tool instead of cao's, and a real model calls
    it. The scripted model does not know that tool (a proposed change to
    cao_testkit/scripted_model/tools.py), so this module teaches it: a missing MCP tool is first
    waited for, like a deferred one is searched."""
    from cao_testkit.scripted_model import conversation, engine
    from cao_testkit.scripted_model.tools import Call

    original = engine.resolve

    def resolve(step_name, args, tools, searched):
        names = {t.full_name for t in tools}
        if step_name.startswith("mcp:") and not searched and "WaitForMcpServers" in names:
            _, server, tool = step_name.split(":", 2)
            # (Without this the bare-name fallback would pick Claude's own `SendMessage`.)
            if f"mcp__{server}__{tool}" not in names:
                return Call("WaitForMcpServers", {"servers": [server]}, auxiliary=True)
        return original(step_name, args, tools, searched)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "resolve", resolve)
        patch.setattr(conversation, "SEARCH_TOOLS", (*conversation.SEARCH_TOOLS, "WaitForMcpServers"))
        yield


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, wait_for_mcp_shim):
    binary = npm_binary("@anthropic-ai/claude-code", VERSION, "claude")
    root = tmp_path_factory.mktemp("claude")
    with ScriptedModelServer() as model:
        model.set_script("claude", SCRIPT)
        cao = real_cli_server(root, [binary], model.cli_env("claude"))
        home = Path(cao.env["HOME"])
        (home / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True}))
        store_profiles(cao, PROFILES)
        cao.start()
        try:
            yield cao, model, root
        finally:
            cao.cleanup()


def workdir(root: Path, name: str) -> str:
    path = root / "work" / name
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def env_of(proc: psutil.Process) -> dict:
    try:
        return proc.environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return {}


def agent_processes(terminal_id: str) -> list[psutil.Process]:
    return [p for p in psutil.process_iter() if env_of(p).get("CAO_TERMINAL_ID") == terminal_id]


def delete_and_check(cao: CaoServer, terminal_id: str) -> None:
    assert cao.client.delete(f"/terminals/{terminal_id}").status_code == 200
    wait_until(
        lambda: not agent_processes(terminal_id), timeout=30, message=f"no process of terminal {terminal_id} left"
    )


def detail(cao: CaoServer, terminal_id: str) -> dict:
    return cao.client.get(f"/terminals/{terminal_id}").json()


def last_output(cao: CaoServer, terminal_id: str) -> str:
    resp = cao.client.get(f"/terminals/{terminal_id}/output", params={"mode": "last"})
    return resp.json()["output"] if resp.status_code == 200 else ""


def turn(cao: CaoServer, terminal_id: str, message: str, wanted: str = "completed", timeout: float = 60) -> dict:
    cao.send(terminal_id, message)
    wait_until(
        lambda: detail(cao, terminal_id)["status"] == wanted and last_output(cao, terminal_id) != "",
        timeout=timeout,
        message=f"{terminal_id} {wanted} after {message!r}",
    )
    return detail(cao, terminal_id)


def main_requests(model: ScriptedModelServer, text: str) -> list[dict]:
    return [r for r in model.requests("claude") if not r["side"] and text in r["user_text"]]


# --- one agent ---------------------------------------------------------------------------
def test_spawn_text_and_shell_turns_exit_and_delete(env) -> None:
    cao, model, root = env
    work = workdir(root, "basic")
    term = cao.create_session("claude_dev", provider="claude_code", yolo="true", working_directory=work)
    tid = term["id"]
    assert term["status"] == "idle"
    # The folder-trust dialog was shown and answered by the provider (Claude recorded it).
    projects = json.loads((Path(cao.env["HOME"]) / ".claude.json").read_text())["projects"]
    assert projects[work]["hasTrustDialogAccepted"] is True

    after = turn(cao, tid, "say hello")
    assert last_output(cao, tid) == HELLO
    assert after["status_source"] == "hook:Stop"
    request = main_requests(model, "say hello")[-1]
    assert "cao test developer ZX81" in json.dumps(request["body"]["system"])  # the profile's prompt

    turn(cao, tid, "list the marker")
    assert last_output(cao, tid) == "The command printed marker-42."
    assert main_requests(model, "list the marker")[-1]["tool_result"].strip() == "marker-42"

    assert agent_processes(tid)  # claude carries the terminal's id (it reaches /mcp itself: no relay)
    assert cao.client.post(f"/terminals/{tid}/exit").status_code == 200  # types /exit
    cao.wait_status(tid, "error", timeout=30)  # the pane's process ended
    assert "exited" in detail(cao, tid)["status_reason"]
    delete_and_check(cao, tid)


def test_launch_resumes_a_conversation_claude_recorded(env) -> None:
    """`cao launch --resume-session-id` with the id Claude gave its conversation: the resumed agent
    sends the model the earlier turn with the new one."""
    cao, model, root = env
    work = workdir(root, "resume")
    first = cao.create_session("claude_dev", provider="claude_code", yolo="true", working_directory=work)
    turn(cao, first["id"], "say hello")
    delete_and_check(cao, first["id"])
    # Claude keeps each conversation in ~/.claude/projects/<its working directory>/<session id>.jsonl.
    recorded = [
        f
        for f in (Path(cao.env["HOME"]) / ".claude" / "projects").glob("*resume/*.jsonl")
        if "say hello" in f.read_text()
    ]
    assert len(recorded) == 1, recorded
    launched = cli(
        cao, "launch", "--agents", "claude_dev", "--provider", "claude_code", "--headless", "--yolo", "--json",
        "--working-directory", work, "--resume-session-id", recorded[0].stem,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    resumed = json.loads(launched.stdout)["id"]
    turn(cao, resumed, "list the marker")
    history = json.dumps(main_requests(model, "list the marker")[-1]["body"]["messages"])
    assert "say hello" in history and HELLO in history
    delete_and_check(cao, resumed)


def answer_user_prompt(cao: CaoServer, terminal_id: str, answer: str) -> dict:
    """cao's answer_user_prompt through the stdio relay, as the user (official MCP client SDK)."""

    async def call() -> dict:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "cli_agent_orchestrator.mcp_server.relay"],
            env={k: v for k, v in cao.env.items() if k != "CAO_TERMINAL_ID"},
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("answer_user_prompt", {"terminal_id": terminal_id, "answer": answer})
            return result.structured_content

    return anyio.run(call)


def test_permission_prompts_answered_through_mcp(env) -> None:
    cao, _, root = env
    work = workdir(root, "permission")
    tid = cao.create_session("claude_asks", provider="claude_code", working_directory=work)["id"]
    cao.send(tid, "create the file")
    cao.wait_status(tid, "waiting_user_answer", timeout=60)
    assert detail(cao, tid)["status_reason"] == "permission prompt"
    assert not Path(work, "created.txt").exists()
    assert answer_user_prompt(cao, tid, "yes")["success"] is True  # the provider turns it into the key "1"
    wait_until(lambda: detail(cao, tid)["status"] == "completed", timeout=60, message="approved turn done")
    assert Path(work, "created.txt").exists() and last_output(cao, tid) == "Created it."

    cao.send(tid, "create another")
    wait_until(lambda: detail(cao, tid)["status_reason"] == "permission prompt", timeout=60, message="2nd prompt")
    assert answer_user_prompt(cao, tid, "no")["success"] is True  # → "3. No": Claude stops and asks
    wait_until(lambda: "interrupted" in (detail(cao, tid)["status_reason"] or ""), timeout=30, message="refused")
    assert detail(cao, tid)["status"] == "waiting_user_answer" and not Path(work, "other.txt").exists()
    delete_and_check(cao, tid)


def test_death_mid_turn_is_an_error(env) -> None:
    cao, _, root = env
    tid = cao.create_session("claude_worker", provider="claude_code", working_directory=workdir(root, "death"))["id"]
    cao.send(tid, "take your time")
    cao.wait_status(tid, "processing", timeout=30)
    claude = [p for p in agent_processes(tid) if "claude" in p.name()]
    assert claude, [p.name() for p in agent_processes(tid)]
    for proc in claude:
        os.kill(proc.pid, signal.SIGKILL)  # a process this test's terminal started
    cao.wait_status(tid, "error", timeout=30)
    assert "exited" in detail(cao, tid)["status_reason"]
    delete_and_check(cao, tid)


# --- orchestration ----------------------------------------------------------------------------
def test_claude_supervisor_hands_off_to_a_mock_worker(env) -> None:
    cao, model, root = env
    sup = cao.create_session("claude_worker", provider="claude_code", working_directory=workdir(root, "sup"))["id"]
    turn(cao, sup, "delegate the greeting", timeout=90)
    assert last_output(cao, sup) == "Handoff finished."
    result = json.loads(main_requests(model, "delegate the greeting")[-1]["tool_result"])
    assert result["success"] is True and result["output"].strip() == "MOCK: greet the team"
    assert cao.client.get(f"/terminals/{result['terminal_id']}").status_code == 404  # worker torn down
    delete_and_check(cao, sup)


def test_claude_worker_of_a_mock_supervisor(env) -> None:
    cao, _, root = env
    sup = cao.create_session("mock_sup", provider="mock_cli", working_directory=workdir(root, "mocksup"))["id"]
    # handoff: cao starts a Claude worker, waits for its answer, tears it down.
    turn(cao, sup, "hand it over", timeout=90)
    assert last_output(cao, sup) == f"SUP GOT: {HELLO}"
    assert [t["id"] for t in cao.client.get("/terminals").json()] == [sup]
    # assign: the Claude worker answers by send_message, which reaches the supervisor's inbox.
    turn(cao, sup, "assign it", timeout=30)
    worker = re.fullmatch(r"ASSIGNED ([0-9a-f]{8})", last_output(cao, sup)).group(1)
    wait_until(
        lambda: last_output(cao, sup) == "SUP RECEIVED marker-77",
        timeout=90,
        message="the worker's message in the supervisor",
    )
    assert detail(cao, worker)["caller_id"] == sup
    delete_and_check(cao, worker)
    delete_and_check(cao, sup)


# --- cao's MCP endpoint (/mcp, over HTTP) --------------------------------------------------------
FIRST = "first of all, delegate the greeting"  # its own words: the model's log is the module's


def test_a_first_message_that_hands_off_does_so_on_the_first_try(env) -> None:
    """The first message is typed only once Claude has listed cao's tools on /mcp; the model
    calls handoff once and gets the worker's answer. (Claude may still offer WaitForMcpServers
    in that first request, rarely: see wait_for_mcp_shim.)"""
    cao, model, root = env
    with EventStream(cao, "terminal.#") as events:
        resp = cao.client.post(
            "/sessions",
            params={"agent_profile": "claude_worker", "working_directory": workdir(root, "first")},
            json={"initial_message": FIRST},
        )
        assert resp.status_code == 201, resp.text
        sup = resp.json()["id"]
        events.until(lambda f: f.event == "InputSubmitted" and f.data["terminal_id"] == sup, timeout=60)
    order = [f.event for f in events.frames if f.data.get("terminal_id") == sup and f.event != "TerminalOutput"]
    assert "McpListed" in order and order.index("McpListed") < order.index("InputSubmitted"), order
    wait_until(lambda: last_output(cao, sup) == "Handoff finished.", timeout=90, message="the handoff's answer")
    turn = main_requests(model, FIRST)
    calls = [r["reply"]["tool"]["name"] for r in turn if (r["reply"] or {}).get("tool")]
    assert [c for c in calls if c.startswith("mcp__cao-mcp-server__")] == ["mcp__cao-mcp-server__handoff"], calls
    result = json.loads(turn[-1]["tool_result"])
    assert result["success"] is True and result["output"].strip() == "MOCK: greet the team"
    delete_and_check(cao, sup)


def test_a_tool_call_after_cao_server_was_killed_and_restarted_is_done_once(env) -> None:
    """A tool call first: Claude takes the tools it listed only once it has also listed prompts
    and resources, and a server killed in between can leave it without them for good."""
    cao, _, root = env
    inbox = cao.create_session("mock_inbox", provider="mock_cli")["id"]
    tid = cao.create_session("claude_worker", provider="claude_code", working_directory=workdir(root, "kill9"))["id"]
    turn(cao, tid, f"report marker-87 to {inbox}")
    try:
        cao.kill9()  # the agent's MCP client is left mid-session (its SSE stream drops)
    finally:
        cao.start()
    cao.wait_status(tid, {"idle", "completed"}, timeout=30)  # adopted again, not an error
    turn(cao, tid, f"report marker-88 to {inbox}")
    assert last_output(cao, tid) == "Reported marker-88."
    messages = cao.client.get(f"/terminals/{inbox}/inbox/messages", params={"limit": 100}).json()
    assert [m["message"].split("\n")[0] for m in messages] == ["marker-87", "marker-88"]  # each done once
    delete_and_check(cao, tid)
    delete_and_check(cao, inbox)


def test_the_credential_is_in_no_argv_and_no_file_and_its_config_goes_with_the_agent(env) -> None:
    cao, _, root = env
    tid = cao.create_session("claude_worker", provider="claude_code", working_directory=workdir(root, "cred"))["id"]
    turn(cao, tid, "report back the marker")  # a tool call: Claude's MCP log has been written
    secret = agent_credential(cao, tid)
    procs = agent_processes(tid)
    assert procs and all(env_of(p).get("CAO_MCP_TOKEN") == secret for p in procs)  # it is in the env
    assert argv_holding(secret, procs) == []
    # HOME, work dirs and the cao home. (Claude logs an HTTP server's headers, redacting only
    # Authorization, to ~/.cache/claude-cli-nodejs/.)
    assert files_holding(secret, root) == []
    config = cao.home / "tmp" / tid / "mcp.json"
    assert config.stat().st_mode & 0o777 == 0o600
    server = json.loads(config.read_text())["mcpServers"]["cao-mcp-server"]
    assert server["type"] == "http" and server["url"] == f"{cao.url}/mcp"
    assert server["headers"] == {"Authorization": "Bearer ${CAO_MCP_TOKEN}"}  # Claude expands it
    delete_and_check(cao, tid)
    assert not config.parent.exists()


# --- faults ---------------------------------------------------------------------------------
def test_missing_binary_is_refused_by_name(tmp_path: Path) -> None:
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if not Path(d, "claude").exists())
    cao = CaoServer(tmp_path / "cao", {**isolated_home_env(tmp_path), "PATH": path}).start()
    try:
        resp = cao.client.post("/sessions", params={"agent_profile": "developer", "provider": "claude_code"})
        assert resp.status_code == 400 and "`claude`" in resp.text, resp.text
        assert cao.client.get("/terminals").json() == []
    finally:
        cao.cleanup()


FAKE_CLAUDE = """#!/bin/sh
# Stands in for a broken install: crashes in a directory named crash, else hangs on a screen nobody knows.
case "$(basename "$PWD")" in
  crash) echo "claude: fatal: cannot start"; exit 3 ;;
  *) echo "Unexpected question nobody scripted? [y/N]"; exec sleep 600 ;;
esac
"""


def test_crash_and_hang_at_start_fail_the_create_and_leave_nothing(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").write_text(FAKE_CLAUDE)
    (bin_dir / "claude").chmod(0o755)
    extra = {
        **isolated_home_env(tmp_path),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "CAO_PROVIDER_INIT_TIMEOUT": "5",
    }
    cao = CaoServer(tmp_path / "cao", extra).start()
    try:
        # Only "exited" for the crash: its last screen and exit code can lose the race with the
        # pane's death in the shared backend (seen: no exit code from tmux, an empty last screen).
        for name, code, words in (
            ("crash", 502, ["claude_code agent failed to start", "exited"]),
            ("hang", 504, ["did not become ready within 5s", "Unexpected question"]),
        ):
            (tmp_path / name).mkdir()
            resp = cao.client.post(
                "/sessions",
                params={
                    "agent_profile": "developer",
                    "provider": "claude_code",
                    "working_directory": str(tmp_path / name),
                },
            )
            assert resp.status_code == code and all(w in resp.text for w in words), resp.text
            assert cao.client.get("/terminals").json() == []
        wait_until(
            lambda: (
                not [
                    p
                    for p in psutil.process_iter()
                    if "CAO_TERMINAL_ID" in (env := env_of(p)) and env.get("CAO_HOME_DIR") == str(cao.home)
                ]
            ),
            timeout=15,
            message="no agent process of this server left",
        )
    finally:
        cao.cleanup()


def test_a_long_paste_interrupted_by_a_crash_is_submitted_once(env) -> None:
    """Claude Code shows a long paste as `[Pasted text #1 +39 lines]`: after a crash between
    paste and Enter, cao presses Enter; the model gets the message once."""
    cao, model, root = env
    term = cao.create_session(
        "claude_dev", provider="claude_code", yolo="true", working_directory=workdir(root, "crash")
    )
    long_paste_survives_a_crash(
        cao,
        term["id"],
        lambda marker: sum(r["user_text"].count(marker) for r in model.requests("claude") if not r["side"]),
    )
    delete_and_check(cao, term["id"])


# --- skills (issue 29): the catalogue in the system prompt, a skill loaded through the tool ---
SKILL_TEXT = "Group the changes by area, newest first. SKILL-TEXT-5150"
SCRIPT.append(
    {
        "match": "load the release skill",
        "steps": [
            {"tool": "mcp:cao-mcp-server:load_skill", "args": {"name": "release-notes"}},
            {"text": "Loaded the skill."},
        ],
    }
)


def test_a_claude_agent_is_shown_the_skill_catalogue_and_loads_a_skill_through_the_tool(env) -> None:
    cao, model, root = env
    skill = cao.home / "skills" / "release-notes"  # as `cao skills add` leaves it
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        f"---\nname: release-notes\ndescription: Write release notes from merged pull requests\n---\n{SKILL_TEXT}\n"
    )
    (skill / "template.md").write_text("## Changes\n")
    term = cao.create_session(
        "claude_dev", provider="claude_code", yolo="true", working_directory=workdir(root, "skills")
    )
    try:
        turn(cao, term["id"], "load the release skill")
        requests = main_requests(model, "load the release skill")
        # The catalogue went into Claude's system prompt, after the profile's own.
        system = json.dumps(requests[0]["body"]["system"])
        assert "cao test developer ZX81" in system
        assert "- release-notes: Write release notes from merged pull requests" in system
        result = json.loads(requests[-1]["tool_result"])
        assert result["success"] is True and result["name"] == "release-notes"
        assert result["text"].startswith(SKILL_TEXT) and str(skill / "template.md") in result["text"]
        assert result["files"] == [str(skill / "template.md")]
    finally:
        delete_and_check(cao, term["id"])
        for path in (skill / "SKILL.md", skill / "template.md", skill):  # later agents see no catalogue
            path.rmdir() if path.is_dir() else path.unlink()
