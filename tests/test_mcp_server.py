"""cao-mcp-server end to end: the real console script on stdio, driven by the official
MCP client SDK, against a real cao-server running mock agents in tmux.

Each MCP process gets the fixture's environment plus CAO_TERMINAL_ID, exactly as
an agent's CLI would start it inside a cao terminal.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from cao_support import CaoServer
from mcp_support import agent_env, call, mcp_session

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")]

ALL_TOOLS = {
    "handoff",
    "assign",
    "send_message",
    "answer_user_prompt",
    "delete_terminal",
    "get_handoff_result",
    "cancel_handoff",
}
UNKNOWN_TERMINAL = "0badc0de"  # well-formed, never allocated in a fresh home


def mcp_env(cao: CaoServer, terminal_id: str | None, **extra: str) -> dict[str, str]:
    return agent_env(cao, terminal_id, **extra)


async def eventually(predicate: Callable[[], Any], timeout: float = 15, message: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        await anyio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {message} (last: {last!r})")


def terminal_ids(cao: CaoServer) -> set[str]:
    return {t["id"] for t in cao.client.get("/terminals").json()}


def last_output(cao: CaoServer, terminal_id: str) -> str:
    resp = cao.client.get(f"/terminals/{terminal_id}/output", params={"mode": "last"})
    return resp.json()["output"] if resp.status_code == 200 else ""


def status_of(cao: CaoServer, terminal_id: str) -> str:
    return cao.client.get(f"/terminals/{terminal_id}").json()["status"]


def gone(cao: CaoServer, terminal_id: str) -> bool:
    return cao.client.get(f"/terminals/{terminal_id}").status_code == 404


# --- the contract ---------------------------------------------------------------------------
async def test_list_tools_offers_working_directory_only_when_enabled(cao_factory, tmp_path: Path) -> None:
    for flag, with_workdir in (("false", False), ("true", True)):
        # The tools are cao-server's: its own setting decides (an agent inherits the server's).
        cao = cao_factory(f"home-{flag}", CAO_ENABLE_WORKING_DIRECTORY=flag).start()
        sup = cao.create_session("code_supervisor")
        async with mcp_session(mcp_env(cao, sup["id"])) as session:
            server_name = session.server_info.name if session.server_info else None
            tools = {t.name: t for t in (await session.list_tools()).tools}
            if with_workdir:
                # The parameter reaches cao-server, which checks it before creating anything.
                relative = await call(
                    session, "handoff", agent_profile="developer", message="x", working_directory="not/absolute"
                )
                assert relative["success"] is False and "absolute path" in relative["message"]
                assert terminal_ids(cao) == {sup["id"]}
                placed = await call(
                    session, "handoff", agent_profile="developer", message="where", working_directory=str(tmp_path)
                )
                assert placed["success"] is True and placed["output"].strip() == "MOCK: where"
        assert server_name == "cao-mcp-server"
        assert ALL_TOOLS <= set(tools)
        params = {name: set(t.input_schema["properties"]) for name, t in tools.items()}
        required = {name: set(t.input_schema.get("required", [])) for name, t in tools.items()}
        workdir = {"working_directory"} if with_workdir else set()
        common = {"agent_profile", "message", "model", "engine", "use_worktree", "host", "description"}
        assert params["handoff"] == common | {"timeout", "wait"} | workdir
        assert params["assign"] == common | workdir
        assert params["send_message"] == {"message", "receiver_id"}
        assert params["answer_user_prompt"] == {"terminal_id", "answer"}
        assert params["delete_terminal"] == {"terminal_id"}
        assert params["get_handoff_result"] == {"job_id", "wait"} and required["get_handoff_result"] == {"job_id"}
        assert params["cancel_handoff"] == {"job_id"}
        assert required["handoff"] == required["assign"] == {"agent_profile", "message"}
        assert required["send_message"] == {"message"}
        assert tools["handoff"].input_schema["properties"]["timeout"]["default"] == 600


# --- handoff ----------------------------------------------------------------------------------
async def test_handoff_returns_the_reply_and_removes_the_worker(cao: CaoServer) -> None:
    sup = cao.create_session("code_supervisor")
    session_name = sup["session_name"]
    async with mcp_session(mcp_env(cao, sup["id"])) as session:
        result = await call(session, "handoff", agent_profile="developer", message="summarise the plan")
        assert result["success"] is True, result
        assert result["output"].strip() == "MOCK: summarise the plan"
        assert re.fullmatch(r"Successfully handed off to developer \(mock_cli\) in \d+\.\d\ds", result["message"])
        assert re.fullmatch(r"[a-f0-9]{8}", result["terminal_id"])
        assert gone(cao, result["terminal_id"])

        # While a slower step runs, its worker shows up in the caller's session, linked to the caller.
        seen: dict[str, Any] = {}
        outcome: dict[str, Any] = {}

        async def slow_handoff() -> None:
            outcome.update(await call(session, "handoff", agent_profile="developer", message="__mock_sleep_1.5"))

        def worker_in_session() -> dict | None:
            terms = cao.client.get(f"/sessions/{session_name}/terminals").json()
            return next((t for t in terms if t["id"] != sup["id"]), None)

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow_handoff)
            seen.update(await eventually(worker_in_session, message="handoff worker in the caller's session"))
        assert outcome["success"] is True, outcome
        assert outcome["terminal_id"] == seen["id"]
        assert seen["caller_id"] == sup["id"] and seen["agent_profile"] == "developer"
        assert seen["provider"] == "mock_cli"  # inherited from the caller: the profile names none
        assert gone(cao, seen["id"])
    assert terminal_ids(cao) == {sup["id"]}


async def test_handoff_failures_are_results_and_leave_nothing_behind(cao: CaoServer) -> None:
    sup = cao.create_session("code_supervisor")
    async with mcp_session(mcp_env(cao, sup["id"])) as session:
        errored = await call(session, "handoff", agent_profile="developer", message="__mock_error__")
        assert errored["success"] is False and errored["output"] is None
        assert errored["message"].startswith("Handoff failed: worker errored (")
        assert errored["terminal_id"] and gone(cao, errored["terminal_id"])

        # The worker would answer after 30 s: a timed-out result proves the 1 s limit ended the wait.
        late = await call(session, "handoff", agent_profile="developer", message="__mock_sleep_30", timeout=1)
        assert late["success"] is False and late["message"] == "Handoff timed out after 1 seconds"
        assert late["terminal_id"] and gone(cao, late["terminal_id"])

        for bad in (0, -5, 3601):
            out_of_range = await call(session, "handoff", agent_profile="developer", message="x", timeout=bad)
            assert out_of_range["success"] is False and out_of_range["terminal_id"] is None
            assert "timeout must be between 1 and 3600" in out_of_range["message"]

        unknown = await call(session, "handoff", agent_profile="no_such_profile", message="hello")
        assert unknown["success"] is False and unknown["terminal_id"] is None
        assert unknown["message"].startswith("Handoff failed: agent profile 'no_such_profile' not found")
    assert terminal_ids(cao) == {sup["id"]}


async def test_handoff_without_caller_runs_in_a_new_session(cao: CaoServer) -> None:
    # No caller to inherit a provider from, so the profile itself names mock_cli.
    store = cao.home / "agent-store"
    store.mkdir(parents=True, exist_ok=True)
    (store / "mockdev.md").write_text("---\nname: mockdev\nprovider: mock_cli\n---\nYou are a test agent.\n")
    async with mcp_session(mcp_env(cao, None)) as session:
        result = await call(session, "handoff", agent_profile="mockdev", message="standalone task")
        assert result["success"] is True, result
        assert result["output"].strip() == "MOCK: standalone task"
        assert "(mock_cli)" in result["message"]
        assert gone(cao, result["terminal_id"])

        # assign and send_message need an identity: they fail clearly and create nothing.
        assigned = await call(session, "assign", agent_profile="developer", message="task")
        assert assigned["success"] is False and assigned["terminal_id"] is None
        assert assigned["message"].startswith("Assignment failed: CAO_TERMINAL_ID not set")
        sent = await call(session, "send_message", message="hello", receiver_id=UNKNOWN_TERMINAL)
        assert sent["success"] is False and "CAO_TERMINAL_ID not set" in sent["error"]
    assert terminal_ids(cao) == set()


# --- assign and send_message -------------------------------------------------------------------
async def test_assign_then_worker_reports_back_with_send_message(cao: CaoServer) -> None:
    sup = cao.create_session("code_supervisor")
    me = sup["id"]
    async with mcp_session(mcp_env(cao, me)) as session:
        # assign does not wait for the worker: a worker that is still starting when the answer
        # comes (its mock shows no prompt for 10 minutes) is assigned all the same.
        store = cao.home / "agent-store"
        store.mkdir(parents=True, exist_ok=True)
        (store / "slow_starter.md").write_text(
            "---\nname: slow_starter\nprovider: mock_cli\nmock: {startup_ms: 600000}\n---\nStarts slowly.\n"
        )
        starting = await call(session, "assign", agent_profile="slow_starter", message="whenever you are up")
        assert starting["success"] is True, starting
        assert status_of(cao, starting["terminal_id"]) == "unknown"  # not ready, and assign has answered
        assert (await call(session, "delete_terminal", terminal_id=starting["terminal_id"]))["success"] is True

        result = await call(session, "assign", agent_profile="developer", message="build the parser")
        assert result["success"] is True, result
        worker = result["terminal_id"]
        assert re.fullmatch(r"[a-f0-9]{8}", worker)
        assert result["message"] == (
            f"Task assigned to developer (terminal: {worker}). Worker is initializing in the background; "
            f"your task will be delivered once it is ready. Call delete_terminal('{worker}') when you no "
            "longer need this terminal."
        )
        record = cao.client.get(f"/terminals/{worker}").json()
        assert record["caller_id"] == me and record["session_name"] == sup["session_name"]
        assert record["provider"] == "mock_cli"

        await eventually(
            lambda: f"Assigned by terminal {me}" in last_output(cao, worker),
            message="the assigned task (with its sender suffix) reaching the worker",
        )
        echoed = last_output(cao, worker)
        assert "build the parser" in echoed and "send results back to terminal" in echoed

        # The supervisor has no caller, so a reply needs an explicit receiver; itself is refused.
        no_caller = await call(session, "send_message", message="hi")
        assert no_caller["success"] is False and "no caller" in no_caller["error"]
        to_self = await call(session, "send_message", message="hi", receiver_id=me)
        assert to_self["success"] is False and "yourself" in to_self["error"]
        unknown = await call(session, "send_message", message="hi", receiver_id=UNKNOWN_TERMINAL)
        assert unknown["success"] is False and "not found" in unknown["error"]
        malformed = await call(session, "send_message", message="hi", receiver_id="Not-An-Id")
        assert malformed["success"] is False and "8 lowercase hex" in malformed["error"]

    await eventually(lambda: status_of(cao, worker) in ("idle", "completed"), message="worker done")
    async with mcp_session(mcp_env(cao, worker)) as worker_session:
        sent = await call(worker_session, "send_message", message="parser done: 3 files")
    assert sent["success"] is True, sent
    assert sent["sender_id"] == worker and sent["receiver_id"] == me
    assert isinstance(sent["message_id"], int) and sent["created_at"]

    def delivered() -> dict | None:
        inbox = cao.client.get(f"/terminals/{me}/inbox/messages").json()
        return next((m for m in inbox if m["id"] == sent["message_id"] and m["status"] == "delivered"), None)

    message = await eventually(delivered, message="the worker's report delivered to the supervisor")
    assert message["sender_id"] == worker
    assert message["message"] == (
        f"parser done: 3 files\n\n[Message from terminal {worker}. Use send_message MCP tool for any follow-up work.]"
    )
    await eventually(
        lambda: "MOCK: parser done: 3 files" in last_output(cao, me),
        message="the supervisor quoting the delivered message",
    )


async def test_assign_reminds_about_crowded_sessions(cao: CaoServer) -> None:
    sup = cao.create_session("code_supervisor")
    async with mcp_session(mcp_env(cao, sup["id"])) as session:
        notes = []
        for i in range(9):  # the supervisor plus nine workers makes ten terminals
            result = await call(session, "assign", agent_profile="developer", message=f"task {i}")
            assert result["success"] is True, result
            notes.append(" NOTE: This session has" in result["message"])
        assert notes == [False] * 8 + [True]
        assert result["message"].endswith(
            " NOTE: This session has 10 terminals. Consider calling delete_terminal on terminals you no longer need."
        )


# --- answer_user_prompt and delete_terminal ---------------------------------------------------
async def test_answer_user_prompt_unblocks_a_waiting_worker(cao_factory) -> None:
    # Without sender-id injection the task reaches the worker verbatim, so the magic input works.
    cao = cao_factory(CAO_ENABLE_SENDER_ID_INJECTION="false").start()
    sup = cao.create_session("code_supervisor")
    async with mcp_session(mcp_env(cao, sup["id"])) as session:
        not_waiting = await call(session, "answer_user_prompt", terminal_id=sup["id"], answer="yes")
        assert not_waiting["success"] is False and not_waiting["terminal_id"] == sup["id"]
        assert not_waiting["status"] in ("idle", "completed") and "not waiting" in not_waiting["message"]

        worker = (await call(session, "assign", agent_profile="developer", message="__mock_ask__"))["terminal_id"]
        await eventually(lambda: status_of(cao, worker) == "waiting_user_answer", message="worker asking")

        blank = await call(session, "answer_user_prompt", terminal_id=worker, answer="   ")
        assert blank["success"] is False and "blank" in blank["message"]
        too_long = await call(session, "answer_user_prompt", terminal_id=worker, answer="y" * 4001)
        assert too_long["success"] is False and "4000" in too_long["message"]
        malformed = await call(session, "answer_user_prompt", terminal_id="xyz", answer="yes")
        assert malformed["success"] is False and "8 lowercase hex" in malformed["message"]
        assert status_of(cao, worker) == "waiting_user_answer"

        answered = await call(session, "answer_user_prompt", terminal_id=worker, answer="yes please")
        assert answered == {"success": True, "terminal_id": worker, "message": "User prompt answer delivered."}
    await eventually(lambda: status_of(cao, worker) == "completed", message="worker completing after the answer")
    assert "MOCK: you answered yes please" in last_output(cao, worker)


async def test_delete_terminal(cao: CaoServer) -> None:
    sup = cao.create_session("code_supervisor")
    resp = cao.client.post(
        f"/sessions/{sup['session_name']}/terminals", params={"agent_profile": "developer", "provider": "mock_cli"}
    )
    assert resp.status_code == 201, resp.text
    worker = resp.json()["id"]
    async with mcp_session(mcp_env(cao, sup["id"])) as session:
        deleted = await call(session, "delete_terminal", terminal_id=worker)
        assert deleted == {"success": True, "message": f"Terminal {worker} deleted successfully"}
        assert gone(cao, worker)
        again = await call(session, "delete_terminal", terminal_id=worker)
        assert again == {"success": False, "message": f"Terminal {worker} not found"}
        malformed = await call(session, "delete_terminal", terminal_id="../etc")
        assert malformed["success"] is False and "8 lowercase hex" in malformed["message"]
    assert terminal_ids(cao) == {sup["id"]}
