"""Trust flows down, and a worker that asks anyway (issue 11, parts 2 and 3).

A real cao-server with mock agents in tmux; MCP calls through the official client SDK. The
real CLIs' side (what each CLI is told to allow and refuse) is in test_tool_policy.py and the
real-CLI tests.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cao_support import CaoServer, cli, wait_until
from mcp_support import call, mcp_session
from test_mcp_server import eventually, mcp_env, terminal_ids

REVIEWER = ["@builtin", "fs_read", "fs_list", "@cao-mcp-server"]
DEVELOPER = ["@builtin", "fs_*", "execute_bash", "web_fetch", "@cao-mcp-server"]


def pane_environ(cao: CaoServer, terminal_id: str) -> dict[str, str]:
    """The agent process's environment, as the kernel has it."""
    window = cao.client.get(f"/terminals/{terminal_id}").json()["name"]
    session = cao.client.get(f"/terminals/{terminal_id}").json()["session_name"]
    pid = cao.tmux("display-message", "-p", "-t", f"={session}:={window}", "#{pane_pid}").stdout.strip()
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def inbox(cao: CaoServer, terminal_id: str) -> list[str]:
    return [m["message"] for m in cao.client.get(f"/terminals/{terminal_id}/inbox/messages").json()]


def cao_cli(cao: CaoServer, *args: str) -> subprocess.CompletedProcess:
    return cli(cao, *args)


# --- env_vars, --env, --allowed-tools, --auto-approve ---------------------------------------
def test_env_vars_reach_the_agent_only(cao: CaoServer):
    secret = "s3cr3t-value-4242"
    resp = cao.client.post(
        "/sessions",
        params={"agent_profile": "developer", "provider": "mock_cli"},
        json={"env_vars": {"MY_TOKEN": secret, "EMPTY": ""}},
    )
    assert resp.status_code == 201, resp.text
    term = resp.json()
    env = pane_environ(cao, term["id"])
    assert env["MY_TOKEN"] == secret and env["EMPTY"] == "" and env["CAO_TERMINAL_ID"] == term["id"]
    assert secret not in resp.text and secret not in cao.client.get(f"/terminals/{term['id']}").text
    # Never stored or logged: not in the database, the server log, or the launch files.
    for path in cao.home.rglob("*"):
        if path.is_file() and path.suffix not in (".scrollback", ".log"):  # the pane's own text is the agent's
            assert secret.encode() not in path.read_bytes(), path


@pytest.mark.parametrize(
    ("env_vars", "named"),
    [
        ({"BAD NAME": "x"}, "'BAD NAME' is not a variable name"),
        ({"1X": "x"}, "'1X' is not a variable name"),
        ({"CAO_TERMINAL_ID": "deadbeef"}, "'CAO_TERMINAL_ID' is reserved"),
        ({"cao_hook_secret": "x"}, "is reserved"),
        ({"NUL": "a\u0000b"}, "the value of 'NUL'"),
    ],
)
def test_bad_env_vars_are_400_naming_the_variable_and_nothing_is_created(cao: CaoServer, env_vars, named):
    resp = cao.client.post(
        "/sessions", params={"agent_profile": "developer", "provider": "mock_cli"}, json={"env_vars": env_vars}
    )
    assert resp.status_code == 400, resp.text
    assert named in resp.json()["detail"]
    for value in env_vars.values():
        assert value not in resp.json()["detail"] or value == "x"
    assert cao.client.get("/terminals").json() == [] and cao.client.get("/sessions").json() == []


def test_env_vars_values_are_never_echoed_by_validation(cao: CaoServer):
    resp = cao.client.post(
        "/sessions",
        params={"agent_profile": "developer", "provider": "mock_cli"},
        json={"env_vars": {"TOKEN": ["hunter2-list"]}},
    )
    assert resp.status_code == 422 and "hunter2-list" not in resp.text


def test_launch_with_env_allowed_tools_and_auto_approve(cao: CaoServer, tmp_path: Path):
    done = cao_cli(
        cao,
        "launch",
        "--agents",
        "developer",
        "--provider",
        "mock_cli",
        "--headless",
        "--auto-approve",
        "--allowed-tools",
        "fs_read",
        "--allowed-tools",
        "@cao-mcp-server",
        "--env",
        "GREETING=hello world",
        "--working-directory",
        str(tmp_path),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    term = cao.client.get("/terminals").json()[0]
    assert term["allowed_tools"] == ["fs_read", "@cao-mcp-server"]
    assert pane_environ(cao, term["id"])["GREETING"] == "hello world"

    bad = cao_cli(cao, "launch", "--agents", "developer", "--headless", "--auto-approve", "--env", "NOEQUALS")
    assert bad.returncode == 2 and "--env" in bad.stderr and "KEY=VALUE" in bad.stderr
    unknown = cao_cli(
        cao,
        "launch",
        "--agents",
        "developer",
        "--provider",
        "mock_cli",
        "--headless",
        "--yolo",
        "--allowed-tools",
        "sh",
    )
    assert unknown.returncode == 1 and "unknown tool 'sh'" in unknown.stderr
    assert len(cao.client.get("/terminals").json()) == 1  # nothing half-created by the refusals


def test_launch_without_approval_and_without_a_tty_refuses_before_creating(cao: CaoServer):
    refused = cao_cli(cao, "launch", "--agents", "developer", "--provider", "mock_cli", "--headless")
    assert refused.returncode == 1
    assert "--auto-approve" in refused.stderr and "--yolo" in refused.stderr
    assert cao.client.get("/sessions").json() == []


# --- trust flows down ------------------------------------------------------------------------
@pytest.mark.anyio
async def test_workers_get_their_own_profiles_tools_not_the_callers_flags(cao: CaoServer):
    """A --yolo supervisor (unrestricted) assigns to a reviewer and a developer: each worker runs
    with its own role's set; the supervisor's yolo does not widen it."""
    sup = cao.create_session("code_supervisor", yolo="true", allowed_tools="*")
    assert sup["allowed_tools"] == ["*"]
    async with mcp_session(mcp_env(cao, sup["id"])) as session:
        reviewer = await call(session, "assign", agent_profile="reviewer", message="review it")
        developer = await call(session, "assign", agent_profile="developer", message="build it")
    assert reviewer["success"] and developer["success"], (reviewer, developer)
    tools = {t["id"]: t["allowed_tools"] for t in cao.client.get("/terminals").json()}
    assert tools[reviewer["terminal_id"]] == REVIEWER
    assert tools[developer["terminal_id"]] == DEVELOPER


# --- a worker that asks anyway -------------------------------------------------------------------
@pytest.mark.anyio
async def test_handoff_reports_the_question_and_the_answer_brings_the_reply(cao: CaoServer):
    sup = cao.create_session("code_supervisor")
    async with mcp_session(mcp_env(cao, sup["id"])) as session:
        result = await call(session, "handoff", agent_profile="developer", message="__mock_ask__", timeout=60)
        worker = result["terminal_id"]
        assert result["success"] is False and worker, result
        text = result["message"]
        assert text.startswith("Handoff paused: worker " + worker)
        assert "Mock question: proceed with the change?" in text  # the question on its screen
        assert f"answer_user_prompt(terminal_id='{worker}'" in text and "kept for 300s" in text
        assert cao.status(worker) == "waiting_user_answer"  # kept, not torn down

        answered = await call(session, "answer_user_prompt", terminal_id=worker, answer="1")
        assert answered["success"] is True, answered
    notes = await eventually(
        lambda: [m for m in inbox(cao, sup["id"]) if "Result of your handoff" in m], message="the reply in the inbox"
    )
    assert len(notes) == 1 and f"worker {worker}" in notes[0] and "MOCK: you answered 1" in notes[0]
    await eventually(lambda: worker not in terminal_ids(cao), message="the worker removed once it answered")


@pytest.mark.anyio
async def test_an_unanswered_worker_is_removed_after_the_grace_period(cao_factory):
    cao = cao_factory("grace", CAO_HANDOFF_GRACE_SECONDS="2").start()
    sup = cao.create_session("code_supervisor")
    async with mcp_session(mcp_env(cao, sup["id"])) as session:
        result = await call(session, "handoff", agent_profile="developer", message="__mock_ask__", timeout=60)
    worker = result["terminal_id"]
    assert "kept for 2s" in result["message"] and worker in terminal_ids(cao)
    await eventually(lambda: worker not in terminal_ids(cao), message="the worker removed after 2 s")
    notes = await eventually(lambda: [m for m in inbox(cao, sup["id"]) if worker in m], message="the caller told")
    assert "still waiting for an answer after 2s and has been removed" in notes[0]


@pytest.mark.anyio
async def test_an_assigned_worker_that_asks_is_reported_to_its_callers_inbox(cao_factory):
    cao = cao_factory("assign", CAO_ENABLE_SENDER_ID_INJECTION="false").start()
    sup = cao.create_session("code_supervisor")
    async with mcp_session(mcp_env(cao, sup["id"])) as session:
        worker = (await call(session, "assign", agent_profile="developer", message="__mock_ask__"))["terminal_id"]
        notes = await eventually(
            lambda: [m for m in inbox(cao, sup["id"]) if f"Worker {worker}" in m], message="the question reported"
        )
        assert len(notes) == 1
        assert "Mock question: proceed with the change?" in notes[0] and "answer_user_prompt" in notes[0]
        answered = await call(session, "answer_user_prompt", terminal_id=worker, answer="yes")
        assert answered["success"] is True
    wait_until(lambda: cao.status(worker) == "completed", 15, message="worker done after the answer")
    assert worker in terminal_ids(cao)  # an assigned worker stays until its caller deletes it
    assert len([m for m in inbox(cao, sup["id"]) if f"Worker {worker}" in m]) == 1  # reported once
