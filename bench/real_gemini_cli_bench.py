#!/usr/bin/env python3
"""Gemini CLI under cao: spawn → IDLE and turn time next to the CLI's own time (the same
binary, flags and settings in a bare tmux pane without cao and without hooks), and RSS
per agent (the CLI plus its cao-mcp-server).

Runs the pinned CLI (installed like the tests install it) against the scripted model,
HOME/XDG/TMPDIR in a temporary directory, a private cao-server and tmux sockets.
Prints a table and writes bench/results/real_gemini_cli.json.

    python bench/real_gemini_cli_bench.py [--spawns 5] [--turns 10]
"""

from __future__ import annotations

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

from cli_agent_orchestrator.providers import gemini_cli  # noqa: E402

VERSION = "0.61.0"
REPLY = "Benchmark reply."
PLACEHOLDER = "Type your message"
BUSY = "(esc to cancel"


class GeminiPane(BarePane):
    enter_pause = 0.5  # Gemini ignores an Enter that follows typed text too closely (it looks pasted)
    remove_socket = True

    def __init__(self, root: Path, workdir: Path):
        launch = gemini_cli.build_launch(bare_context(root, workdir))  # cao adds no hooks to Gemini
        super().__init__("gemini", launch.env, launch.argv, workdir)

    def ready(self, screen: str) -> bool:
        return PLACEHOLDER in screen

    def done(self, screen: str, prompt: str) -> bool:
        return answered(screen, f" > {prompt}", f"✦ {REPLY}", BUSY)


def process_name(proc: psutil.Process) -> str:
    cmdline = " ".join(proc.cmdline())
    return "cao-mcp-server" if "mcp" in cmdline else "gemini" if "gemini" in cmdline else proc.name()


def main() -> int:
    args = bench_parser(__doc__).parse_args()
    results: dict = {"machine": machine(), "cli_version": VERSION, "gap_s": args.gap}
    with scripted_cli("@google/gemini-cli", VERSION, "gemini", "cao-bench-gemini-", REPLY) as (root, work):
        # cao waits for the paste's draw, then this pause; the bare turn waits the pause alone.
        enter_delay = gemini_cli.PROVIDER.pause_after_echo_s
        results.update(
            bare_figures(GeminiPane(root, work), args.spawns, args.turns, enter_delay=enter_delay, gap=args.gap)
        )
        # The first cao turn waits for the MCP server to connect.
        results.update(
            cao_figures("gemini_cli", work, args.spawns, range(1, args.turns + 1), process_name, gap=args.gap)
        )
    report_against_bare(results, "real_gemini_cli")
    return 0


if __name__ == "__main__":
    sys.exit(main())
