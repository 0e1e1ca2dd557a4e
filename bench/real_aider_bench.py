#!/usr/bin/env python3
"""Aider under cao: spawn → IDLE and turn time next to the CLI's own time (the same binary and
flags in a bare tmux pane without cao), and RSS per agent (aider has no MCP server).

Runs the pinned CLI (installed from PyPI like the tests install it) against the scripted model,
HOME/XDG/TMPDIR in a temporary directory whose `~/.aider.conf.yml` names the model, a private
cao-server and tmux sockets. Prints a table and writes bench/results/real_aider.json.

    python bench/real_aider_bench.py [--spawns 3] [--turns 6]
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine  # noqa: E402
from _real_cli import BarePane, bare_context, bare_figures, bench_parser, cao_figures, report_against_bare  # noqa: E402
from real_cli_support import isolated_home_env, pip_binary  # noqa: E402

from cao_testkit.scripted_model.harness import ScriptedModelServer  # noqa: E402
from cli_agent_orchestrator.providers import aider  # noqa: E402

VERSION = "0.86.2"
REPLY = "Benchmark reply."
MODEL_METADATA = {
    "openai/fake-model": {
        "max_input_tokens": 128000,
        "max_output_tokens": 8192,
        "input_cost_per_token": 0,
        "output_cost_per_token": 0,
        "litellm_provider": "openai",
        "mode": "chat",
    }
}


@contextmanager
def scripted_aider() -> Iterator[tuple[Path, Path]]:
    """aider on PATH, this process's HOME/XDG/TMPDIR in a temporary root whose aider config
    names the scripted model; yields the root and an empty work directory in it."""
    cli = pip_binary("aider-chat", VERSION, "aider")
    root = Path(tempfile.mkdtemp(prefix="cao-bench-aider-"))
    try:
        with ScriptedModelServer() as model:
            # aider offers the model no tools: every request is a "side" one to the scripted model.
            model.set_script("bench", {"rules": [{"match": "say hello", "reply": REPLY, "when": "any"}]})
            os.environ.update(
                {
                    **isolated_home_env(root),
                    **model.cli_env("bench"),
                    "PATH": f"{cli.parent}{os.pathsep}{os.environ['PATH']}",
                }
            )
            home = Path(os.environ["HOME"])
            (home / ".aider.conf.yml").write_text("model: openai/fake-model\n")
            (home / ".aider.model.metadata.json").write_text(json.dumps(MODEL_METADATA))
            work = root / "work"
            work.mkdir()
            yield root, work
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _rows(screen: str) -> list[str]:
    return [row.rstrip() for row in screen.splitlines() if row.strip()]


class AiderPane(BarePane):
    remove_socket = True
    wait_on_kill = True

    def __init__(self, root: Path, workdir: Path):
        launch = aider.build_launch(bare_context(root, workdir))
        super().__init__("aider", launch.env, launch.argv, workdir)

    def ready(self, screen: str) -> bool:
        rows = _rows(screen)
        return bool(rows) and rows[-1] == ">"

    def done(self, screen: str, prompt: str) -> bool:
        rows = _rows(screen)
        echo = f"> {prompt}"
        return echo in rows and REPLY in rows[rows.index(echo) :] and rows[-1] == ">"


def process_name(proc: psutil.Process) -> str:
    return "aider" if "aider" in " ".join(proc.cmdline()) else proc.name()


def main() -> int:
    args = bench_parser(__doc__, spawns=3, turns=6).parse_args()
    results: dict = {"machine": machine(), "cli_version": VERSION, "gap_s": args.gap}
    with scripted_aider() as (root, work):
        results.update(bare_figures(AiderPane(root, work), args.spawns, args.turns, gap=args.gap))
        results.update(cao_figures("aider", work, args.spawns, range(1, args.turns + 1), process_name, gap=args.gap))
    report_against_bare(results, "real_aider")
    return 0


if __name__ == "__main__":
    sys.exit(main())
