#!/usr/bin/env python3
"""opencode provider benchmark: spawn → IDLE, turn overhead over opencode's own time, and RSS
per agent, with the real opencode (pinned, installed as the tests install it) against the
scripted model, under a private cao-server (temporary HOME, free port, own tmux socket).

    .venv/bin/python bench/real_opencode_cli_bench.py [--spawns 3] [--turns 8] [--agents 2]

opencode's own time of a turn: its status plugin's `session.busy` → `session.idle`
events (the idle one waits until the answer is on screen, so that wait is counted as
opencode's); cao's overhead = (POST input → `completed` event) − that. Each agent is
~700 MB: keep --agents small on a shared machine.
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

VERSION = "1.18.33"
PROFILE = "---\nname: oc_bench\nprovider: opencode_cli\n---\nYou are a benchmark agent.\n"
RULES = [{"match": "say hello", "reply": "Hello."},
         {"match": "print the marker", "steps": [{"tool": "shell", "args": {"command": "echo marker"}},
                                                 {"text": "Printed."}]}]


class StatusEvents:
    """cao's status events (GET /events), each stamped with its arrival time."""

    def __init__(self, url: str):
        self.queue: queue.Queue[tuple[float, dict]] = queue.Queue()
        self.ready = threading.Event()
        threading.Thread(target=self._follow, args=(url,), daemon=True).start()
        if not self.ready.wait(10):
            raise SystemExit("could not follow /events")

    def _follow(self, url: str) -> None:
        try:
            with httpx.Client(base_url=url, timeout=None) as client, \
                    client.stream("GET", "/events", params={"pattern": "terminal.*.status"}) as resp:
                for line in resp.iter_lines():
                    self.ready.set()
                    if line.startswith("data: "):
                        self.queue.put((time.perf_counter(), json.loads(line[6:])))
        except httpx.HTTPError:
            pass  # the server went away at the end of the run

    def clear(self) -> None:
        while not self.queue.empty():
            self.queue.get_nowait()

    def first_time_by_source(self, tid: str, until: str, timeout: float = 120) -> dict[str, float]:
        seen: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        while True:
            try:
                t, ev = self.queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise SystemExit(f"terminal {tid} did not reach {until} within {timeout:.0f} s; saw {seen}") from None
            if ev.get("terminal_id") == tid:
                seen.setdefault(ev["source"], t)
                if ev["status"] == until:
                    seen["end"] = t
                    return seen


def agent_rss_mb(tid: str) -> dict[str, float]:
    """Resident memory of the processes started for terminal `tid`, by program name."""
    out: dict[str, float] = {}
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("CAO_TERMINAL_ID") != tid:
                continue
            argv = proc.cmdline() or [proc.name()]
            name = Path(argv[1] if Path(argv[0]).name.startswith("python") and len(argv) > 1 else argv[0]).name
            out[name] = out.get(name, 0.0) + proc.memory_info().rss / 2**20
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):8.1f} ms   min {min(values):8.1f}   max {max(values):8.1f}"


def run_turn(cao, events: StatusEvents, tid: str, text: str) -> tuple[float, float]:
    """(total ms, opencode's own ms) for one turn."""
    events.clear()
    t0 = time.perf_counter()
    cao.client.post(f"/terminals/{tid}/input", json={"message": text}).raise_for_status()
    seen = events.first_time_by_source(tid, "completed")
    own = seen.get("hook:session.idle", seen["end"]) - seen.get("hook:session.busy", t0)
    return (seen["end"] - t0) * 1000, own * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spawns", type=int, default=3)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--agents", type=int, default=2)
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    args = ap.parse_args()
    binary = npm_binary("opencode-ai", VERSION, "opencode")
    root = Path(tempfile.mkdtemp(prefix="cao-bench-opencode-"))
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}, "opencode": VERSION}
    with ScriptedModelServer() as model:
        model.set_script("bench", RULES)
        cao = real_cli_server(root, [binary], {"CAO_LOG_LEVEL": "warning"})
        config = Path(cao.env["XDG_CONFIG_HOME"]) / "opencode" / "opencode.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps({
            "$schema": "https://opencode.ai/config.json", "model": "scripted/fake-model",
            "small_model": "scripted/fake-model",
            "provider": {"scripted": {"npm": "@ai-sdk/openai-compatible", "name": "Scripted",
                                      "options": {"baseURL": model.base_url("bench", "/v1"), "apiKey": "x"},
                                      "models": {"fake-model": {"name": "Fake Model", "tool_call": True}}}}}))
        (cao.home / "agent-store").mkdir(parents=True, exist_ok=True)
        (cao.home / "agent-store" / "oc_bench.md").write_text(PROFILE)
        work = root / "work"
        work.mkdir()
        cao.start()
        try:
            events = StatusEvents(cao.url)

            def spawn() -> tuple[float, dict]:
                t0 = time.perf_counter()
                resp = cao.client.post("/sessions", params={"agent_profile": "oc_bench", "yolo": True,
                                                            "working_directory": str(work)}, timeout=180)
                resp.raise_for_status()
                return (time.perf_counter() - t0) * 1000, resp.json()

            spawn_ms, first_ms = [], []
            for _ in range(args.spawns):
                elapsed, term = spawn()
                spawn_ms.append(elapsed)
                first_ms.append(run_turn(cao, events, term["id"], "please say hello")[0])
                cao.client.delete(f"/sessions/{term['session_name']}")
            results["spawn_to_idle_ms"] = [round(v, 1) for v in spawn_ms]
            results["first_turn_ms"] = [round(v, 1) for v in first_ms]

            _, term = spawn()
            tid = term["id"]
            run_turn(cao, events, tid, "please say hello")  # warm: title generation and MCP start done
            rows: dict[str, list[tuple[float, float]]] = {"text": [], "shell": []}
            for i in range(args.turns):
                rows["text"].append(run_turn(cao, events, tid, f"please say hello {i}"))
                rows["shell"].append(run_turn(cao, events, tid, f"please print the marker {i}"))
            for kind, pairs in rows.items():
                results[f"{kind}_turn_total_ms"] = [round(a, 1) for a, _ in pairs]
                results[f"{kind}_turn_opencode_ms"] = [round(b, 1) for _, b in pairs]
                results[f"{kind}_turn_overhead_ms"] = [round(a - b, 1) for a, b in pairs]
            terms = [term] + [spawn()[1] for _ in range(args.agents - 1)]
            time.sleep(5)  # let start-up settle before reading memory (a measurement, not a sync)
            results["rss_mb_per_agent"] = [{k: round(v, 1) for k, v in agent_rss_mb(t["id"]).items()} for t in terms]
        except SystemExit:
            print((cao.home / "server.out").read_text()[-3000:], file=sys.stderr)
            out = cao.client.get(f"/terminals/{tid}/output").json().get("output", "") if "tid" in locals() else ""
            print(out[-3000:], file=sys.stderr)
            raise
        finally:
            cao.cleanup()
            shutil.rmtree(root, ignore_errors=True)

    print(f"opencode {VERSION} on {os.cpu_count()} CPUs")
    print(f"spawn → idle       {summary(results['spawn_to_idle_ms'])}")
    print(f"first turn         {summary(results['first_turn_ms'])}")
    for kind in ("text", "shell"):
        print(f"{kind:5} turn total   {summary(results[f'{kind}_turn_total_ms'])}")
        print(f"{kind:5} opencode     {summary(results[f'{kind}_turn_opencode_ms'])}")
        print(f"{kind:5} cao overhead {summary(results[f'{kind}_turn_overhead_ms'])}")
    for i, rss in enumerate(results["rss_mb_per_agent"]):
        print(f"agent {i} RSS        {sum(rss.values()):7.1f} MB  {rss}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
