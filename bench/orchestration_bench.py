#!/usr/bin/env python3
"""Orchestration benchmark (issue 3): handoff round trip through the MCP tool,
assign return time, inbox POST → text on the receiver's screen, and 20 parallel
assigns until all 20 callbacks are in the supervisor's inbox.

Starts its own cao-server; the MCP calls go through a real `cao-mcp-server`
process (the stdio relay to cao-server's /mcp) driven by the official MCP client SDK,
speaking for the supervisor with its credential; workers are mock agents that answer
instantly (think time 0). bench/mcp_bench.py runs the parallel assigns against an older
commit too, side by side.

    python bench/orchestration_bench.py [--rounds 10] [--parallel 20]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import time
from pathlib import Path

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from cli_agent_orchestrator.agent_credentials import credential_for

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Server, report  # noqa: E402

WORKER = """---
name: bench_worker
provider: mock_cli
mock:
  delay_ms: 0
  rules:
    - match: 'Job (\\d+)'
      steps:
        - tool: send_message
          args: {message: "done {g1}"}
      reply: "sent {g1}"
---
"""
INSTANT = "---\nname: instant\nprovider: mock_cli\nmock: {delay_ms: 0}\n---\n"


def write_profiles(server: Server) -> None:
    store = server.home / "agent-store"
    store.mkdir(exist_ok=True)
    (store / "bench_worker.md").write_text(WORKER)
    (store / "instant.md").write_text(INSTANT)


def agent_env(server: Server, caller: str) -> dict[str, str]:
    """What an agent's MCP client has in its environment: its terminal id (all an older
    cao-mcp-server read) and its credential (what the relay sends to /mcp)."""
    env = {k: v for k, v in server.env.items() if k not in ("CAO_MCP_TOKEN", "CAO_MCP_URL")}
    env["CAO_TERMINAL_ID"] = caller
    token = server.home / "auth-token"
    if token.exists():
        env["CAO_MCP_TOKEN"] = credential_for(token.read_text().strip(), caller)
    return env


def mcp_params(server: Server, caller: str) -> StdioServerParameters:
    """`cao-mcp-server` of the cao that `server` runs (the console script beside its Python)."""
    exe = shutil.which("cao-mcp-server", path=str(Path(server.python).parent))
    argv = [exe] if exe else [server.python, "-m", "cli_agent_orchestrator.mcp_server.relay"]
    return StdioServerParameters(command=argv[0], args=argv[1:], env=agent_env(server, caller))


async def call(session: ClientSession, tool: str, **args) -> dict:
    result = await session.call_tool(tool, args, read_timeout_seconds=120)
    return result.structured_content or {}


async def parallel_assigns(
    server: Server, session: ClientSession, supervisor: str, parallel: int
) -> tuple[float | None, dict[str, str]]:
    """Seconds from `parallel` assigns at once (each worker calls back with send_message)
    until all their callbacks are in the supervisor's inbox (None if a worker failed), and
    the workers that ended their turn in `error` instead, with what their screen said."""
    server.drain()
    t0 = time.perf_counter()
    outs = await asyncio.gather(
        *(call(session, "assign", agent_profile="bench_worker", message=f"Job {i}") for i in range(parallel))
    )
    ids = {o["terminal_id"] for o in outs}
    got: set[str] = set()
    failed: dict[str, str] = {}

    def callback_or_failure(ev: dict) -> bool:
        if ev.get("type") == "InboxQueued":
            return ev["receiver_id"] == supervisor and ev["sender_id"] in ids
        return ev.get("terminal_id") in ids and ev.get("status") == "error"

    while len(got) + len(failed) < parallel:
        _, ev = server.wait_for(callback_or_failure, timeout=120)
        if ev.get("type") == "InboxQueued":
            got.add(ev["sender_id"])
            print(f"  callback {len(got)}/{parallel} after {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        elif ev["terminal_id"] not in got:
            failed[ev["terminal_id"]] = str(ev.get("reason") or ev)
            print(f"  worker {ev['terminal_id']} failed: {failed[ev['terminal_id']]}", file=sys.stderr)
    return (None if failed else round(time.perf_counter() - t0, 2)), failed


async def run(server: Server, rounds: int, parallel: int) -> dict:
    write_profiles(server)
    sup = server.http.post("/sessions", params={"agent_profile": "instant", "provider": "mock_cli"}).json()
    results: dict = {}
    async with stdio_client(mcp_params(server, sup["id"])) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        handoffs = []
        for i in range(rounds):
            t0 = time.perf_counter()
            out = await call(session, "handoff", agent_profile="instant", message=f"quick {i}")
            handoffs.append((time.perf_counter() - t0) * 1000)
            assert out.get("success") and out["output"] == f"MOCK: quick {i}", out
        results["handoff_round_trip_ms"] = [round(x, 1) for x in handoffs]

        assigns, workers = [], []
        for i in range(rounds):
            t0 = time.perf_counter()
            out = await call(session, "assign", agent_profile="instant", message=f"async {i}")
            assigns.append((time.perf_counter() - t0) * 1000)
            workers.append(out["terminal_id"])
        results["assign_return_ms"] = [round(x, 1) for x in assigns]
        for tid in workers:
            await call(session, "delete_terminal", terminal_id=tid)

        # Inbox POST → the text shows up in an idle receiver's output.
        receiver = server.http.post("/sessions", params={"agent_profile": "instant", "provider": "mock_cli"}).json()
        visible = []
        for i in range(rounds):
            token = f"inbox-token-{i}-{time.time_ns()}"
            server.drain()
            t0 = time.perf_counter()
            server.http.post(
                f"/terminals/{receiver['id']}/inbox/messages", json={"sender_id": "bench", "message": token}
            ).raise_for_status()
            t1, _ = server.wait_for(
                lambda ev, token=token: (
                    ev.get("type") == "TerminalOutput" and ev["terminal_id"] == receiver["id"] and token in ev["data"]
                )
            )
            visible.append((t1 - t0) * 1000)
            server.wait_event(receiver["id"], "completed")
        results["inbox_post_to_visible_ms"] = [round(x, 1) for x in visible]

        # N parallel assigns; each worker calls back with send_message.
        seconds, failed = await parallel_assigns(server, session, sup["id"], parallel)
        if failed:
            raise SystemExit(f"workers failed instead of calling back: {failed}")
        results[f"parallel_{parallel}_assigns_all_callbacks_s"] = seconds
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--parallel", type=int, default=20)
    args = ap.parse_args()
    server = Server(0, pattern="#")
    try:
        results = asyncio.run(run(server, args.rounds, args.parallel))
    finally:
        server.close()
    rows = [
        ("handoff round trip via MCP, median ms", statistics.median(results["handoff_round_trip_ms"]), "< 300"),
        ("assign return via MCP, median ms", statistics.median(results["assign_return_ms"]), "< 50"),
        ("inbox POST → text visible, median ms", statistics.median(results["inbox_post_to_visible_ms"]), "< 50"),
        (
            f"{args.parallel} parallel assigns → all callbacks in inbox, s",
            results[f"parallel_{args.parallel}_assigns_all_callbacks_s"],
            "",
        ),
    ]
    report(rows, results, "orchestration")
    return 0


if __name__ == "__main__":
    sys.exit(main())
