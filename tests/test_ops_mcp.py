"""cao-ops-mcp-server end to end: the real console script on stdio, driven by the official
MCP client SDK, against a real cao-server running mock agents in tmux.

The MCP process gets the fixture's environment without CAO_TERMINAL_ID, as an agent
outside cao (a Claude Code or Codex in the user's own terminal) would start it.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from cao_support import CaoServer, free_port
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_support import call

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")]

UNKNOWN_TERMINAL = "0badc0de"  # well-formed, never allocated in a fresh home
OPS_TOOLS = {
    "list_profiles",
    "get_profile_details",
    "install_profile",
    "launch_session",
    "send_session_message",
    "read_session_output",
    "get_terminal_status",
    "get_terminal_output",
    "list_sessions",
    "get_session_info",
    "shutdown_session",
    "list_flows",
    "run_flow",
    # The user's memory tools (issue 29; tests/test_memory.py drives them).
    "memory_store",
    "memory_recall",
    "memory_forget",
}
# Every workflow tool of cao-mcp-server except workflow_return, which only a step's agent can use.
WORKFLOW_TOOLS = {
    "workflow_run",
    "workflow_start",
    "workflow_status",
    "workflow_wait",
    "workflow_result",
    "workflow_list",
    "workflow_events",
    "workflow_resume",
    "workflow_cancel",
}
BIN = Path(sys.executable).parent


def ops_env(cao: CaoServer) -> dict[str, str]:
    # The test itself may run inside a cao terminal: an outside agent has no such identity.
    return {k: v for k, v in cao.env.items() if k != "CAO_TERMINAL_ID"}


@asynccontextmanager
async def ops_session(env: dict[str, str], via_cao: bool = False) -> AsyncIterator[ClientSession]:
    """The installed console script (`cao-ops-mcp-server`, or `cao ops-mcp-server`)."""
    command, args = (str(BIN / "cao"), ["ops-mcp-server"]) if via_cao else (str(BIN / "cao-ops-mcp-server"), [])
    params = StdioServerParameters(command=command, args=args, env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def eventually(probe: Callable[[], Awaitable[Any]], timeout: float = 20, message: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await anyio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {message} (last: {last!r})")


def assert_failed(result: dict[str, Any], *phrases: str) -> None:
    assert result["success"] is False, result
    for phrase in phrases:
        assert phrase in result["message"], result


def tmux_has_session(cao: CaoServer, name: str) -> bool:
    return cao.tmux("has-session", "-t", f"={name}").returncode == 0


# --- the contract -------------------------------------------------------------------------------
async def test_tool_list_names_parameters_and_both_entry_points(cao: CaoServer) -> None:
    for via_cao in (False, True):
        async with ops_session(ops_env(cao), via_cao=via_cao) as session:
            assert session.server_info is not None and session.server_info.name == "cao-ops-mcp"
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) == OPS_TOOLS | WORKFLOW_TOOLS
            # The workflow tools are cao-mcp-server's own, answering in their envelope.
            runs = await call(session, "workflow_list")
            assert runs == {"ok": True, "runs": []}
            bad_run = await call(session, "workflow_status", run_id="../x")
            assert bad_run["ok"] is False and "invalid run id" in bad_run["error"]
    params = {name: set(t.input_schema.get("properties", {})) for name, t in tools.items()}
    required = {name: set(t.input_schema.get("required", [])) for name, t in tools.items()}
    assert params["launch_session"] == {
        "agent_profile",
        "provider",
        "session_name",
        "working_directory",
        "allowed_tools",
        "model",
        "initial_message",
        "host",
        "env_vars",
    }
    assert required["launch_session"] == {"agent_profile"}
    assert tools["launch_session"].input_schema["properties"]["allowed_tools"]["anyOf"][0]["type"] == "array"
    assert params["send_session_message"] == {"message", "terminal_id", "session_name"}
    assert required["send_session_message"] == {"message"}
    assert params["read_session_output"] == {"terminal_id", "session_name", "mode", "max_chars"}
    assert tools["read_session_output"].input_schema["properties"]["mode"]["default"] == "full"
    assert tools["get_terminal_output"].input_schema["properties"]["mode"]["default"] == "last"
    assert params["install_profile"] == {"source", "provider", "env_vars"} and required["install_profile"] == {"source"}
    for name in ("get_terminal_status", "get_terminal_output"):
        assert "terminal_id" in required[name]
    for name in ("get_session_info", "shutdown_session"):
        assert params[name] == required[name] == {"session_name"}
    assert params["get_profile_details"] == params["run_flow"] == {"name"}
    for name in ("list_profiles", "list_sessions", "list_flows"):
        assert params[name] == set()


# --- an agent's life through the ops tools --------------------------------------------------------
async def test_launch_message_read_reply_and_shut_down(cao: CaoServer) -> None:
    async with ops_session(ops_env(cao)) as session:
        launched = await call(session, "launch_session", agent_profile="developer", provider="mock_cli")
        assert launched["success"] is True, launched
        name, tid = launched["session_name"], launched["terminal_id"]
        assert re.fullmatch(r"cao-[a-f0-9]{8}", name) and re.fullmatch(r"[a-f0-9]{8}", tid)
        assert launched["status"] == "idle" and tid in launched["message"]

        status = await call(session, "get_terminal_status", terminal_id=tid)
        assert status["success"] is True and status["id"] == tid and status["session_name"] == name
        assert status["status"] == "idle" and status["provider"] == "mock_cli"
        listed = await call(session, "list_sessions")
        assert listed["success"] is True and [s["name"] for s in listed["sessions"]] == [name]
        info = await call(session, "get_session_info", session_name=name)
        assert info["success"] is True and info["session"]["name"] == name
        assert [t["id"] for t in info["terminals"]] == [tid]

        # To the session's conductor, by session name; through the inbox, as cao-ops-mcp.
        sent = await call(session, "send_session_message", session_name=name, message="hello from outside")
        assert sent["success"] is True and sent["terminal_id"] == tid and isinstance(sent["message_id"], int)
        inbox = cao.client.get(f"/terminals/{tid}/inbox/messages").json()
        assert [(m["sender_id"], m["message"]) for m in inbox] == [("cao-ops-mcp", "hello from outside")]

        async def replied() -> dict | None:
            read = await call(session, "read_session_output", session_name=name, mode="last")
            return read if read["success"] and read["output"].strip() == "MOCK: hello from outside" else None

        reply = await eventually(replied, message="the mock's reply")
        assert reply["terminal_id"] == tid and reply["mode"] == "last" and reply["terminals"] == [tid]
        assert reply["truncated"] is False and reply["total_chars"] == len(reply["output"])
        assert (await call(session, "get_terminal_status", terminal_id=tid))["status"] in {"idle", "completed"}
        last = await call(session, "get_terminal_output", terminal_id=tid)
        assert last["success"] is True and last["mode"] == "last" and last["output"].strip() == reply["output"].strip()

        full = await call(session, "read_session_output", terminal_id=tid)
        assert full["success"] is True and full["mode"] == "full" and "hello from outside" in full["output"]
        tail = await call(session, "read_session_output", terminal_id=tid, max_chars=5)
        assert tail["truncated"] is True and tail["total_chars"] > 5 and len(tail["output"]) == 5

        # Straight to a terminal by id works too.
        again = await call(session, "send_session_message", terminal_id=tid, message="second")
        assert again["success"] is True and again["terminal_id"] == tid

        async def second_reply() -> bool:
            out = await call(session, "get_terminal_output", terminal_id=tid)
            return out["success"] and out["output"].strip() == "MOCK: second"

        await eventually(second_reply, message="the reply to the second message")

        down = await call(session, "shutdown_session", session_name=name)
        assert down["success"] is True and down["deleted"] == [name] and down["errors"] == []
        assert cao.client.get("/sessions").json() == []
        assert not tmux_has_session(cao, name)
        assert cao.client.get(f"/terminals/{tid}").status_code == 404
        assert_failed(await call(session, "get_session_info", session_name=name), "not found")
        assert (await call(session, "list_sessions")) == {"success": True, "sessions": []}


async def test_launch_with_initial_message_and_own_session_name(cao: CaoServer) -> None:
    async with ops_session(ops_env(cao)) as session:
        launched = await call(
            session,
            "launch_session",
            agent_profile="developer",
            provider="mock_cli",
            session_name="ops-demo",
            allowed_tools=["fs_read", "fs_list"],
            initial_message="first words",
        )
        assert launched["success"] is True, launched
        assert launched["session_name"] == "cao-ops-demo"  # cao- added, as cao-server does
        tid = launched["terminal_id"]
        assert cao.client.get(f"/terminals/{tid}").json()["allowed_tools"] == ["fs_read", "fs_list"]

        async def replied() -> bool:
            read = await call(session, "read_session_output", terminal_id=tid, mode="last")
            return read["success"] and read["output"].strip() == "MOCK: first words"

        await eventually(replied, message="the reply to the initial message")
        down = await call(session, "shutdown_session", session_name="ops-demo")
        assert down["success"] is True and down["deleted"] == ["cao-ops-demo"]
        assert not tmux_has_session(cao, "cao-ops-demo")


# --- profiles -----------------------------------------------------------------------------------
async def test_profiles_listed_read_and_bad_installs_are_results(cao: CaoServer) -> None:
    async with ops_session(ops_env(cao)) as session:
        listed = await call(session, "list_profiles")
        assert listed["success"] is True
        assert {"developer", "reviewer"} <= {p["name"] for p in listed["profiles"]}
        dev = await call(session, "get_profile_details", name="developer")
        assert dev["success"] is True and dev["name"] == "developer" and dev["system_prompt"]

        assert_failed(await call(session, "get_profile_details", name="no_such_profile"), "no_such_profile")
        assert_failed(await call(session, "get_profile_details", name="../developer"), "invalid profile name")
        # A local path is refused over HTTP, an unlisted host too, an unknown name is named.
        assert_failed(await call(session, "install_profile", source="/etc/passwd"), "installing")
        assert_failed(await call(session, "install_profile", source="https://evil.example/x.md"), "installing")
        assert_failed(await call(session, "install_profile", source="no_such_profile_zz"), "no_such_profile_zz")
        assert_failed(await call(session, "install_profile", source="  "), "source")
    assert not (cao.home / "agent-store" / "no_such_profile_zz.md").exists()


# --- bad input ----------------------------------------------------------------------------------
async def test_unknown_and_malformed_ids_are_clear_results(cao: CaoServer) -> None:
    async with ops_session(ops_env(cao)) as session:
        for tool, args in (
            ("get_terminal_status", {}),
            ("get_terminal_output", {}),
            ("read_session_output", {}),
            ("send_session_message", {"message": "hi"}),
        ):
            unknown = await call(session, tool, terminal_id=UNKNOWN_TERMINAL, **args)
            assert_failed(unknown, UNKNOWN_TERMINAL, "not found")
            for bad in ("../x", "0BADC0DE", "0badc0de/../../sessions", ""):
                assert_failed(await call(session, tool, terminal_id=bad, **args), "invalid terminal_id")

        for tool in ("get_session_info", "shutdown_session"):
            assert_failed(await call(session, tool, session_name="cao-nosuch"), "cao-nosuch", "not found")
            assert_failed(await call(session, tool, session_name="../x"), "invalid session_name")
        assert_failed(await call(session, "read_session_output", session_name="nosuch"), "cao-nosuch", "not found")
        assert_failed(await call(session, "send_session_message", message="hi", session_name="a b"), "invalid")
        assert_failed(await call(session, "send_session_message", message="hi"), "terminal_id", "session_name")
        assert_failed(
            await call(session, "read_session_output", terminal_id=UNKNOWN_TERMINAL, session_name="cao-x"), "not both"
        )
        assert_failed(await call(session, "read_session_output", terminal_id=UNKNOWN_TERMINAL, mode="all"), "mode")
        assert_failed(await call(session, "get_terminal_output", terminal_id=UNKNOWN_TERMINAL, mode="x"), "mode")
        assert_failed(await call(session, "send_session_message", message="  ", terminal_id=UNKNOWN_TERMINAL), "empty")

        # A launch that cannot start leaves nothing behind.
        no_profile = await call(session, "launch_session", agent_profile="no_such_profile", provider="mock_cli")
        assert_failed(no_profile, "Launch failed", "no_such_profile")
        assert_failed(await call(session, "launch_session", agent_profile="../x"), "invalid agent_profile")
        assert_failed(
            await call(session, "launch_session", agent_profile="developer", allowed_tools=["a,b"]), "allowed_tools"
        )
        assert_failed(
            await call(session, "launch_session", agent_profile="developer", session_name="bad name"),
            "invalid session_name",
        )
        assert_failed(
            await call(session, "launch_session", agent_profile="developer", provider="mock_cli", initial_message=""),
            "initial_message",
        )
        assert cao.client.get("/sessions").json() == []


async def test_flows_listed_and_run_or_a_clear_error(cao: CaoServer) -> None:
    routes_exist = cao.client.get("/flows").status_code == 200
    if routes_exist:
        flow = {"name": "opsflow", "schedule": "0 0 1 1 *", "agent_profile": "developer"}
        added = cao.client.post("/flows", json={**flow, "provider": "mock_cli", "prompt_template": "flow hello"})
        assert added.status_code == 201, added.text
    async with ops_session(ops_env(cao)) as session:
        flows = await call(session, "list_flows")
        unknown = await call(session, "run_flow", name="no_such_flow")
        assert_failed(await call(session, "run_flow", name="../x"), "invalid flow name")
        if not routes_exist:  # a cao-server without flow routes: said plainly, not a bare 404
            assert_failed(flows, "no flow routes")
            assert_failed(unknown, "no flow routes")
            return
        assert flows["success"] is True and [f["name"] for f in flows["flows"]] == ["opsflow"]
        assert_failed(unknown, "no_such_flow", "not found")

        ran = await call(session, "run_flow", name="opsflow")
        assert ran["success"] is True and ran["executed"] is True, ran
        flow_session = ran["run"]["session_name"]
        assert flow_session == "cao-flow-opsflow" and flow_session in ran["message"]

        async def replied() -> bool:
            read = await call(session, "read_session_output", session_name=flow_session, mode="last")
            return read["success"] and read["output"].strip() == "MOCK: flow hello"

        await eventually(replied, message="the flow agent's reply")
        assert (await call(session, "shutdown_session", session_name=flow_session))["success"] is True
        assert not tmux_has_session(cao, flow_session)


async def test_unreachable_server_is_a_result(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CAO_TERMINAL_ID", "TMUX")}
    env.update(CAO_HOME_DIR=str(tmp_path / "home"), CAO_API_HOST="127.0.0.1", CAO_API_PORT=str(free_port()))
    async with ops_session(env) as session:
        assert_failed(await call(session, "list_sessions"), "cannot reach cao-server")
        assert_failed(await call(session, "launch_session", agent_profile="developer"), "cannot reach cao-server")
