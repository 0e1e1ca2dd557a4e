#!/usr/bin/env python3
"""Codex provider benchmark: spawn → IDLE, turn overhead over the CLI's own time, and RSS
per agent, with the real Codex CLI (pinned, installed like the tests do) against the
scripted model, under a private cao-server (temporary HOME, free port, own tmux socket).

    .venv/bin/python bench/real_codex_bench.py [--spawns 5] [--turns 10] [--agents 3]

The CLI's own time of a turn is UserPromptSubmit → Stop as its hooks report them;
overhead = (POST input → `completed` event) − that.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from real_cli_support import npm_binary, real_cli_server  # noqa: E402

from cli_agent_orchestrator.scripted_model.harness import ScriptedModelServer  # noqa: E402

PROFILE = "---\nname: codex_bench\nprovider: codex\nmodel: fake-model\n---\nYou are a benchmark agent.\n"
RULES = [{"match": "say hello", "reply": "Hello."},
         {"match": "print the marker", "steps": [{"tool": "shell", "args": {"command": "echo marker"}},
                                                 {"text": "Printed."}]}]


class Follower:
    """Status events from /events, each stamped with its arrival time."""

    def __init__(self, url: str):
        self.events: queue.Queue[tuple[float, dict]] = queue.Queue()
        self.ready = threading.Event()
        threading.Thread(target=self._run, args=(url,), daemon=True).start()
        if not self.ready.wait(10):
            raise SystemExit("could not follow /events")

    def _run(self, url: str) -> None:
        try:
            with httpx.Client(base_url=url, timeout=None) as client:
                with client.stream("GET", "/events", params={"pattern": "terminal.*.status"}) as resp:
                    for line in resp.iter_lines():
                        self.ready.set()
                        if line.startswith("data: "):
                            self.events.put((time.perf_counter(), json.loads(line[6:])))
        except httpx.HTTPError:
            pass  # the server stopped at the end of the run

    def drain(self) -> None:
        while not self.events.empty():
            self.events.get_nowait()

    def until(self, tid: str, status: str, timeout: float = 60) -> dict[str, float]:
        """Arrival times by source of this terminal's events, up to the first `status`."""
        seen: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        while True:
            t, ev = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            if ev.get("terminal_id") != tid:
                continue
            seen.setdefault(ev["source"], t)
            if ev["status"] == status:
                seen["_end"] = t
                return seen


def rss_mb(tid: str) -> dict[str, float]:
    """Resident memory of every process started for terminal `tid`, by process name."""
    out: dict[str, float] = {}
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("CAO_TERMINAL_ID") == tid:
                argv = proc.cmdline() or [proc.name()]
                name = Path(argv[0]).name
                if name.startswith("python") and len(argv) > 1:  # a console script: name it
                    name = Path(argv[1]).name if argv[1] != "-m" else argv[2]
                out[name] = out.get(name, 0.0) + proc.memory_info().rss / 2**20
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values):7.1f} ms  min {min(values):7.1f}  max {max(values):7.1f}"


def turn(cao, follow: Follower, tid: str, text: str) -> tuple[float, float]:
    follow.drain()
    t0 = time.perf_counter()
    cao.client.post(f"/terminals/{tid}/input", json={"message": text}).raise_for_status()
    seen = follow.until(tid, "completed")
    total = (seen["_end"] - t0) * 1000
    cli = (seen.get("hook:Stop", seen["_end"]) - seen.get("hook:UserPromptSubmit", t0)) * 1000
    return total, cli


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spawns", type=int, default=5)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--agents", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    args = ap.parse_args()
    binary = npm_binary("@openai/codex", "0.171.0", "codex")
    root = Path(tempfile.mkdtemp(prefix="cao-bench-codex-"))
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}, "codex": "0.171.0"}
    with ScriptedModelServer() as model:
        model.set_script("bench", RULES)
        cao = real_cli_server(root, [binary], {"OPENAI_BASE_URL": model.base_url("bench", "/v1"),
                                               "OPENAI_API_KEY": "scripted", "CAO_LOG_LEVEL": "warning"})
        (cao.home / "agent-store").mkdir(parents=True, exist_ok=True)
        (cao.home / "agent-store" / "codex_bench.md").write_text(PROFILE)
        work = root / "work"
        work.mkdir()
        cao.start()
        try:
            follow = Follower(cao.url)

            def spawn(yolo: bool = True) -> tuple[float, dict]:
                t0 = time.perf_counter()
                resp = cao.client.post("/sessions", params={"agent_profile": "codex_bench", "yolo": yolo,
                                                            "working_directory": str(work)})
                resp.raise_for_status()
                return (time.perf_counter() - t0) * 1000, resp.json()

            spawn_ms, first_turn_ms = [], []
            for _ in range(args.spawns):
                elapsed, term = spawn()
                spawn_ms.append(elapsed)
                first_turn_ms.append(turn(cao, follow, term["id"], "please say hello")[0])
                cao.client.delete(f"/sessions/{term['session_name']}")
            results["spawn_to_idle_ms"] = [round(v, 1) for v in spawn_ms]
            results["first_turn_ms"] = [round(v, 1) for v in first_turn_ms]  # includes cao-mcp-server start-up

            _, term = spawn()
            tid = term["id"]
            turn(cao, follow, tid, "please say hello")  # warm: MCP server up, title thread done
            text_turns = [turn(cao, follow, tid, "please say hello") for _ in range(args.turns)]
            tool_turns = [turn(cao, follow, tid, "please print the marker") for _ in range(max(1, args.turns // 2))]
            t0 = time.perf_counter()
            for _ in range(args.turns):
                cao.client.get(f"/terminals/{tid}/output", params={"mode": "last"}).raise_for_status()
            extract_ms = (time.perf_counter() - t0) * 1000 / args.turns
            for key, rows in (("text_turn", text_turns), ("tool_turn", tool_turns)):
                results[f"{key}_total_ms"] = [round(t, 1) for t, _ in rows]
                results[f"{key}_cli_ms"] = [round(c, 1) for _, c in rows]
                results[f"{key}_overhead_ms"] = [round(t - c, 1) for t, c in rows]
            results["output_last_ms"] = round(extract_ms, 1)

            agents = [tid] + [spawn()[1]["id"] for _ in range(args.agents - 1)]
            for other in agents[1:]:
                turn(cao, follow, other, "please say hello")  # each with its MCP server running
            time.sleep(2)  # let start-up allocations settle before reading RSS
            per_agent = {a: rss_mb(a) for a in agents}
            results["rss_mb_per_agent"] = {a: {k: round(v, 1) for k, v in parts.items()}
                                           for a, parts in per_agent.items()}
            totals = [sum(parts.values()) for parts in per_agent.values()]
            server_rss = psutil.Process(cao.proc.pid).memory_info().rss / 2**20 if cao.proc else 0.0
            results["cao_server_rss_mb"] = round(server_rss, 1)
        finally:
            cao.cleanup()
            shutil.rmtree(root, ignore_errors=True)
    print(f"spawn → IDLE            {ms(spawn_ms)}")
    print(f"first turn (MCP start)  {ms(first_turn_ms)}")
    for key in ("text_turn", "tool_turn"):
        print(f"{key:<10} total       {ms(results[f'{key}_total_ms'])}")
        print(f"{key:<10} in CLI      {ms(results[f'{key}_cli_ms'])}")
        print(f"{key:<10} overhead    {ms(results[f'{key}_overhead_ms'])}")
    print(f"GET output?mode=last    {results['output_last_ms']:7.1f} ms")
    print(f"RSS per agent           median {statistics.median(totals):7.1f} MB  "
          f"({', '.join(f'{k} {v:.0f}' for k, v in next(iter(per_agent.values())).items())})")
    print(f"cao-server RSS          {results['cao_server_rss_mb']:7.1f} MB with {len(agents)} codex agents")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
