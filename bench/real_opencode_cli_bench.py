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

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import EventFollower, machine  # noqa: E402
from _real_cli import agent_rss_mb, bench_parser, fresh_agents, timed_spawn, timed_turn, turn_figures  # noqa: E402
from real_cli_support import npm_binary, real_cli_server  # noqa: E402

from cao_testkit.scripted_model.harness import ScriptedModelServer  # noqa: E402

VERSION = "1.18.33"
PROFILE = "---\nname: oc_bench\nprovider: opencode_cli\n---\nYou are a benchmark agent.\n"
RULES = [
    {"match": "say hello", "reply": "Hello."},
    {
        "match": "print the marker",
        "steps": [{"tool": "shell", "args": {"command": "echo marker"}}, {"text": "Printed."}],
    },
]


def process_name(proc: psutil.Process) -> str:
    argv = proc.cmdline() or [proc.name()]
    return Path(argv[1] if Path(argv[0]).name.startswith("python") and len(argv) > 1 else argv[0]).name


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):8.1f} ms   min {min(values):8.1f}   max {max(values):8.1f}"


def run_turn(cao, events: EventFollower, tid: str, text: str) -> tuple[float, float]:
    """(total ms, opencode's own ms: its status plugin's session.busy → session.idle) for one turn."""
    return timed_turn(cao, events, tid, text, "hook:session.busy", "hook:session.idle", timeout=120)


def main() -> int:
    ap = bench_parser(__doc__, spawns=3, turns=8, agents=2)
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    args = ap.parse_args()
    binary = npm_binary("opencode-ai", VERSION, "opencode")
    root = Path(tempfile.mkdtemp(prefix="cao-bench-opencode-"))
    results: dict = {"machine": machine(), "opencode": VERSION}
    with ScriptedModelServer() as model:
        model.set_script("bench", RULES)
        cao = real_cli_server(root, [binary], {"CAO_LOG_LEVEL": "warning"})
        config = Path(cao.env["XDG_CONFIG_HOME"]) / "opencode" / "opencode.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(
            json.dumps(
                {
                    "$schema": "https://opencode.ai/config.json",
                    "model": "scripted/fake-model",
                    "small_model": "scripted/fake-model",
                    "provider": {
                        "scripted": {
                            "npm": "@ai-sdk/openai-compatible",
                            "name": "Scripted",
                            "options": {"baseURL": model.base_url("bench", "/v1"), "apiKey": "x"},
                            "models": {"fake-model": {"name": "Fake Model", "tool_call": True}},
                        }
                    },
                }
            )
        )
        (cao.home / "agent-store").mkdir(parents=True, exist_ok=True)
        (cao.home / "agent-store" / "oc_bench.md").write_text(PROFILE)
        work = root / "work"
        work.mkdir()
        cao.start()
        try:
            events = EventFollower(cao.url)

            def spawn() -> tuple[float, dict]:
                params = {"agent_profile": "oc_bench", "yolo": True, "working_directory": str(work)}
                return timed_spawn(cao, params, timeout=180)

            spawn_ms, first_ms = fresh_agents(
                cao, spawn, lambda tid: run_turn(cao, events, tid, "please say hello"), args.spawns
            )
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
                results.update(turn_figures(f"{kind}_turn", "opencode", pairs))
            terms = [term] + [spawn()[1] for _ in range(args.agents - 1)]
            time.sleep(5)  # let start-up settle before reading memory (a measurement, not a sync)
            results["rss_mb_per_agent"] = [
                {k: round(v, 1) for k, v in agent_rss_mb(t["id"], process_name).items()} for t in terms
            ]
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
