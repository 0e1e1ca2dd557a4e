#!/usr/bin/env python3
"""Claude Code under cao: spawn → IDLE and turn time, each next to the CLI's own time
(the same binary and flags in a bare tmux pane, no cao, no hooks), and RSS per agent.

Runs the pinned CLI (installed like the tests install it) against the scripted model,
with HOME/XDG/TMPDIR in a temporary directory, a private cao-server and tmux sockets.
Prints a table and writes bench/results/real_claude_code.json.

    python bench/real_claude_code_bench.py [--spawns 5] [--turns 10]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine, report  # noqa: E402
from _real_cli import BarePane, bare_context, bare_figures, bench_parser, cao_figures, scripted_cli  # noqa: E402

from cli_agent_orchestrator.providers import claude_code  # noqa: E402

VERSION = "2.1.197"
REPLY = "Benchmark reply."
IDLE_MARK = "bypass permissions on"


class ClaudePane(BarePane):
    wait_on_kill = True  # Claude writes its state files while it shuts down

    def __init__(self, root: Path, workdir: Path):
        ctx = bare_context(root, workdir)
        launch = claude_code.build_launch(ctx)
        settings = claude_code.settings(ctx)
        settings.pop("hooks")
        path = Path(launch.argv[launch.argv.index("--settings") + 1])
        path.write_text(json.dumps(settings))
        super().__init__("claude", launch.env, launch.argv, workdir)

    def ready(self, screen: str) -> bool:
        return IDLE_MARK in screen

    def done(self, screen: str, prompt: str) -> bool:  # this turn's echo, the reply below it, the footer idle again
        rows = [row.replace("\xa0", " ").rstrip() for row in screen.splitlines()]
        echo = [i for i, row in enumerate(rows) if row == f"❯ {prompt}"]
        return bool(echo) and f"● {REPLY}" in rows[echo[0] :] and "esc to interrupt" not in screen


def process_name(proc: psutil.Process) -> str:
    return (
        "claude" if "claude" in proc.name() else "cao-mcp-server" if "mcp" in " ".join(proc.cmdline()) else proc.name()
    )


def main() -> int:
    args = bench_parser(__doc__).parse_args()
    results: dict = {"machine": machine(), "cli_version": VERSION, "gap_s": args.gap}
    with scripted_cli("@anthropic-ai/claude-code", VERSION, "claude", "cao-bench-claude-", REPLY) as (root, work):
        # A user who has run Claude here before: onboarding done, folder trusted.
        Path(os.environ["HOME"], ".claude.json").write_text(
            json.dumps({"hasCompletedOnboarding": True, "projects": {str(work): {"hasTrustDialogAccepted": True}}})
        )
        # pause: Claude drops an Enter pressed right after its prompt box appears
        results.update(bare_figures(ClaudePane(root, work), args.spawns, args.turns, pause=1.0, gap=args.gap))
        # The first cao turn includes the Enter Claude drops at start-up.
        results.update(
            cao_figures(
                "claude_code", work, args.spawns, range(args.turns), process_name, wait_for_agents=True, gap=args.gap
            )
        )

    def med(key: str, skip: int = 0) -> float:
        return statistics.median(results[key][skip:])

    rss = [sum(r.values()) for r in results["rss_mb_per_agent"]]
    rows = [
        ("bare CLI spawn → idle screen, median ms", med("bare_spawn_ms"), ""),
        ("cao spawn → IDLE, median ms", med("cao_spawn_to_idle_ms"), ""),
        ("  overhead over the bare CLI, ms", med("cao_spawn_to_idle_ms") - med("bare_spawn_ms"), ""),
        ("bare CLI turn, median ms", med("bare_turn_ms"), ""),
        ("bare CLI turn given as cao gives it (paste, Enter), median ms", med("bare_pasted_turn_ms"), ""),
        ("cao turn → COMPLETED (2nd turn on), median ms", med("cao_turn_ms", 1), ""),
        ("  overhead over the bare CLI, ms", med("cao_turn_ms", 1) - med("bare_turn_ms"), ""),
        ("  over the bare turn given as cao gives it, ms", med("cao_turn_ms", 1) - med("bare_pasted_turn_ms"), ""),
        ("bare CLI turn from the first typed key, median ms", med("bare_message_turn_ms"), ""),
        ("  cao turn over that, ms", med("cao_turn_ms", 1) - med("bare_message_turn_ms"), ""),
        ("cao first turn of a fresh agent, ms", results["cao_turn_ms"][0], ""),
        ("RSS per agent (claude + cao-mcp-server), median MB", statistics.median(rss), ""),
    ]
    report(rows, results, "real_claude_code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
