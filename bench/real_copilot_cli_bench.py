#!/usr/bin/env python3
"""GitHub Copilot CLI under cao: spawn → IDLE and turn time next to the CLI's own time (the same
binary, flags and files in a bare tmux pane without cao and without hooks), and RSS per agent.

Runs the pinned CLI (installed like the tests install it) against the scripted model through
Copilot's BYOK variables, HOME/XDG/TMPDIR in a temporary directory, a private cao-server and tmux
sockets. Prints a table and writes bench/results/real_copilot_cli.json.

    python bench/real_copilot_cli_bench.py [--spawns 5] [--turns 10]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine  # noqa: E402
from _real_cli import (  # noqa: E402
    BarePane,
    bare_context,
    bare_figures,
    bench_parser,
    cao_figures,
    report_against_bare,
    scripted_cli,
)

from cli_agent_orchestrator.providers import copilot_cli  # noqa: E402

VERSION = "1.0.102"
REPLY = "Benchmark reply."
TRUST = "Do you trust the files in this folder?"


def footer(screen: str) -> str:
    rows = [row for row in screen.splitlines() if row.strip()]
    return rows[-1] if rows else ""


class CopilotPane(BarePane):
    enter_pause = 0.5  # as the provider: Enter once the composer shows the text
    remove_socket = True
    wait_on_kill = True

    def __init__(self, root: Path, workdir: Path):
        launch = copilot_cli.build_launch(bare_context(root, workdir))
        plugin = Path(launch.argv[launch.argv.index("--plugin-dir") + 1])
        (plugin / "hooks.json").write_text(json.dumps({"version": 1, "hooks": {}}))  # no cao-hook runs
        super().__init__("copilot", launch.env, launch.argv, workdir)

    def ready(self, screen: str) -> bool:
        if TRUST in screen:  # as cao does: this session only, the highlighted "Yes"
            self.tmux("send-keys", "-t", "b", "Enter")
            return False
        return "open sidebar" in footer(screen)

    def done(self, screen: str, prompt: str) -> bool:
        rows = [row.rstrip().removesuffix("┃").rstrip() for row in screen.splitlines()]  # the scrollbar
        echoes = [i for i, row in enumerate(rows) if row.startswith(f" ❯ {prompt} ")]
        replies = [row for row in rows[echoes[-1] :] if row == f" ● {REPLY}"] if echoes else []
        return bool(replies) and "open sidebar" in footer(screen)


def process_name(proc: psutil.Process) -> str:
    return "copilot" if any("copilot" in part for part in proc.cmdline()[:2]) else proc.name()


def main() -> int:
    args = bench_parser(__doc__).parse_args()
    results: dict = {"machine": machine(), "cli_version": VERSION, "gap_s": args.gap}
    byok = {
        "COPILOT_PROVIDER_API_KEY": "scripted",
        "COPILOT_MODEL": "fake-model",
        "COPILOT_PROVIDER_MAX_PROMPT_TOKENS": "128000",
        "COPILOT_PROVIDER_MAX_OUTPUT_TOKENS": "8192",
        "COPILOT_OFFLINE": "true",
    }
    with scripted_cli("@github/copilot", VERSION, "copilot", "cao-bench-copilot-", REPLY, **byok) as (root, work):
        os.environ["COPILOT_PROVIDER_BASE_URL"] = os.environ["OPENAI_BASE_URL"]  # the scripted model's
        results.update(
            bare_figures(
                CopilotPane(root, work),
                args.spawns,
                args.turns,
                enter_delay=copilot_cli.PROVIDER.enter_delay_s,
                gap=args.gap,
            )
        )
        results.update(
            cao_figures("copilot_cli", work, args.spawns, range(1, args.turns + 1), process_name, gap=args.gap)
        )
    report_against_bare(results, "real_copilot_cli")
    return 0


if __name__ == "__main__":
    sys.exit(main())
