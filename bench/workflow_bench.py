#!/usr/bin/env python3
"""Workflow-script benchmark: what a `cao workflow` script step costs on top of a plain
run-step call, and how fast a resume replays a long run.

(a) Per-step overhead. A script making N sequential `run_step` calls to the mock agent
    runs through the blocking POST /workflows/runs; a 0-step script run the same way
    measures the fixed cost (journal row, lint gate, spawning Python, importing the shim).
    Script per step = (T(N) - T(0)) / N. Baseline: N direct POST /terminals/run-step
    calls with the same provider/agent/prompts and no env_vars (so no journal, no gate).
(b) Resume replay. A script with R `run_step` calls then `raise SystemExit(1)` runs once
    (it fails after the last step); the blocking POST /workflows/runs/{id}/resume then
    re-runs it from the top and every step must come back replayed (checked: R
    `step.replayed` events in the new generation, attempts still 1, nothing started).
(c) Detached start. POST /workflows/runs:submit (what the MCP tool `workflow_start` calls)
    of a script whose one step keeps the mock busy --detached-step-s seconds: the time until
    it answers, beside the run's own length (GET /workflows/runs/{id}/wait).
(d) Template scanning. validate_spec of a YAML spec whose one prompt is 100,000 unclosed `{{`
    (a lazy regex once made this quadratic: minutes).

Starts its own cao-server (temporary home, free port, own tmux socket) with the mock
agent's think time set by --think-ms (default 0).

    python bench/workflow_bench.py [--steps 20] [--resume-steps 100] [--rounds 5] [--detached-step-s 1.5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Server  # noqa: E402

from cli_agent_orchestrator.workflows.yaml_spec import validate_spec  # noqa: E402

PROVIDER, AGENT = "mock_cli", "reviewer"
RUN_TIMEOUT = 600


def prompt(i: int) -> str:
    return f"bench step {i}"


def loop_script(steps: int, fail_at_end: bool = False) -> str:
    """N sequential run_step calls; each call is also timed inside the script (a
    `nondeterminism` lint warning, harmless here: the timings only go to the output)."""
    lines = [
        "import time",
        "from cao_workflow import emit_output, run_step",
        "",
        "walls = []",
        f"for i in range(1, {steps} + 1):",
        "    t0 = time.perf_counter()",
        f"    run_step({PROVIDER!r}, {AGENT!r}, f'bench step {{i}}')",
        "    walls.append(time.perf_counter() - t0)",
        "emit_output({'steps': len(walls), 'walls': walls})",
    ]
    if fail_at_end:
        lines.append("raise SystemExit(1)")
    return "\n".join(lines) + "\n"


def install(server: Server, name: str, source: str) -> None:
    workflows = server.home / "workflows"
    workflows.mkdir(parents=True, exist_ok=True)
    (workflows / f"{name}.py").write_text(source, encoding="utf-8")


def timed_run(server: Server, name: str) -> tuple[float, dict]:
    t0 = time.perf_counter()
    resp = server.http.post("/workflows/runs", json={"name_or_path": name, "inputs": {}}, timeout=RUN_TIMEOUT)
    elapsed = time.perf_counter() - t0
    resp.raise_for_status()
    return elapsed, resp.json()


def direct_steps(server: Server, steps: int) -> list[float]:
    """Seconds per direct run-step call (no env_vars: no journal, no resume gate)."""
    out = []
    for i in range(1, steps + 1):
        t0 = time.perf_counter()
        resp = server.http.post(
            "/terminals/run-step", json={"provider": PROVIDER, "agent": AGENT, "prompt": prompt(i)}, timeout=RUN_TIMEOUT
        )
        out.append(time.perf_counter() - t0)
        resp.raise_for_status()
        assert resp.json()["last_message"] == f"MOCK: {prompt(i)}", resp.text
    return out


def overhead(server: Server, steps: int, rounds: int) -> dict:
    install(server, "bench_empty", loop_script(0))
    install(server, "bench_loop", loop_script(steps))
    # warm-up: the first terminal and the first script pay one-off costs
    timed_run(server, "bench_empty")
    direct_steps(server, 2)
    empty, loop, direct_total, direct_each, paired, script_each = [], [], [], [], [], []
    for r in range(rounds):
        # the order alternates per round so that a drift in machine load hits both sides
        if r % 2:
            calls = direct_steps(server, steps)
        t, res = timed_run(server, "bench_empty")
        assert res["state"] == "completed" and res["steps"] == [], res
        empty.append(t)
        t, res = timed_run(server, "bench_loop")
        assert res["state"] == "completed" and len(res["steps"]) == steps, res
        assert res["output"]["steps"] == steps, res["output"]
        loop.append(t)
        script_each.extend(res["output"]["walls"])
        if not r % 2:
            calls = direct_steps(server, steps)
        direct_total.append(sum(calls))
        direct_each.extend(calls)
        paired.append(((loop[-1] - empty[-1]) - direct_total[-1]) / steps)
        print(
            f"  round {r + 1}/{rounds}: 0-step script {t_ms(empty[-1])} ms, {steps}-step script "
            f"{t_ms(loop[-1])} ms, {steps} direct calls {t_ms(direct_total[-1])} ms",
            file=sys.stderr,
        )
    t0, tn, dn = statistics.median(empty), statistics.median(loop), statistics.median(direct_total)
    script_per_step = (tn - t0) / steps
    direct_per_step = dn / steps
    return {
        "steps": steps,
        "rounds": rounds,
        "empty_script_s": empty,
        "loop_script_s": loop,
        "direct_total_s": direct_total,
        "empty_script_median_ms": t0 * 1000,
        "loop_script_median_ms": tn * 1000,
        "direct_total_median_ms": dn * 1000,
        "direct_call_median_ms": statistics.median(direct_each) * 1000,
        "script_per_step_ms": script_per_step * 1000,
        "script_per_step_raw_ms": tn / steps * 1000,
        "direct_per_step_ms": direct_per_step * 1000,
        "overhead_per_step_ms": (script_per_step - direct_per_step) * 1000,
        "overhead_per_step_paired_ms": statistics.median(paired) * 1000,
        "overhead_per_step_paired_all_ms": [round(x * 1000, 1) for x in paired],
        # per call, timed around each call (script side / client side): no start-up in it
        "script_call_median_ms": statistics.median(script_each) * 1000,
        "overhead_per_call_median_ms": (statistics.median(script_each) - statistics.median(direct_each)) * 1000,
    }


def resume_replay(server: Server, steps: int, empty_script_ms: float) -> dict:
    install(server, "bench_resume", loop_script(steps, fail_at_end=True))
    t_first, first = timed_run(server, "bench_resume")
    assert first["state"] == "failed" and len(first["steps"]) == steps, first
    run_id = first["run_id"]
    t0 = time.perf_counter()
    resp = server.http.post(f"/workflows/runs/{run_id}/resume", json={}, timeout=RUN_TIMEOUT)
    wall = time.perf_counter() - t0
    resp.raise_for_status()
    second = resp.json()
    assert second["state"] == "failed" and second["kind"] == "error", second
    assert len(second["steps"]) == steps and all(s["attempts"] == 1 for s in second["steps"]), second
    mine = [e for e in all_events(server, run_id) if e["generation"] == second["generation"]]
    replayed = sum(e["type"] == "step.replayed" for e in mine)
    started = sum(e["type"] == "step.started" for e in mine)
    assert replayed == steps and started == 0, (replayed, started)
    return {
        "steps": steps,
        "first_run_s": t_first,
        "resume_wall_ms": wall * 1000,
        "replayed": replayed,
        "resume_per_step_raw_ms": wall / steps * 1000,
        "resume_per_step_ms": (wall * 1000 - empty_script_ms) / steps,
    }


def detached_start(server: Server, step_s: float, rounds: int) -> dict:
    """Milliseconds until POST /workflows/runs:submit answers, and each run's length."""
    install(
        server,
        "bench_detached",
        "\n".join(
            [
                "from cao_workflow import emit_output, run_step",
                f"emit_output(run_step({PROVIDER!r}, {AGENT!r}, '__mock_sleep_{step_s:g}').output)",
                "",
            ]
        ),
    )
    answered, runs = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        resp = server.http.post("/workflows/runs:submit", json={"name_or_path": "bench_detached", "inputs": {}})
        answered.append((time.perf_counter() - t0) * 1000)
        resp.raise_for_status()
        body = resp.json()
        assert body["state"] == "running", body
        done = server.http.get(
            f"/workflows/runs/{body['run_id']}/wait", params={"timeout": RUN_TIMEOUT}, timeout=RUN_TIMEOUT + 30
        ).json()
        runs.append((time.perf_counter() - t0) * 1000)
        assert done["finished"] and done["state"] == "completed", done
    return {
        "step_s": step_s,
        "answered_ms": [round(x, 1) for x in answered],
        "run_ms": [round(x, 1) for x in runs],
        "answered_median_ms": statistics.median(answered),
        "run_median_ms": statistics.median(runs),
    }


def template_scan(rounds: int) -> dict:
    """Milliseconds to validate a spec whose one prompt is 100,000 unclosed `{{`."""
    spec = 'name: d\nsteps:\n  - id: a\n    agent: a\n    prompt: "' + "{{" * 100_000 + '"\n'
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        result = validate_spec(spec)
        times.append((time.perf_counter() - t0) * 1000)
        assert result["status"] == "fail" and result["errors"][0].endswith("(no closing '}}')"), result
    return {"validate_ms": [round(x, 2) for x in times], "validate_median_ms": statistics.median(times)}


def all_events(server: Server, run_id: str) -> list[dict]:
    events: list[dict] = []
    after = 0
    while True:
        page = server.http.get(f"/workflows/runs/{run_id}/events", params={"after_seq": after, "limit": 500}).json()
        events.extend(page["events"])
        if not page["events"]:
            return events
        after = page["next_after_seq"]


def t_ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def print_table(args: argparse.Namespace, a: dict, b: dict, c: dict, d: dict) -> None:
    n, r = args.steps, args.resume_steps
    rows = [
        ("(a) 0-step script run (process start + journal), median", a["empty_script_median_ms"], "ms"),
        (f"(a) {n}-step script run, median", a["loop_script_median_ms"], "ms"),
        (f"(a) {n} direct run-step calls (no env_vars), median total", a["direct_total_median_ms"], "ms"),
        ("(a) script step, (T(N) - T(0)) / N", a["script_per_step_ms"], "ms/step"),
        ("(a) script step, T(N) / N (start-up not subtracted)", a["script_per_step_raw_ms"], "ms/step"),
        ("(a) direct run-step call, total / N", a["direct_per_step_ms"], "ms/step"),
        ("(a) workflow overhead per step (script - direct, of medians)", a["overhead_per_step_ms"], "ms/step"),
        ("(a) workflow overhead per step (median of per-round diffs)", a["overhead_per_step_paired_ms"], "ms/step"),
        ("(a) one call, median: script run_step (timed in the script)", a["script_call_median_ms"], "ms"),
        ("(a) one call, median: direct run-step", a["direct_call_median_ms"], "ms"),
        ("(a) workflow overhead per call (difference of those medians)", a["overhead_per_call_median_ms"], "ms/step"),
        (f"(b) resume replaying {r} steps, blocking wall time", b["resume_wall_ms"], "ms"),
        ("(b) replay per step, wall / R", b["resume_per_step_raw_ms"], "ms/step"),
        ("(b) replay per step, (wall - T(0)) / R", b["resume_per_step_ms"], "ms/step"),
        ("(c) detached start: POST /workflows/runs:submit answered, median", c["answered_median_ms"], "ms"),
        (f"(c) that run ({c['step_s']:g} s step) until it ended, median", c["run_median_ms"], "ms"),
        ("(d) validate a spec whose prompt is 100,000 `{{`, median", d["validate_median_ms"], "ms"),
    ]
    print(
        f"\nworkflow bench: mock agent think {args.think_ms} ms, {args.rounds} rounds, "
        f"N={n}, R={r} (replayed {b['replayed']}/{r})"
    )
    print(f"per-round overhead, ms/step: {a['overhead_per_step_paired_all_ms']}")
    width = max(len(label) for label, _, _ in rows)
    for label, value, unit in rows:
        print(f"{label:<{width}}  {value:>9.1f}  {unit}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20, help="steps in the overhead script (default 20)")
    ap.add_argument("--resume-steps", type=int, default=100, help="steps replayed on resume (default 100)")
    ap.add_argument("--rounds", type=int, default=5, help="repetitions of (a); medians are reported")
    ap.add_argument("--think-ms", type=int, default=0, help="mock agent think time, CAO_MOCK_DELAY_MS")
    ap.add_argument(
        "--detached-step-s",
        type=float,
        default=1.5,
        help="how long the detached run's one step keeps the mock busy (default 1.5)",
    )
    ap.add_argument("--json", type=Path, help="also write the raw figures to this file")
    args = ap.parse_args()
    if args.steps < 1 or args.resume_steps < 1 or args.rounds < 1:
        ap.error("--steps, --resume-steps and --rounds must be at least 1")

    server = Server(args.think_ms, pattern="bench.none")  # the harness's SSE follower stays idle
    try:
        a = overhead(server, args.steps, args.rounds)
        b = resume_replay(server, args.resume_steps, a["empty_script_median_ms"])
        c = detached_start(server, args.detached_step_s, args.rounds)
        d = template_scan(args.rounds)
        print_table(args, a, b, c, d)
    finally:
        server.close()
    if args.json:
        args.json.write_text(
            json.dumps({"overhead": a, "resume": b, "detached_start": c, "template_scan": d}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
