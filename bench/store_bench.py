#!/usr/bin/env python3
"""The inbox/orchestration and workflow benchmarks on SQLite and on PostgreSQL, back to back.

Starts a throwaway PostgreSQL server from Debian's packages (as the tests do,
tests/pg_support.py), then runs bench/orchestration_bench.py and bench/workflow_bench.py
twice each: once with cao's default SQLite store, once with CAO_DATABASE_URL pointing at a
fresh PostgreSQL database. Prints both tables and writes bench/results/store.json.

    python bench/store_bench.py [--rounds 5] [--parallel 20] [--steps 10] [--resume-steps 50]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from pg_support import Postgres  # noqa: E402


def run(script: str, args: list[str], env: dict[str, str]) -> tuple[str, dict]:
    out = subprocess.run(
        [sys.executable, str(HERE / script), *args], env=env, capture_output=True, text=True, timeout=1800
    )
    if out.returncode != 0:
        raise SystemExit(f"{script} failed:\n{out.stdout}\n{out.stderr}")
    written = HERE / "results" / "orchestration.json"  # the workflow bench prints only
    results = json.loads(written.read_text()) if script == "orchestration_bench.py" else {"table": out.stdout}
    return out.stdout, results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--parallel", type=int, default=20)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--resume-steps", type=int, default=50)
    args = ap.parse_args()
    benches = [
        ("orchestration_bench.py", ["--rounds", str(args.rounds), "--parallel", str(args.parallel)]),
        ("workflow_bench.py", ["--steps", str(args.steps), "--resume-steps", str(args.resume_steps), "--rounds", "3"]),
    ]
    pg = Postgres().start()
    collected: dict[str, dict] = {}
    try:
        for engine in ("sqlite", "postgresql"):
            env = {k: v for k, v in os.environ.items() if k != "CAO_DATABASE_URL"}
            for script, script_args in benches:
                if engine == "postgresql":
                    env["CAO_DATABASE_URL"] = pg.new_database()  # a fresh database per run
                table, results = run(script, script_args, env)
                collected[f"{script}:{engine}"] = results
                print(f"--- {script} on {engine}")
                print(table.rstrip())
    finally:
        pg.stop()
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "store.json").write_text(json.dumps(collected, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
