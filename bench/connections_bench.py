#!/usr/bin/env python3
"""Held connections: the owner's requests while another local user holds, or churns, as many
connections as it can (issue 24). Runs as root: the other user is `cao-stranger` (created if
missing), whose clients run under setpriv with a raised file limit.

Phases: quiet; the stranger holding connections whose headers never end (it tries --held);
the stranger opening and dropping connections as fast as one process can. In each, the
owner's GET /health on a new connection and on a kept-alive one (p50 / p95, ms), an agent turn
(mock agent: input → completed), and cao-server's open files and RSS.

    sudo python bench/connections_bench.py [--held 5000] [--requests 200]
"""

from __future__ import annotations

import argparse
import http.client
import os
import pwd
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Server, machine, report  # noqa: E402

STRANGER = "cao-stranger"
HOLD = r"""
import socket, sys
port, count = int(sys.argv[1]), int(sys.argv[2])
held = []
for _ in range(count):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        held.append(s)
    except OSError:
        pass
print(len(held), flush=True)
sys.stdin.read()
"""
CHURN = r"""
import socket, sys
port = int(sys.argv[1])
print("churning", flush=True)
while True:
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        s.close()
    except OSError:
        pass
"""


def stranger_uid() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam(STRANGER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", STRANGER], check=True
        )
        entry = pwd.getpwnam(STRANGER)
    return entry.pw_uid, entry.pw_gid


def as_stranger(script: str, *args: str) -> subprocess.Popen:
    uid, gid = stranger_uid()
    argv = ["prlimit", "--nofile=20000:20000", "setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    argv += ["/usr/bin/python3", "-I", "-c", script, *args]
    return subprocess.Popen(
        argv, cwd="/", env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def measure(server: Server, terminal_id: str, requests: int) -> dict[str, float]:
    fresh, kept = [], []
    url = f"http://127.0.0.1:{server.port}/health"
    for _ in range(requests):
        t0 = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)  # a new connection each time
        conn.request("GET", "/health")
        assert conn.getresponse().status == 200
        conn.close()
        fresh.append((time.perf_counter() - t0) * 1000)
    with httpx.Client(timeout=30) as client:
        for _ in range(requests):
            t0 = time.perf_counter()
            client.get(url).raise_for_status()
            kept.append((time.perf_counter() - t0) * 1000)
    t0 = time.perf_counter()
    turn = server.http.post(f"/terminals/{terminal_id}/input", json={"message": "ping"}).json()["turn"]
    server.first_by_source(terminal_id, "completed", timeout=60, turn=turn)
    turn_ms = (time.perf_counter() - t0) * 1000
    proc = psutil.Process(server.proc.pid)
    conns = server.http.get("/diagnostics").json()["connections"]
    return {
        "fresh_p50_ms": statistics.median(fresh),
        "fresh_p95_ms": percentile(fresh, 95),
        "kept_p50_ms": statistics.median(kept),
        "kept_p95_ms": percentile(kept, 95),
        "turn_ms": turn_ms,
        "server_open_files": proc.num_fds(),
        "server_rss_mb": proc.memory_info().rss / 2**20,
        "stranger_held": conns["held"].get(str(stranger_uid()[0]), 0),
        "stranger_refused": conns["refused"].get(str(stranger_uid()[0]), 0),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--held", type=int, default=5000)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--churn-seconds", type=float, default=0, help="0: as long as the owner's requests take")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the other local user is impersonated with setpriv")
    server = Server(think_ms=50, env={"CAO_LOG_LEVEL": "warning"})
    results: dict = {"machine": machine(), "held_tried": args.held, "requests": args.requests}
    try:
        term = server.http.post("/sessions", params={"agent_profile": "developer", "provider": "mock_cli"}).json()
        results["quiet"] = measure(server, term["id"], args.requests)
        holder = as_stranger(HOLD, str(server.port), str(args.held))
        results["stranger_connected"] = int(holder.stdout.readline())
        results["holding"] = measure(server, term["id"], args.requests)
        holder.stdin.close()
        holder.wait(60)
        churner = as_stranger(CHURN, str(server.port))
        churner.stdout.readline()
        results["churning"] = measure(server, term["id"], args.requests)
        churner.kill()
        churner.wait(10)
    finally:
        server.close()
    rows = []
    for phase in ("quiet", "holding", "churning"):
        r = results[phase]
        rows += [
            (f"{phase}: /health new connection p50 / p95 (ms)", r["fresh_p50_ms"], f"p95 {r['fresh_p95_ms']:.1f}"),
            (f"{phase}: /health kept-alive p50 / p95 (ms)", r["kept_p50_ms"], f"p95 {r['kept_p95_ms']:.1f}"),
            (f"{phase}: agent turn (ms)", r["turn_ms"], ""),
            (f"{phase}: server open files", r["server_open_files"], f"RSS {r['server_rss_mb']:.0f} MB"),
            (f"{phase}: stranger held / refused", r["stranger_held"], f"refused {r['stranger_refused']}"),
        ]
    report(rows, results, "connections")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
