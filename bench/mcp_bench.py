#!/usr/bin/env python3
"""MCP benchmark (issue 25): cao's tools served by cao-server itself at /mcp ("new": this
checkout) beside cao at an older commit, whose agents each started a `cao-mcp-server` process
of their own ("old": --old REV), measured the same way in one run.

"Old" runs from its own checkout and virtualenv, made once from that commit's own pins under
bench/.old-<sha>/ (ignored by git; delete it to rebuild). Each measure starts a fresh
cao-server per column (temporary home, free port, own tmux socket), old first, then new, one
after the other. Mock agents answer at once (think time 0); the supervisor's calls go through
the official MCP client SDK.

    python bench/mcp_bench.py [--old 04a40a0] [--parallel 20] [--parallel-rounds 1] [--agents 100] [--handoffs 10]
                              [--relay-starts 20] [--spawns 10] [--idle-seconds 10]
                              [--columns old,new] [--measures spawn,handoff,relay,parallel,agents]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import httpx2
import psutil
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Server, machine, write_results  # noqa: E402
from orchestration_bench import agent_env, call, mcp_params, parallel_assigns, write_profiles  # noqa: E402

BENCH = Path(__file__).resolve().parent
DEFAULT_OLD = "04a40a0"  # the last commit before issue 25: one cao-mcp-server process per agent
# An agent with cao's tools (no `tools:` in its profile) that, on "warm <receiver>", calls one
# tool: an old agent's CLI starts its cao-mcp-server then, as a real CLI does as it starts.
TOOLED = """---
name: tooled
provider: mock_cli
mock:
  delay_ms: 0
  rules:
    - match: 'warm (\\w+)'
      steps:
        - tool: send_message
          args: {receiver_id: "{g1}", message: "ok"}
      reply: "warm done"
---
"""
IN_FLIGHT = 4  # agents being started (spawn + their first tool call) at once in the 100-agent measure
MEASURES = ("spawn", "handoff", "relay", "parallel", "agents")


# --- the old checkout --------------------------------------------------------------------
def old_python(rev: str) -> tuple[str, Path]:
    """The commit `rev` names and the Python of a virtualenv holding cao at that commit
    (bench/.old-<sha>/: the tree from `git archive`, installed with its own constraints.txt)."""
    repo = BENCH.parent
    sha = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--short=7", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    root = BENCH / f".old-{sha}"
    python = root / "venv" / "bin" / "python"
    if (root / "installed").exists():
        return sha, python
    print(f"preparing cao at {sha} in {root} (once) ...", file=sys.stderr)
    shutil.rmtree(root, ignore_errors=True)
    tree = root / "tree"
    tree.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", sha], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True)
    pip = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "-c", str(tree / "constraints.txt")]
        + ["-e", str(tree), "-e", str(tree / "testkit")],
        capture_output=True,
        text=True,
    )
    if pip.returncode:
        raise SystemExit(f"pip could not install cao at {sha}:\n{pip.stdout}{pip.stderr}")
    (root / "installed").write_text(sha + "\n")
    return sha, python


# --- helpers -------------------------------------------------------------------------------
def start(column: str, pythons: dict[str, Path]) -> Server:
    server = Server(0, pattern="#", python=str(pythons[column]))
    write_profiles(server)
    (server.home / "agent-store" / "tooled.md").write_text(TOOLED)
    return server


def spawn(server: Server, profile: str = "instant") -> dict:
    resp = server.http.post("/sessions", params={"agent_profile": profile, "provider": "mock_cli"})
    resp.raise_for_status()
    return resp.json()


@asynccontextmanager
async def stdio_session(server: Server, caller: str) -> AsyncIterator[ClientSession]:
    """The official SDK over stdio to the `cao-mcp-server` of the cao `server` runs."""
    async with stdio_client(mcp_params(server, caller)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def http_session(server: Server, caller: str) -> AsyncIterator[ClientSession]:
    """The official SDK over streamable HTTP straight to cao-server's /mcp, with the caller's
    credential, as a CLI that speaks HTTP MCP connects."""
    headers = {"X-CAO-Agent-Token": agent_env(server, caller)["CAO_MCP_TOKEN"]}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as client:
        async with streamable_http_client(f"{server.url}/mcp", http_client=client) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                yield session


def median(values: list[float]) -> float:
    return round(statistics.median(values), 1)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)  # a bench polling the API, not product code


def tmux_server_pid(server: Server) -> int:
    out = subprocess.run(
        ["tmux", "-L", server.socket, "display-message", "-p", "#{pid}"],
        env=server.env,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip())


def agent_tree(server: Server) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """Under the server's tmux: the MCP tool processes (cao-mcp-server, old or relay) and the
    other processes (the agents themselves and their shells)."""
    tools, others = [], []
    for proc in psutil.Process(tmux_server_pid(server)).children(recursive=True):
        try:
            cmdline = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        (tools if "cao-mcp-server" in cmdline or "mcp_server." in cmdline else others).append(proc)
    return tools, others


def memory_mb(procs: list[psutil.Process]) -> dict[str, float]:
    rss = pss = 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except psutil.Error:
            continue
        rss, pss = rss + info.rss, pss + info.pss
    return {"count": len(procs), "rss_mb": round(rss / 2**20, 1), "pss_mb": round(pss / 2**20, 1)}


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def end_stragglers(pids: set[int]) -> None:
    """Tool processes this bench's agents started that outlived their tmux server."""
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            proc.terminate()
            proc.wait(5)
        except psutil.NoSuchProcess:
            pass
        except psutil.TimeoutExpired:
            proc.kill()


# --- the measures ----------------------------------------------------------------------------
def measure_spawn(server: Server, column: str, spawns: int) -> dict:
    """POST /sessions → its answer, which comes once the agent is ready: new, once its CLI has
    listed cao's tools (checked: a McpListed event for it); old, once its prompt is up."""
    spawn(server)  # warm-up, not counted (first imports in the server)
    times, listed = [], 0
    for _ in range(spawns):
        server.drain()
        t0 = time.perf_counter()
        term = spawn(server)
        times.append(round((time.perf_counter() - t0) * 1000, 1))
        assert server.http.get(f"/terminals/{term['id']}").json()["status"] == "idle", term
        if column == "new":
            server.wait_for(lambda ev, tid=term["id"]: ev.get("type") == "McpListed" and ev["terminal_id"] == tid, 5)
            listed += 1
        server.http.delete(f"/terminals/{term['id']}").raise_for_status()
    return {"spawn_to_ready_ms": times, "tools_listed_before_ready": listed}


async def handoff_ms(session: ClientSession, message: str) -> float:
    t0 = time.perf_counter()
    out = await call(session, "handoff", agent_profile="instant", message=message)
    elapsed = round((time.perf_counter() - t0) * 1000, 1)
    assert out.get("success") and out["output"] == f"MOCK: {message}", out
    return elapsed


async def measure_handoff(server: Server, column: str, rounds: int) -> dict:
    """Handoffs to a worker answering at once, from a supervisor's MCP client: over stdio
    (old: its cao-mcp-server; new: the relay) and, new only, over streamable HTTP to /mcp,
    taking turns so that both see the same machine. The first of each is not counted."""
    sup = spawn(server)["id"]
    results: dict = {"stdio_ms": []}
    async with AsyncExitStack() as stack:
        sessions = {"stdio_ms": await stack.enter_async_context(stdio_session(server, sup))}
        if column == "new":
            sessions["http_ms"] = await stack.enter_async_context(http_session(server, sup))
        for key, session in sessions.items():
            await handoff_ms(session, f"warm-up {key}")
            results[key] = []
        for i in range(rounds):
            for key, session in sessions.items():
                results[key].append(await handoff_ms(session, f"quick {i}"))
    return results


def measure_relay(server: Server, starts: int) -> dict:
    """`cao-mcp-server` started as a CLI starts it: the time to its answer to `initialize`
    (new: the relay forwards it to /mcp; old: the server answers itself) and its RSS then."""
    params = mcp_params(server, spawn(server)["id"])
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"},
        },
    }
    times, rss = [], []
    for _ in range(starts):
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [params.command, *params.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=params.env,
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(initialize).encode() + b"\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        times.append(round((time.perf_counter() - t0) * 1000, 1))
        assert answer.get("id") == 1 and "result" in answer, answer
        rss.append(round(psutil.Process(proc.pid).memory_info().rss / 2**20, 1))
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return {"start_to_initialize_ms": times, "rss_mb": rss}


async def measure_parallel(server: Server, column: str, parallel: int) -> dict:
    sup = spawn(server)["id"]
    opened = http_session(server, sup) if column == "new" else stdio_session(server, sup)
    async with opened as session:
        seconds, failed = await parallel_assigns(server, session, sup, parallel)
    return {
        "all_callbacks_s": seconds,
        "workers_failed": failed,
        "supervisor_client": "streamable HTTP" if column == "new" else "stdio",
    }


def measure_agents(server: Server, agents: int, idle_seconds: float) -> dict:
    """`agents` mock agents with cao's tools, each having called one tool (send_message to a
    sink agent): cao-server's RSS growth and every tool process they started, per agent; then
    cao-server's CPU while they all sit idle."""
    sink = spawn(server)["id"]
    server_proc = psutil.Process(server.proc.pid)

    def bring_up(_: int) -> str:
        tid = spawn(server, "tooled")["id"]
        server.http.post(f"/terminals/{tid}/input", json={"message": f"warm {sink}"}).raise_for_status()
        wait_until(
            lambda: server.http.get(f"/terminals/{tid}").json()["status"] in ("completed", "error"),
            120,
            f"agent {tid}'s tool call",
        )
        return tid

    def sink_drained() -> bool:
        for status in ("pending", "delivering"):
            if server.http.get(f"/terminals/{sink}/inbox/messages", params={"status": status, "limit": 1}).json():
                return False
        return True

    bring_up(0)  # warm-up: the server's MCP code and first imports, not counted
    wait_until(sink_drained, 60, "the sink's inbox")
    time.sleep(2.0)  # let start-up output settle
    base_rss = server_proc.memory_info().rss
    base_tools = {p.pid for p in agent_tree(server)[0]}

    t0 = time.perf_counter()
    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        ids = list(pool.map(bring_up, range(agents)))
    up_s = round(time.perf_counter() - t0, 1)
    failed = [tid for tid in ids if server.http.get(f"/terminals/{tid}").json()["status"] != "completed"]
    wait_until(sink_drained, 300, "the sink's inbox")
    time.sleep(3.0)  # let the last deliveries and screens settle
    rss = server_proc.memory_info().rss
    tools, others = agent_tree(server)
    new_tools = [p for p in tools if p.pid not in base_tools]
    tool_mem = memory_mb(new_tools)

    cpu0, tools_cpu0, w0 = server_proc.cpu_times(), cpu_seconds(tools), time.monotonic()
    time.sleep(idle_seconds)
    cpu1, tools_cpu1, wall = server_proc.cpu_times(), cpu_seconds(tools), time.monotonic() - w0
    server_cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    growth_mb = (rss - base_rss) / 2**20
    return {
        "agents": agents,
        "failed_tool_calls": len(failed),
        "failed_tool_call_agents": failed,
        "bring_up_s": up_s,
        "server_rss_before_mb": round(base_rss / 2**20, 1),
        "server_rss_after_mb": round(rss / 2**20, 1),
        "server_rss_growth_mb": round(growth_mb, 1),
        "tool_processes": tool_mem,
        "per_agent_mb": round((growth_mb + tool_mem["rss_mb"]) / agents, 2),
        "per_agent_mb_counting_pss": round((growth_mb + tool_mem["pss_mb"]) / agents, 2),
        "agents_own_processes": memory_mb(others),
        "idle_seconds": round(wall, 1),
        "server_cpu_percent_of_one_core": round(100 * server_cpu / wall, 2),
        "tool_processes_cpu_percent_of_one_core": round(100 * (tools_cpu1 - tools_cpu0) / wall, 2),
        "tool_pids": sorted(p.pid for p in tools),
    }


# --- the run -------------------------------------------------------------------------------
def run_measure(name: str, column: str, args: argparse.Namespace, pythons: dict[str, Path]) -> dict:
    print(f"[{column}] {name} ...", file=sys.stderr)
    server = start(column, pythons)
    pids: set[int] = set()
    try:
        if name == "spawn":
            return measure_spawn(server, column, args.spawns)
        if name == "handoff":
            return asyncio.run(measure_handoff(server, column, args.handoffs))
        if name == "relay":
            return measure_relay(server, args.relay_starts)
        if name == "parallel":
            return asyncio.run(measure_parallel(server, column, args.parallel))
        out = measure_agents(server, args.agents, args.idle_seconds)
        pids = set(out.pop("tool_pids"))
        return out
    finally:
        server.close()
        end_stragglers(pids)


def rows(results: dict, args: argparse.Namespace) -> list[tuple[str, object, object, str]]:
    def get(column: str, *path: str) -> object:
        value: object = results.get(column, {})
        for key in path:
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        if isinstance(value, list):  # numbers: their median; anything else: how many
            if all(isinstance(v, (int, float)) for v in value):
                return median(value) if value else None
            return len(value)
        return value

    def row(label: str, target: str, *path: str, new_path: tuple[str, ...] | None = None):
        return (label, get("old", *path), get("new", *(new_path or path)), target)

    a = args.agents
    return [
        row(
            f"{args.parallel} parallel assigns → all callbacks in the inbox, p50 s",
            "< 4",
            "parallel",
            "all_callbacks_s",
        ),
        row("  ... rounds in which a worker failed instead of calling back", "0", "parallel", "failed_rounds"),
        row(f"{a} agents: memory beyond the agents, per agent, MB", "< 5", "agents", "per_agent_mb"),
        row("  ... counting the tool processes' PSS instead of RSS, MB", "", "agents", "per_agent_mb_counting_pss"),
        row("  ... cao-server RSS growth, MB", "", "agents", "server_rss_growth_mb"),
        row("  ... tool processes (cao-mcp-server)", "", "agents", "tool_processes", "count"),
        row("  ... their RSS together, MB", "", "agents", "tool_processes", "rss_mb"),
        row(f"{a} agents idle: cao-server CPU, % of one core", "", "agents", "server_cpu_percent_of_one_core"),
        row(
            f"{a} agents idle: tool processes' CPU, % of one core",
            "",
            "agents",
            "tool_processes_cpu_percent_of_one_core",
        ),
        row(f"bringing up the {a} (spawn + one tool call, {IN_FLIGHT} at a time), s", "", "agents", "bring_up_s"),
        row("  ... agents whose tool call failed", "0", "agents", "failed_tool_calls"),
        row("handoff p50 ms: SDK over stdio (old server / relay)", "< 300", "handoff", "stdio_ms"),
        row("handoff p50 ms: SDK over streamable HTTP to /mcp", "< 300", "handoff", "http_ms"),
        row("cao-mcp-server start → initialize answered, p50 ms", "< 150", "relay", "start_to_initialize_ms"),
        row("cao-mcp-server RSS once up, p50 MB", "< 20", "relay", "rss_mb"),
        row("spawn → ready (new: tools listed; old: idle), p50 ms", "", "spawn", "spawn_to_ready_ms"),
    ]


def print_table(table: list[tuple[str, object, object, str]], old: str) -> None:
    def cell(value: object) -> str:
        if value is None:
            return "—"
        return f"{value:g}" if isinstance(value, float) else str(value)

    header = ("measure", f"old ({old})", "new", "target")
    width = max(len(r[0]) for r in [header, *table])
    print(f"{header[0]:<{width}}  {header[1]:>15}  {header[2]:>8}  {header[3]}")
    for label, old_value, new_value, target in table:
        print(f"{label:<{width}}  {cell(old_value):>15}  {cell(new_value):>8}  {target}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", default=DEFAULT_OLD, help="the commit to compare with (default %(default)s)")
    ap.add_argument("--parallel", type=int, default=20)
    ap.add_argument("--parallel-rounds", type=int, default=1, help="each on a fresh server per column")
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--handoffs", type=int, default=10)
    ap.add_argument("--relay-starts", type=int, default=20)
    ap.add_argument("--spawns", type=int, default=10)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--columns", default="old,new", help="old,new (default), or one of them")
    ap.add_argument("--measures", default=",".join(MEASURES), help="a subset of " + ",".join(MEASURES))
    args = ap.parse_args()
    columns = [c for c in ("old", "new") if c in args.columns.split(",")]
    measures = [m for m in MEASURES if m in args.measures.split(",")]

    pythons = {"new": Path(sys.executable)}
    results: dict = {"machine": machine(), "load_before": os.getloadavg(), "old_rev": None, "in_flight": IN_FLIGHT}
    if "old" in columns:
        results["old_rev"], pythons["old"] = old_python(args.old)
    t0 = time.perf_counter()
    for name in measures:
        for _ in range(args.parallel_rounds if name == "parallel" else 1):
            for column in columns:  # one after the other, the old one first
                out = run_measure(name, column, args, pythons)
                if name != "parallel":
                    results.setdefault(column, {})[name] = out
                    continue
                merged = results.setdefault(column, {}).setdefault(
                    name, {"all_callbacks_s": [], "failed_rounds": 0, "workers_failed": {}}
                )
                if out["all_callbacks_s"] is None:
                    merged["failed_rounds"] += 1
                else:
                    merged["all_callbacks_s"].append(out["all_callbacks_s"])
                merged["workers_failed"].update(out["workers_failed"])
                merged["supervisor_client"] = out["supervisor_client"]
    results["wall_s"] = round(time.perf_counter() - t0, 1)
    results["load_after"] = os.getloadavg()  # 1/5/15-minute load averages: others on this machine
    print_table(rows(results, args), results["old_rev"] or args.old)
    name = "mcp" if len(columns) == 2 and len(measures) == len(MEASURES) else "mcp_partial"
    print(f"JSON: {write_results(results, name)}; {results['wall_s']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
