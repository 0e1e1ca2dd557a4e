#!/usr/bin/env python3
"""oh-my-pi (omp) under cao: spawn → IDLE and turn time next to omp's own time (the same binary,
flags and per-terminal config in a bare tmux pane, without cao and without cao's extension), and
RSS per agent.

Runs the pinned omp and Bun (installed as the tests install them) against the scripted model,
HOME/XDG/TMPDIR in a temporary directory whose `~/.omp/agent` names the scripted model (the
user's setup), a private cao-server and tmux sockets. Prints a table and writes
bench/results/real_omp.json.

    python bench/real_omp_bench.py [--spawns 3] [--turns 8]
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
    bare_context,
    bare_figures,
    bench_parser,
    cao_figures,
    report_against_bare,
    scripted_cli,
)
from real_cli_support import npm_binary  # noqa: E402

from cli_agent_orchestrator.providers import omp  # noqa: E402

VERSION, BUN = "18.2.3", "1.3.14"
REPLY = "Benchmark reply."
IDLE_ROW = " π > "  # the status row while idle; a spinner and the seconds stand there while busy


def user_setup(root: Path, base_url: str) -> None:
    """The user's own omp files: the scripted model as a custom provider and the default model."""
    agent = root / "home" / ".omp" / "agent"
    agent.mkdir(parents=True, exist_ok=True)
    (agent / "models.yml").write_text(
        f"providers:\n  scripted:\n    baseUrl: {base_url}\n    api: openai-completions\n    apiKey: x\n"
        "    models:\n      - id: fake-model\n"
    )
    (agent / "config.yml").write_text("modelRoles:\n  default: scripted/fake-model\n")


class OmpPane(BarePane):
    wait_on_kill = True  # omp writes its session file into HOME while it exits

    def __init__(self, root: Path, workdir: Path):
        launch = omp.build_launch(bare_context(root, workdir))
        argv = list(launch.argv)
        at = argv.index("-e")
        del argv[at : at + 2]  # no cao extension: omp's own time
        super().__init__("omp", launch.env, argv, workdir)

    def ready(self, screen: str) -> bool:
        rows = screen.splitlines()
        return any(row.startswith(IDLE_ROW) for row in rows) and any(row.startswith("╰─") for row in rows)

    def done(self, screen: str, prompt: str) -> bool:
        rows = [row.rstrip() for row in screen.splitlines()]
        echoes = [i for i, row in enumerate(rows) if row == f" {prompt}"]
        return (
            bool(echoes)
            and f" {REPLY}" in rows[echoes[-1] :]
            and any(row.startswith(IDLE_ROW) for row in rows[echoes[-1] :])
            and not any(row.lstrip().startswith("⎋ ") for row in rows)
        )


def process_name(proc: psutil.Process) -> str:
    return "omp" if any("omp" in part for part in proc.cmdline()) else proc.name()


def main() -> int:
    args = bench_parser(__doc__, spawns=3, turns=8).parse_args()
    results: dict = {"machine": machine(), "cli_version": VERSION, "bun": BUN, "gap_s": args.gap}
    bun = npm_binary("bun", BUN, "bun")
    os.environ["PATH"] = f"{bun.parent}{os.pathsep}{os.environ['PATH']}"  # omp's `#!/usr/bin/env bun`
    with scripted_cli("@oh-my-pi/pi-coding-agent", VERSION, "omp", "cao-bench-omp-", REPLY) as (root, work):
        user_setup(root, os.environ["OPENAI_BASE_URL"])
        results.update(bare_figures(OmpPane(root, work), args.spawns, args.turns, gap=args.gap))
        results.update(cao_figures("omp", work, args.spawns, range(1, args.turns + 1), process_name, gap=args.gap))
    report_against_bare(results, "real_omp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
