"""cao's agent tools served by cao-server itself at /mcp (issue 25): the official MCP client SDK
over streamable HTTP, identity proven by each agent's own credential, the stdio relay giving the
same answers, agents ready only once their CLI has listed the tools, and bad input answered
without a 500 or a wedged server.

Real parts: cao-server processes, the official SDK's streamable HTTP and stdio clients, the
`cao-mcp-server` relay, mock agents (whose MCP client is their own, as a real CLI's is), and a
real second user for the same-user rule.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from cao_support import CaoServer, cli, wait_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_support import agent_env, call, mcp_command, mcp_session
from sse_support import EventStream
from stranger_support import Stranger

from cli_agent_orchestrator.agent_credentials import credential_for

pytestmark = pytest.mark.anyio


def credential(server: CaoServer, terminal_id: str) -> str:
    return agent_env(server, terminal_id)["CAO_MCP_TOKEN"]


@asynccontextmanager
async def http_session(server: CaoServer, headers: dict[str, str]) -> AsyncIterator[ClientSession]:
    """The official SDK's streamable HTTP client on cao-server's /mcp."""
    client = httpx2.AsyncClient(headers=headers, timeout=120)
    async with streamable_http_client(f"{server.url}/mcp", http_client=client) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            yield session


def store_profile(server: CaoServer, name: str, text: str) -> None:
    store = server.home / "agent-store"
    store.mkdir(parents=True, exist_ok=True)
    (store / f"{name}.md").write_text(text)


def rpc(server: CaoServer, body: bytes | str, headers: dict[str, str] | None = None) -> httpx.Response:
    return server.client.post(
        "/mcp",
        content=body,
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **(headers or {}),
        },
    )


def answers(resp: httpx.Response) -> list[dict]:
    """The JSON-RPC messages of an answer, JSON or an SSE stream."""
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        return [
            json.loads(line[5:]) for line in resp.text.splitlines() if line.startswith("data:") and line[5:].strip()
        ]
    body = resp.json()
    return body if isinstance(body, list) else [body]


# --- the same tools, the same answers ---------------------------------------------------------
async def test_http_and_the_stdio_relay_offer_the_same_tools_and_answers(cao: CaoServer) -> None:
    sup, other = cao.create_session("code_supervisor"), cao.create_session()
    async with http_session(cao, {"X-CAO-Agent-Token": credential(cao, sup["id"])}) as http:
        http_tools = {t.name: t.input_schema for t in (await http.list_tools()).tools}
        sent = await call(http, "send_message", message="over http", receiver_id=other["id"])
        mine = await call(http, "send_message", message="to me", receiver_id=sup["id"])
    async with mcp_session(agent_env(cao, sup["id"])) as relay:
        relay_tools = {t.name: t.input_schema for t in (await relay.list_tools()).tools}
        relayed = await call(relay, "send_message", message="over the relay", receiver_id=other["id"])
        mine_relayed = await call(relay, "send_message", message="to me", receiver_id=sup["id"])
    assert http_tools == relay_tools and {"handoff", "assign", "send_message", "workflow_return"} <= set(http_tools)
    assert sent["success"] is True and relayed["success"] is True
    assert set(sent) == set(relayed) == {"success", "message_id", "sender_id", "receiver_id", "created_at"}
    assert sent["sender_id"] == relayed["sender_id"] == sup["id"]  # the credential's terminal, both ways
    assert (
        mine == mine_relayed == {"success": False, "error": f"cannot send a message to yourself (terminal {sup['id']})"}
    )


async def test_a_handoff_over_http_returns_the_workers_reply(cao: CaoServer) -> None:
    sup = cao.create_session("code_supervisor")
    async with http_session(cao, {"Authorization": f"Bearer {credential(cao, sup['id'])}"}) as session:
        result = await call(session, "handoff", agent_profile="developer", message="over http")
    assert result["success"] is True and result["output"].strip() == "MOCK: over http", result
    assert cao.client.get(f"/terminals/{result['terminal_id']}").status_code == 404  # removed after


# --- identity is proven, never claimed ------------------------------------------------------------
async def test_no_wrong_or_dead_credential_gets_anything_done(cao: CaoServer) -> None:
    sup, receiver = cao.create_session("code_supervisor"), cao.create_session()
    call_body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "send_message", "arguments": {"message": "sneaky", "receiver_id": receiver["id"]}},
        }
    )
    good = credential(cao, sup["id"])
    forged = f"{sup['id']}.{'A' * 43}"
    another_servers = credential_for("x" * 43, sup["id"])
    for headers in (
        {},
        {"X-CAO-Agent-Token": forged},
        {"X-CAO-Agent-Token": another_servers},
        {"X-CAO-Terminal": sup["id"]},
    ):
        resp = rpc(cao, call_body, headers)
        assert resp.status_code == 401, (headers, resp.text)
        assert resp.json()["error"]["code"] == -32001 and resp.headers["www-authenticate"].startswith("Bearer")
    # The credential of a terminal that was deleted is dead with it.
    gone = cao.create_session()
    gone_credential = credential(cao, gone["id"])
    assert cao.client.delete(f"/terminals/{gone['id']}").status_code == 200
    assert rpc(cao, call_body, {"X-CAO-Agent-Token": gone_credential}).status_code == 401
    assert cao.client.get(f"/terminals/{receiver['id']}/inbox/messages").json() == []  # nothing was done
    ok = rpc(cao, call_body, {"X-CAO-Agent-Token": good})
    assert ok.status_code == 200 and answers(ok)[0]["result"]["structuredContent"]["success"] is True


async def test_the_servers_token_is_the_user_not_an_agent(cao: CaoServer) -> None:
    token = (cao.home / "auth-token").read_text().strip()
    async with http_session(cao, {"Authorization": f"Bearer {token}"}) as session:
        sent = await call(session, "send_message", message="from nobody")
    assert sent["success"] is False and "CAO_TERMINAL_ID not set" in sent["error"]


def test_a_valid_agent_credential_admits_no_other_local_user(cao: CaoServer, stranger: Stranger) -> None:
    sup = cao.create_session("code_supervisor")
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"X-CAO-Agent-Token": credential(cao, sup["id"]), "Accept": "application/json, text/event-stream"}
    refused = stranger.requests(cao.port, [("POST", "/mcp", body, headers)])[0]
    assert refused["status"] == 403 and f"refuses uid {stranger.uid}" in refused["body"]


async def test_the_credential_is_in_no_argv_and_in_no_get_answer(cao: CaoServer) -> None:
    term = cao.create_session()
    secret = credential(cao, term["id"])
    for path in ("/terminals", f"/terminals/{term['id']}", "/sessions", "/ui/board", "/diagnostics", "/health"):
        assert secret not in cao.client.get(path).text, path
    argv = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv.append(Path(f"/proc/{pid}/cmdline").read_bytes())
        except OSError:
            continue
    assert not any(secret.encode() in a for a in argv)
    assert secret not in (cao.home / "server.out").read_text(errors="replace")


# --- ready means ready with tools --------------------------------------------------------------
async def test_an_agent_is_idle_only_once_its_cli_has_listed_cao_s_tools(cao: CaoServer) -> None:
    store_profile(cao, "slow_tools", "---\nname: slow_tools\nprovider: mock_cli\nmock: {mcp_delay_ms: 1500}\n---\n")
    with EventStream(cao, "terminal.*.status") as events:
        term = cao.create_session("slow_tools")  # answers once the agent is ready
        assert term["status"] == "idle"
        events.until(lambda f: f.data.get("terminal_id") == term["id"] and f.data.get("status") == "idle")
    statuses = [(f.data["status"], f.data["source"]) for f in events.frames if f.data.get("terminal_id") == term["id"]]
    # The prompt was up before the tools were listed: "unknown" then, "idle" only after.
    assert ("unknown", "tools") in statuses, statuses
    assert statuses[-1] == ("idle", "screen") and statuses.index(("unknown", "tools")) < len(statuses) - 1


async def test_a_first_message_hands_off_on_the_first_try_even_when_the_cli_connects_late(cao: CaoServer) -> None:
    store_profile(
        cao,
        "late_sup",
        "---\nname: late_sup\nprovider: mock_cli\nrole: supervisor\nmock:\n  mcp_delay_ms: 1500\n  rules:\n"
        "    - match: 'review (.*)'\n      steps:\n        - tool: handoff\n"
        "          args: {agent_profile: developer, message: '{g1}'}\n          save: answer\n"
        "      reply: 'got {answer}'\n---\n",
    )
    out = cli(
        cao,
        "launch",
        "--agents",
        "late_sup",
        "--provider",
        "mock_cli",
        "--headless",
        "--yolo",
        "review the diff",
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "got MOCK: the diff" in out.stdout, out.stdout


async def test_a_cli_that_never_lists_the_tools_fails_the_spawn_saying_so(cao_factory) -> None:
    cao = cao_factory(CAO_PROVIDER_INIT_TIMEOUT="3").start()
    store_profile(cao, "deaf", "---\nname: deaf\nprovider: mock_cli\nmock: {list_tools: '0'}\n---\n")
    resp = cao.client.post("/sessions", params={"agent_profile": "deaf", "provider": "mock_cli"})
    assert resp.status_code in (500, 504), resp.text
    assert "did not connect to cao's MCP endpoint (/mcp)" in resp.text
    assert cao.client.get("/terminals").json() == []  # nothing left behind
    # Without cao's tools in its profile the same CLI is not waited for.
    store_profile(
        cao,
        "deaf_worker",
        "---\nname: deaf_worker\nprovider: mock_cli\nallowedTools: [fs_read]\nmock: {list_tools: '0'}\n---\n",
    )
    assert cao.create_session("deaf_worker")["status"] == "idle"


# --- the relay -----------------------------------------------------------------------------------
def test_the_relay_answers_initialize_through_the_endpoint(cao: CaoServer) -> None:
    term = cao.create_session()
    command, args = mcp_command()
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    lines = [
        init,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    proc = subprocess.run(
        [command, *args],
        input="".join(json.dumps(m) + "\n" for m in lines) + "not json\n",
        env=agent_env(cao, term["id"]),
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    by_id = {m.get("id"): m for m in out}
    assert by_id[1]["result"]["serverInfo"]["name"] == "cao-mcp-server"
    assert "handoff" in {t["name"] for t in by_id[2]["result"]["tools"]}
    assert by_id[None]["error"]["code"] == -32700  # the line that was not JSON
    assert proc.returncode == 0


# --- faults and bad input --------------------------------------------------------------------------
async def test_bad_json_rpc_gets_errors_never_a_500(cao: CaoServer) -> None:
    good = {"X-CAO-Agent-Token": credential(cao, cao.create_session()["id"])}
    cases = [
        b"{not json",
        b"[]",
        b'{"jsonrpc": "2.0", "id": 1, "method": "no/such/method"}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "nope", "arguments": {}}}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "handoff", "arguments": {"timeout": "x"}}}',
        b"\xff\xfe\x00binary",
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": "y" * 100_000}}).encode(),
    ]
    for body in cases:
        resp = rpc(cao, body, good)
        assert resp.status_code < 500, (body[:60], resp.status_code, resp.text[:300])
    stream = cao.client.get("/mcp", headers={**good, "Accept": "text/event-stream"})
    assert stream.status_code == 405 and "POST" in stream.headers["allow"]  # no held stream without sessions
    unknown_session = rpc(
        cao, b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}', {**good, "Mcp-Session-Id": "f" * 32}
    )
    assert unknown_session.status_code < 500
    huge = rpc(
        cao,
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": "' + b"y" * (9 * 2**20) + b'"}}',
        good,
    )
    assert huge.status_code == 413
    assert cao.client.get("/health").json()["status"] == "ok"


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    body=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(
                st.sampled_from(["jsonrpc", "id", "method", "params", "name", "arguments"]), inner, max_size=5
            )
        ),
        max_leaves=12,
    )
)
def test_fuzzed_messages_never_crash_or_wedge_the_endpoint(fuzz_server, body: Any) -> None:
    server, headers = fuzz_server
    resp = rpc(server, json.dumps(body), headers)
    assert resp.status_code < 500, (body, resp.status_code, resp.text[:300])


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    server = CaoServer(tmp_path_factory.mktemp("mcp-fuzz") / "home").start()
    term = server.create_session()
    try:
        yield server, {"X-CAO-Agent-Token": credential(server, term["id"])}
        assert server.client.get("/health").json()["status"] == "ok"
    finally:
        server.cleanup()


async def test_after_a_kill_9_the_same_client_s_next_call_works(cao: CaoServer) -> None:
    sup, other = cao.create_session("code_supervisor"), cao.create_session()
    async with http_session(cao, {"X-CAO-Agent-Token": credential(cao, sup["id"])}) as session:
        first = await call(session, "send_message", message="before", receiver_id=other["id"])
        cao.kill9()
        cao.start()
        cao.wait_status(other["id"], {"idle", "completed"}, timeout=20)  # re-adopted
        second = await call(session, "send_message", message="after", receiver_id=other["id"])
    assert first["success"] is True and second["success"] is True, second
    wait_until(
        lambda: (
            len(cao.client.get(f"/terminals/{other['id']}/inbox/messages", params={"status": "delivered"}).json()) == 2
        ),
        20,
        message="both messages delivered, once each",
    )
