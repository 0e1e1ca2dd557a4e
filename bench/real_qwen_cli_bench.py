#!/usr/bin/env python3
"""Qwen Code under cao: spawn → IDLE and turn time next to the CLI's own time (the same
binary, flags and settings in a bare tmux pane without cao and without hooks), and RSS
per agent (the CLI plus its cao-mcp-server).

Runs the pinned CLI (installed like the tests install it) against the scripted model,
HOME/XDG/TMPDIR in a temporary directory, a private cao-server and tmux sockets.
Prints a table and writes bench/results/real_qwen_cli.json.

    python bench/real_qwen_cli_bench.py [--spawns 5] [--turns 10]
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
    drop_hooks,
    report_against_bare,
    scripted_cli,
)

from cli_agent_orchestrator.providers import qwen_cli  # noqa: E402

VERSION = "0.15.10"
REPLY = "Benchmark reply."
PLACEHOLDER = "Type your message"
BUSY = "esc to cancel)"
STARTING = ("Initializing...", "Connecting to MCP servers")  # not ready for input yet


class QwenPane(BarePane):
    enter_pause = 0.5  # an Enter that follows typed text too closely reads as part of a paste
    remove_socket = True

    def __init__(self, root: Path, workdir: Path):
        launch = qwen_cli.build_launch(bare_context(root, workdir))
        drop_hooks(Path(launch.env["QWEN_CODE_SYSTEM_SETTINGS_PATH"]))
        super().__init__("qwen", launch.env, launch.argv, workdir)

    def ready(self, screen: str) -> bool:
        return PLACEHOLDER in screen and not any(cue in screen for cue in STARTING)

    def done(self, screen: str, prompt: str) -> bool:
        return answered(screen, f"  > {prompt}", f"  ✦ {REPLY}", BUSY)


def process_name(proc: psutil.Process) -> str:
    cmdline = " ".join(proc.cmdline())
    return "cao-mcp-server" if "mcp" in cmdline else "qwen" if "qwen" in cmdline else proc.name()


def main() -> int:
    args = bench_parser(__doc__).parse_args()
    results: dict = {"machine": machine(), "cli_version": VERSION, "gap_s": args.gap}
    # Qwen takes its model name from the environment.
    with scripted_cli("@qwen-code/qwen-code", VERSION, "qwen", "cao-bench-qwen-", REPLY, OPENAI_MODEL="fake-model") as (
        root,
        work,
    ):
        results.update(
            bare_figures(
                QwenPane(root, work), args.spawns, args.turns, enter_delay=qwen_cli.PROVIDER.enter_delay_s, gap=args.gap
            )
        )
        results.update(cao_figures("qwen_cli", work, args.spawns, range(1, args.turns + 1), process_name, gap=args.gap))
    report_against_bare(results, "real_qwen_cli")
    return 0


if __name__ == "__main__":
    sys.exit(main())
