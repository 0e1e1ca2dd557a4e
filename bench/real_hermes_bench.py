#!/usr/bin/env python3
"""Hermes Agent under cao: spawn → IDLE and turn time next to the CLI's own time (the same binary,
flags and shadow home in a bare tmux pane without cao and without cao's MCP server), and RSS per
agent (Hermes reaches cao's /mcp itself: no relay process).

Runs the pinned CLI (installed from PyPI like the tests install it) against the scripted model,
HOME/XDG/TMPDIR in a temporary directory whose `~/.hermes/config.yaml` names the model, a private
cao-server and tmux sockets. Prints a table and writes bench/results/real_hermes.json.

    python bench/real_hermes_bench.py [--spawns 3] [--turns 6]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine  # noqa: E402
from _real_cli import BarePane, bare_context, bare_figures, bench_parser, cao_figures, report_against_bare  # noqa: E402
from real_cli_support import isolated_home_env, pip_binary  # noqa: E402

from cao_testkit.scripted_model.harness import ScriptedModelServer  # noqa: E402
from cli_agent_orchestrator.providers import hermes  # noqa: E402

VERSION = "0.19.0"
REPLY = "Benchmark reply."


@contextmanager
def scripted_hermes() -> Iterator[tuple[Path, Path]]:
    """hermes on PATH, this process's HOME/XDG/TMPDIR in a temporary root whose Hermes config names
    the scripted model; yields the root and an empty work directory in it."""
    cli = pip_binary("hermes-agent[mcp]", VERSION, "hermes")
    root = Path(tempfile.mkdtemp(prefix="cao-bench-hermes-"))
    try:
        with ScriptedModelServer() as model:
            model.set_script("bench", [{"match": "say hello", "reply": REPLY}])
            os.environ.update({**isolated_home_env(root), "PATH": f"{cli.parent}{os.pathsep}{os.environ['PATH']}"})
            config = Path(os.environ["HOME"]) / ".hermes" / "config.yaml"
            config.parent.mkdir()
            config.write_text(
                yaml.safe_dump(
                    {
                        "model": {
                            "provider": "custom",
                            "base_url": model.base_url("bench", "/v1"),
                            "default": "fake-model",
                            "api_key": "scripted",
                            "context_length": 128000,
                        },
                        "security": {"tirith_enabled": False, "allow_lazy_installs": False},
                        "model_catalog": {"enabled": False},
                    }
                )
            )
            work = root / "work"
            work.mkdir()
            yield root, work
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _rows(screen: str) -> list[str]:
    return [row.rstrip() for row in screen.splitlines() if row.strip()]


class HermesPane(BarePane):
    remove_socket = True
    wait_on_kill = True

    def __init__(self, root: Path, workdir: Path):
        launch = hermes.build_launch(bare_context(root, workdir))
        config = Path(launch.env["HERMES_HOME"]) / "config.yaml"
        settings = yaml.safe_load(config.read_text())
        settings.pop("mcp_servers")  # the bare CLI has no cao endpoint to reach
        config.write_text(yaml.safe_dump(settings))
        super().__init__("hermes", launch.env, launch.argv, workdir)

    def ready(self, screen: str) -> bool:
        return "❯" in _rows(screen)

    def done(self, screen: str, prompt: str) -> bool:
        rows = _rows(screen)
        echo = f"● {prompt}"
        if echo not in rows:
            return False
        turn = rows[rows.index(echo) :]
        return f"    {REPLY}" in turn and any(r.startswith("╰") for r in turn) and "❯" in turn


def process_name(proc: psutil.Process) -> str:
    return "hermes" if "hermes" in " ".join(proc.cmdline()) else proc.name()


def main() -> int:
    args = bench_parser(__doc__, spawns=3, turns=6).parse_args()
    results: dict = {"machine": machine(), "cli_version": VERSION, "gap_s": args.gap}
    with scripted_hermes() as (root, work):
        results.update(bare_figures(HermesPane(root, work), args.spawns, args.turns, gap=args.gap))
        results.update(cao_figures("hermes", work, args.spawns, range(1, args.turns + 1), process_name, gap=args.gap))
    report_against_bare(results, "real_hermes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
