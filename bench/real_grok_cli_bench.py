#!/usr/bin/env python3
"""Grok CLI under cao: spawn → IDLE and turn time next to the CLI's own time (the same
binary, launch and start-up shim in a bare tmux pane without cao), and RSS per agent (the CLI
plus its cao-mcp-server relay).

Runs the pinned CLI (installed like the tests install it) against the scripted model,
HOME/XDG/TMPDIR in a temporary directory, a private cao-server and tmux sockets.
Prints a table and writes bench/results/real_grok_cli.json.

    python bench/real_grok_cli_bench.py [--spawns 5] [--turns 10]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine  # noqa: E402
from _real_cli import (  # noqa: E402
    BarePane,
    answered,
    bare_context,
    bare_figures,
    bench_parser,
    cao_figures,
    report_against_bare,
    scripted_cli,
)

from cli_agent_orchestrator.providers import grok_cli  # noqa: E402

VERSION = "0.0.34"
REPLY = "Benchmark reply."
PLACEHOLDER = "Ask me anything..."
BUSY = "esc to interrupt)"


class GrokPane(BarePane):
    enter_pause = 0.5  # an Enter read together with the typed text becomes part of it
    remove_socket = True

    def __init__(self, root: Path, workdir: Path):
        launch = grok_cli.build_launch(bare_context(root, workdir))
        super().__init__("grok", launch.env, launch.argv, workdir)

    def ready(self, screen: str) -> bool:
        return PLACEHOLDER in screen and "mcps: 1" in screen  # cao's relay connected, as cao waits for

    def done(self, screen: str, prompt: str) -> bool:
        return answered(screen, f"  > {prompt}", f"  ⏺ {REPLY}", BUSY)


def process_name(proc: psutil.Process) -> str:
    cmdline = " ".join(proc.cmdline())
    return "cao-mcp-server" if "mcp" in cmdline else "grok" if "grok" in cmdline else proc.name()


def main() -> int:
    args = bench_parser(__doc__).parse_args()
    results: dict = {"machine": machine(), "cli_version": VERSION, "gap_s": args.gap}
    with scripted_cli(
        "@vibe-kit/grok-cli",
        VERSION,
        "grok",
        "cao-bench-grok-",
        REPLY,
        GROK_API_KEY="scripted",
        GROK_MODEL="fake-model",
    ) as (root, work):
        os.environ["GROK_BASE_URL"] = os.environ["OPENAI_BASE_URL"]  # the scripted model's /v1 for this bench
        results.update(
            bare_figures(
                GrokPane(root, work), args.spawns, args.turns, enter_delay=grok_cli.PROVIDER.enter_delay_s, gap=args.gap
            )
        )
        results.update(cao_figures("grok_cli", work, args.spawns, range(1, args.turns + 1), process_name, gap=args.gap))
    report_against_bare(results, "real_grok_cli")
    return 0


if __name__ == "__main__":
    sys.exit(main())
