#!/usr/bin/env python3
"""Codex provider benchmark: spawn → IDLE, turn overhead over the CLI's own time, and RSS
per agent, with the real Codex CLI (pinned, installed like the tests do) against the
scripted model, under a private cao-server (temporary HOME, free port, own tmux socket).

    .venv/bin/python bench/real_codex_bench.py [--spawns 5] [--turns 10] [--agents 3]

The CLI's own time of a turn is UserPromptSubmit → Stop as its hooks report them;
overhead = (POST input → `completed` event) − that. That own time includes the hooks' cost,
so the bench also times the bare CLI (the same binary and overrides without cao's hooks, in
a bare tmux pane) against cao's turn, as the other real-CLI benches do; those figures go to
bench/results/real_codex.json.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import EventFollower, machine, report  # noqa: E402
from _real_cli import (  # noqa: E402
    BarePane,
    agent_rss_mb,
    bare_context,
    bare_figures,
    bench_parser,
    cao_figures,
    fresh_agents,
    scripted_cli,
    timed_spawn,
    timed_turn,
    turn_figures,
)
from real_cli_support import npm_binary, real_cli_server  # noqa: E402

from cao_testkit.scripted_model.harness import ScriptedModelServer  # noqa: E402
from cli_agent_orchestrator.providers import codex  # noqa: E402

PROFILE = "---\nname: codex_bench\nprovider: codex\nmodel: fake-model\n---\nYou are a benchmark agent.\n"
RULES = [
    {"match": "say hello", "reply": "Hello."},
    {
        "match": "print the marker",
        "steps": [{"tool": "shell", "args": {"command": "echo marker"}}, {"text": "Printed."}],
    },
]


REPLY = "Benchmark reply."


class CodexPane(BarePane):
    """Codex with cao's launch for a yolo agent, minus cao's hooks."""

    def __init__(self, root: Path, workdir: Path):
        ctx = bare_context(root, workdir)
        codex.build_launch(ctx)  # the per-terminal directory; its script is replaced below
        argv = ["codex", "--no-daemon", "--no-alt-screen", "--dangerously-bypass-approvals-and-sandbox"]
        for key, value in codex.overrides(ctx):
            if not key.startswith(("hooks.", "features.hooks")):
                argv += ["-c", f"{key}={codex.toml(value)}"]
        super().__init__("codex", {"RUST_BACKTRACE": "0"}, argv, workdir)

    def ready(self, screen: str) -> bool:  # the composer, and the footer's model · cwd row (session configured)
        rows = [row.rstrip() for row in screen.splitlines()]
        footer = any(row.endswith(f" · {self.workdir}") for row in rows)
        return footer and any(row.startswith("› ") for row in rows)

    def done(self, screen: str, prompt: str) -> bool:
        rows = [row.rstrip() for row in screen.splitlines()]
        echo = [i for i, row in enumerate(rows) if row == f"› {prompt}"]
        after = rows[echo[-1] :] if echo else []
        # Any answer row ("• …"; the scripted model's reply text varies with the endpoint), then the turn's end row.
        answer = next((i for i, row in enumerate(after) if row.startswith("• ")), None)
        ended = answer is not None and any(row.lstrip().startswith("Worked for") for row in after[answer:])
        return ended and "esc to interrupt" not in screen


def bare_against_cao(spawns: int, turns: int, gap: float = 0.0) -> dict:
    """The bare CLI's turns next to cao's (the same "developer" yolo agent the other benches use)."""
    results: dict = {"machine": machine(), "cli_version": "0.171.0", "gap_s": gap}
    with scripted_cli("@openai/codex", "0.171.0", "codex", "cao-bench-codex-bare-", REPLY) as (root, work):
        results.update(bare_figures(CodexPane(root, work), spawns, turns, pause=1.0, gap=gap))
        results.update(cao_figures("codex", work, spawns, range(1, turns + 1), process_name, gap=gap))
    bare, cao = statistics.median(results["bare_turn_ms"]), statistics.median(results["cao_turn_ms"][1:])
    pasted = statistics.median(results["bare_pasted_turn_ms"])
    rows = [
        ("bare CLI turn, median ms", bare, ""),
        ("bare CLI turn given as cao gives it (paste, Enter), median ms", pasted, ""),
        ("cao turn → COMPLETED (2nd turn on), median ms", cao, ""),
        ("  overhead over the bare CLI, ms", cao - bare, ""),
        ("  over the bare turn given as cao gives it, ms", cao - pasted, ""),
        ("bare CLI turn from the first typed key, median ms", statistics.median(results["bare_message_turn_ms"]), ""),
        ("  cao turn over that, ms", cao - statistics.median(results["bare_message_turn_ms"]), ""),
    ]
    report(rows, results, "real_codex")
    return results


def process_name(proc: psutil.Process) -> str:
    argv = proc.cmdline() or [proc.name()]
    name = Path(argv[0]).name
    if name.startswith("python") and len(argv) > 1:  # a console script: name it
        name = Path(argv[1]).name if argv[1] != "-m" else argv[2]
    return name


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values):7.1f} ms  min {min(values):7.1f}  max {max(values):7.1f}"


def turn(cao, follow: EventFollower, tid: str, text: str) -> tuple[float, float]:
    """(total ms, the CLI's own ms: UserPromptSubmit → Stop as its hooks report them)."""
    return timed_turn(cao, follow, tid, text, "hook:UserPromptSubmit", "hook:Stop", timeout=60)


def main() -> int:
    ap = bench_parser(__doc__, spawns=5, turns=10, agents=3)
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    args = ap.parse_args()
    bare_against_cao(args.spawns, args.turns, args.gap)
    binary = npm_binary("@openai/codex", "0.171.0", "codex")
    root = Path(tempfile.mkdtemp(prefix="cao-bench-codex-"))
    results: dict = {"machine": machine(), "codex": "0.171.0"}
    with ScriptedModelServer() as model:
        model.set_script("bench", RULES)
        cao = real_cli_server(
            root,
            [binary],
            {
                "OPENAI_BASE_URL": model.base_url("bench", "/v1"),
                "OPENAI_API_KEY": "scripted",
                "CAO_LOG_LEVEL": "warning",
            },
        )
        (cao.home / "agent-store").mkdir(parents=True, exist_ok=True)
        (cao.home / "agent-store" / "codex_bench.md").write_text(PROFILE)
        work = root / "work"
        work.mkdir()
        cao.start()
        try:
            follow = EventFollower(cao.url)

            def spawn() -> tuple[float, dict]:
                return timed_spawn(cao, {"agent_profile": "codex_bench", "yolo": True, "working_directory": str(work)})

            spawn_ms, first_turn_ms = fresh_agents(
                cao, spawn, lambda tid: turn(cao, follow, tid, "please say hello"), args.spawns
            )
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
            results.update(turn_figures("text_turn", "cli", text_turns))
            results.update(turn_figures("tool_turn", "cli", tool_turns))
            results["output_last_ms"] = round(extract_ms, 1)

            agents = [tid] + [spawn()[1]["id"] for _ in range(args.agents - 1)]
            for other in agents[1:]:
                turn(cao, follow, other, "please say hello")  # each with its MCP server running
            time.sleep(2)  # let start-up allocations settle before reading RSS
            per_agent = {a: agent_rss_mb(a, process_name) for a in agents}
            results["rss_mb_per_agent"] = {
                a: {k: round(v, 1) for k, v in parts.items()} for a, parts in per_agent.items()
            }
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
    print(
        f"RSS per agent           median {statistics.median(totals):7.1f} MB  "
        f"({', '.join(f'{k} {v:.0f}' for k, v in next(iter(per_agent.values())).items())})"
    )
    print(f"cao-server RSS          {results['cao_server_rss_mb']:7.1f} MB with {len(agents)} codex agents")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
