"""Shared by the benchmarks: a private cao-server (temporary home, free port, own
tmux socket) with an SSE follower that timestamps every event as it arrives; the
follower alone, for a cao-server started some other way; the report table."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machine() -> dict:
    """What the figures were taken on, for the results file."""
    return {"cpus": os.cpu_count(), "python": sys.version.split()[0]}


class EventFollower:
    """cao-server's events (GET /events?pattern=...) in a queue, each with its arrival time."""

    def __init__(self, url: str, pattern: str = "terminal.*.status"):
        self.url, self.pattern = url, pattern
        self.events: queue.Queue[tuple[float, dict]] = queue.Queue()
        self.connected = threading.Event()
        threading.Thread(target=self._follow, daemon=True).start()
        if not self.connected.wait(10):
            raise SystemExit("could not follow /events")

    def _follow(self) -> None:
        try:
            with httpx.Client(base_url=self.url, timeout=None) as c:
                with c.stream("GET", "/events", params={"pattern": self.pattern}) as resp:
                    for line in resp.iter_lines():
                        self.connected.set()  # the server sends ": connected" once subscribed
                        if line.startswith("data: "):
                            self.events.put((time.perf_counter(), json.loads(line[6:])))
        except httpx.HTTPError:
            pass  # the server went away: it was closed, or the bench is failing anyway

    def wait_event(self, terminal_id: str, status: str, timeout: float = 30) -> float:
        return self.wait_for(lambda ev: ev.get("terminal_id") == terminal_id and ev.get("status") == status, timeout)[0]

    def wait_for(self, predicate, timeout: float = 30) -> tuple[float, dict]:
        """The arrival time and body of the first event satisfying `predicate`."""
        deadline = time.monotonic() + timeout
        while True:
            t, ev = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            if predicate(ev):
                return t, ev

    def first_by_source(
        self, terminal_id: str, status: str, timeout: float = 30, turn: int = 0
    ) -> tuple[float, dict[str, float]]:
        """The arrival time of the terminal's first `status` event of input turn `turn` or
        later and, by source (`hook:Stop`, `screen`, ...), the arrival time of its first event
        from that source up to then. Events of earlier turns (a late `completed` of the turn
        before) are skipped, so they can never end a measurement early."""
        seen: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        while True:
            try:
                t, ev = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise SystemExit(
                    f"terminal {terminal_id} did not reach {status} within {timeout:.0f} s; saw {seen}"
                ) from None
            if ev.get("terminal_id") == terminal_id and ev.get("turn", 0) >= turn:
                seen.setdefault(ev["source"], t)
                if ev["status"] == status:
                    return t, seen

    def drain(self) -> None:
        while not self.events.empty():
            self.events.get_nowait()


class Server(EventFollower):
    """`python` (default: this interpreter) runs cao-server: another virtualenv's Python runs
    another checkout's cao, whose console scripts (cao-mcp-server) then come first on PATH."""

    def __init__(
        self,
        think_ms: int,
        pattern: str = "terminal.*.status",
        env: dict[str, str] | None = None,
        python: str = sys.executable,
    ):
        self.home = Path(tempfile.mkdtemp(prefix="cao-bench-"))
        self.port = free_port()
        self.python = python
        self.env = {
            **os.environ,
            "PATH": os.pathsep.join([str(Path(python).parent), os.environ.get("PATH", "")]),
            "CAO_HOME_DIR": str(self.home),
            "CAO_API_PORT": str(self.port),
            "TMUX_TMPDIR": str(self.home),
            "CAO_MOCK_DELAY_MS": str(think_ms),
            **(env or {}),
        }
        self.env.pop("TMUX", None)
        self.proc = subprocess.Popen(
            [python, "-m", "cli_agent_orchestrator.cli.server", "--log-level", "warning"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=60)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if self.http.get("/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        self.socket = self.http.get("/health").json()["tmux_socket"]
        super().__init__(f"http://127.0.0.1:{self.port}", pattern)

    def tmux(self, *args: str) -> None:
        subprocess.run(["tmux", "-L", self.socket, *args], env=self.env, check=True)

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], env=self.env, capture_output=True)
        shutil.rmtree(self.home, ignore_errors=True)  # the temporary cao home it ran in


def report(rows: list[tuple[str, float, str]], results: dict, name: str) -> None:
    """Print (measure, value, target) rows and write the raw figures to results/<name>.json
    (results/<name>_gap<seconds>s.json for turns timed with quiet before each, --gap)."""
    if results.get("gap_s"):
        name = f"{name}_gap{results['gap_s']:g}s"
    width = max(len(r[0]) for r in rows)
    for label, value, target in rows:
        print(f"{label:<{width}}  {round(value, 1):>8}  {target}")
    write_results(results, name)


def write_results(results: dict, name: str) -> Path:
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(results, indent=2))
    return path
