#!/usr/bin/env python3
"""Runtime-core benchmark: spawn → IDLE, turn overhead, output → status-event
latency, a 100 KB message through POST /input, another agent's turn while one agent
floods output, and server CPU/RSS with many idle terminals.

Starts its own cao-server (temporary home, free port, own tmux socket), drives
mock agents, prints a table and writes JSON to bench/results/runtime.json.

    python bench/runtime_bench.py [--spawns 10] [--turns 20] [--think-ms 200] [--idle 20,50]
                                  [--flood-lines 200000] [--paste-kb 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Server, report  # noqa: E402


def spawn(server: Server, profile: str = "developer") -> tuple[float, dict]:
    t0 = time.perf_counter()
    resp = server.http.post("/sessions", params={"agent_profile": profile, "provider": "mock_cli"})
    resp.raise_for_status()
    return time.perf_counter() - t0, resp.json()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spawns", type=int, default=10)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--think-ms", type=int, default=200)
    ap.add_argument("--idle", default="20,50")
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--flood-lines", type=int, default=200_000, help="0 skips the flood measure")
    ap.add_argument("--paste-kb", type=int, default=100, help="size of the pasted message; 0 skips it")
    args = ap.parse_args()
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}

    server = Server(args.think_ms)
    try:
        spawns = [spawn(server) for _ in range(args.spawns)]
        results["spawn_to_idle_ms"] = [round(s * 1000, 1) for s, _ in spawns]
        tid = spawns[0][1]["id"]

        overheads = []
        for i in range(args.turns):
            server.drain()
            t0 = time.perf_counter()
            server.http.post(f"/terminals/{tid}/input", json={"message": f"turn {i}"}).raise_for_status()
            t1 = server.wait_event(tid, "completed")
            overheads.append((t1 - t0) * 1000 - args.think_ms)
        results["turn_overhead_ms"] = [round(o, 1) for o in overheads]

        # Output → status event: keys typed straight into tmux (not through cao) into a
        # mock with think time 0, which prints its reply at once; we time the status event.
        store = server.home / "agent-store"
        store.mkdir(exist_ok=True)
        (store / "instant.md").write_text("---\nname: instant\nprovider: mock_cli\nmock: {delay_ms: 0}\n---\n")
        other = spawn(server, "instant")[1]
        target = f"{other['session_name']}:{other['name']}"
        latencies = []
        for i in range(args.turns):
            server.drain()
            server.tmux("send-keys", "-t", target, "-l", f"ping {i}")
            if i:  # typed text ends the previous "completed": wait until cao has seen it
                server.wait_event(other["id"], "idle")
            server.drain()
            t0 = time.perf_counter()
            server.tmux("send-keys", "-t", target, "Enter")
            t1 = server.wait_event(other["id"], "completed")
            latencies.append((t1 - t0) * 1000)
        results["output_to_status_event_ms"] = [round(x, 1) for x in latencies]

        if args.paste_kb:
            results["paste_input_ms"] = paste(server, other, args.paste_kb * 1000, args.turns)

        proc = psutil.Process(server.proc.pid)
        if args.flood_lines:
            results["flood"] = flood(server, other, proc, args.flood_lines, args.think_ms)

        have = len(spawns)
        for target_count in sorted(int(x) for x in args.idle.split(",")):
            while have < target_count:
                spawn(server)
                have += 1
            time.sleep(2.0)  # let start-up output settle
            cpu0 = proc.cpu_times()
            w0 = time.monotonic()
            time.sleep(args.idle_seconds)
            cpu1 = proc.cpu_times()
            wall = time.monotonic() - w0
            used = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
            results[f"idle_{target_count}"] = {
                "server_cpu_percent_of_one_core": round(100 * used / wall, 2),
                "server_rss_mb": round(proc.memory_info().rss / 2**20, 1),
            }
    finally:
        server.close()

    def med(key: str) -> float:
        return round(statistics.median(results[key]), 1)

    rows = [
        ("spawn → IDLE, median ms", med("spawn_to_idle_ms"), "< 300"),
        (f"turn overhead (think {args.think_ms} ms subtracted), median ms", med("turn_overhead_ms"), "< 50"),
        ("output → status event, median ms", med("output_to_status_event_ms"), "< 50"),
    ]
    if "paste_input_ms" in results:
        rows.append(
            (
                f"{args.paste_kb} KB input → /input answered (paste + verified submit), median ms",
                med("paste_input_ms"),
                "~30 (README)",
            )
        )
    if "flood" in results:
        f = results["flood"]
        rows += [
            (f"another agent's turn, quiet, median ms (think {args.think_ms} ms)", f["quiet_median_ms"], ""),
            (f"... during a {args.flood_lines}-line flood, median ms", f["flood_median_ms"], "< 2× quiet"),
            ("... during the flood, worst ms", f["flood_max_ms"], ""),
            ("flood duration s / server CPU s during it", f["flood_seconds"], f"{f['server_cpu_seconds']} CPU s"),
        ]
    for key in sorted(k for k in results if k.startswith("idle_")):
        rows.append(
            (
                f"{key.split('_')[1]} idle terminals: server CPU % of one core",
                results[key]["server_cpu_percent_of_one_core"],
                "< 2",
            )
        )
        rows.append((f"{key.split('_')[1]} idle terminals: server RSS MB", results[key]["server_rss_mb"], ""))
    report(rows, results, "runtime")
    return 0


# Everything a message may hold that a shell or tmux could take for syntax or keys.
HOSTILE_LINE = "quotes \"double\" 'single' $(rm -rf ~) `id` ${HOME} \t tab ünïcødé 🎉 ; | & > < \\ * ?\n"


def paste(server: Server, agent: dict, chars: int, rounds: int) -> list[float]:
    """POST /input of a `chars`-character hostile message into an instant mock agent: the time
    until the request is answered (one bracketed paste plus the verified submit)."""
    body = (HOSTILE_LINE * (chars // len(HOSTILE_LINE) + 1))[:chars]
    times = []
    for _ in range(rounds):
        server.drain()
        t0 = time.perf_counter()
        server.http.post(f"/terminals/{agent['id']}/input", json={"message": body}).raise_for_status()
        times.append((time.perf_counter() - t0) * 1000)
        server.wait_event(agent["id"], "completed")
    return [round(t, 1) for t in times]


def flood(server: Server, flooder: dict, proc: psutil.Process, lines: int, think_ms: int) -> dict:
    """Another agent's turn latency (input → completed event), quiet and while `flooder`
    prints `lines` lines."""
    quiet_agent = spawn(server)[1]

    def turn(i: int) -> float:
        server.drain()
        t0 = time.perf_counter()
        server.http.post(f"/terminals/{quiet_agent['id']}/input", json={"message": f"turn {i}"}).raise_for_status()
        return (server.wait_event(quiet_agent["id"], "completed", timeout=120) - t0) * 1000

    quiet = [turn(i) for i in range(10)]
    cpu0 = proc.cpu_times()
    t0 = time.perf_counter()
    server.http.post(f"/terminals/{flooder['id']}/input", json={"message": f"__mock_long_{lines}"}).raise_for_status()
    during: list[float] = []
    while not during or server.http.get(f"/terminals/{flooder['id']}").json()["status"] != "completed":
        during.append(turn(1000 + len(during)))
    while server.http.get(f"/terminals/{flooder['id']}").json()["status"] != "completed":
        time.sleep(0.05)
    seconds = time.perf_counter() - t0
    cpu1 = proc.cpu_times()
    return {
        "quiet_ms": [round(x, 1) for x in quiet],
        "flood_ms": [round(x, 1) for x in during],
        "quiet_median_ms": round(statistics.median(quiet), 1),
        "flood_median_ms": round(statistics.median(during), 1),
        "flood_max_ms": round(max(during), 1),
        "flood_seconds": round(seconds, 2),
        "server_cpu_seconds": round(cpu1.user - cpu0.user + cpu1.system - cpu0.system, 2),
    }


if __name__ == "__main__":
    sys.exit(main())
