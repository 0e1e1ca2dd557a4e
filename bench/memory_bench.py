#!/usr/bin/env python3
"""Memory (issue 29) on SQLite and on PostgreSQL: recall p50/p95 with 100,000 memories, store
throughput, and what a first task's memory block costs.

For each engine: a fresh store (SQLite file in a temporary directory; a fresh database on a
throwaway PostgreSQL server from Debian's packages, as the tests start it) is filled with
`--memories` memories over 50 projects, 200 sessions and 4 scopes (bulk inserts: the FTS5
triggers and the generated tsvector column index them as any write does). Then, through the
store's own thread (`Store.run`, as cao-server calls it):

- recall: an agent's `memory_recall` (its four visible scopes, a three-word query, `sort_by` score,
  limit 10, each memory returned counted as recalled), `--recalls` times over varied queries; and
  the same without a query (recency);
- store: `--stores` `memory_store` calls one after another (each one transaction: the row, its
  index entry), half new keys and half appended entries;
- block: `MemoryService.first_task` for a new agent, what cao adds before typing its first task.

Prints a table and writes bench/results/memory.json. Target: recall p95 under 20 ms.

    python bench/memory_bench.py [--memories 100000] [--recalls 300] [--stores 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from pg_support import Postgres  # noqa: E402

from cli_agent_orchestrator.bus import EventBus  # noqa: E402
from cli_agent_orchestrator.memory.checks import MAX_MEMORY_CHARS  # noqa: E402
from cli_agent_orchestrator.memory.service import MemoryService  # noqa: E402
from cli_agent_orchestrator.models import Terminal  # noqa: E402
from cli_agent_orchestrator.settings import Settings  # noqa: E402
from cli_agent_orchestrator.store import Store  # noqa: E402
from cli_agent_orchestrator.store.memories import MemoryQuery, MemoryTables, MemoryWrite  # noqa: E402
from cli_agent_orchestrator.store.schema import memories  # noqa: E402

WORDS = (
    "deploy build test lint migrate schema index cache queue worker retry timeout token rotate release "
    "branch merge review docs api route handler session profile agent memory search rank budget block "
    "docker kubernetes helm terraform postgres sqlite redis kafka nginx python rust typescript react "
    "coverage flaky fixture mock parser config setting logging metric trace alert oncall incident backup"
).split()
PROJECTS, SESSIONS, PROFILES = 50, 200, 8
BATCH = 5_000


RARE_WORDS = 20_000  # a vocabulary of this many more words, each rare, as real notes have


def word(rng: random.Random) -> str:
    # A quarter common words, the rest from a long tail: a query matches a few percent of the
    # memories, not all of them (with 90 words only, every query would match nearly every one).
    return rng.choice(WORDS) if rng.random() < 0.25 else f"term{rng.randrange(RARE_WORDS)}"


def sentence(rng: random.Random, n: int = 14) -> str:
    return " ".join(word(rng) for _ in range(n))


def fill(store: Store, count: int, rng: random.Random) -> None:
    rows = []
    for n in range(count):
        scope = rng.choice(("global", "project", "project", "session", "agent"))
        scope_id = {
            "global": "",
            "project": f"/work/project-{n % PROJECTS}",
            "session": f"cao-s{n % SESSIONS}",
            "agent": f"profile-{n % PROFILES}",
        }[scope]
        text = sentence(rng)
        at = f"2026-12-{1 + n % 28:02d}T{n % 24:02d}:00:00.000+00:00"
        entry = {"at": at, "text": text, "terminal_id": None, "agent_profile": None}
        rows.append(
            {
                "scope": scope,
                "scope_id": scope_id,
                "key": f"k{n}",
                "memory_type": rng.choice(("project", "user", "feedback", "reference")),
                "tags": [rng.choice(WORDS)],
                "entries": [entry],
                "content": text,
                "created_at": at,
                "updated_at": at,
                "recall_count": 0,
            }
        )
        if len(rows) == BATCH or n == count - 1:
            with store.engine.begin() as conn:
                conn.execute(memories.insert(), rows)
            rows = []
    if store.engine.dialect.name == "postgresql":
        with store.engine.begin() as conn:  # what autovacuum does soon after a bulk load
            conn.exec_driver_sql("ANALYZE memories")


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1] * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
    }


async def measure(url: str, args: argparse.Namespace, home: Path) -> dict[str, Any]:
    rng = random.Random(29)
    store = Store(url)
    tables = MemoryTables(store.engine)
    started = time.perf_counter()
    await asyncio.get_running_loop().run_in_executor(None, fill, store, args.memories, rng)
    filled_s = time.perf_counter() - started
    visible = [("session", "cao-s7"), ("agent", "profile-3"), ("project", "/work/project-7"), ("global", "")]

    cpu: list[float] = []

    async def timed(query: MemoryQuery) -> float:
        # Wall time, and this process's CPU time (SQLite runs in it: a figure the load of other
        # processes on the machine does not inflate).
        t0, c0 = time.perf_counter(), time.process_time()
        await store.run(tables.find, query)
        await store.run(tables.note_recalled, [])  # (what a recall adds: its count, in the background)
        cpu.append(time.process_time() - c0)
        return time.perf_counter() - t0

    for _ in range(20):  # warm the caches and the plan
        await timed(MemoryQuery(text=sentence(rng, 3), visible=visible, sort_by="score"))
    cpu.clear()
    scored = [
        await timed(MemoryQuery(text=sentence(rng, 3), visible=visible, sort_by="score")) for _ in range(args.recalls)
    ]
    scored_cpu = list(cpu)
    cpu.clear()
    latest = [await timed(MemoryQuery(visible=visible)) for _ in range(args.recalls)]
    latest_cpu = list(cpu)
    t0 = time.perf_counter()
    for n in range(args.stores):
        write = MemoryWrite(
            "project", "/work/project-1", f"bench-{n % (args.stores // 2)}", "project", ["bench"],
            sentence(rng), "abcd1234", "developer", MAX_MEMORY_CHARS,
        )  # fmt: skip
        await store.run(tables.store, write)
    store_s = time.perf_counter() - t0
    settings = Settings.from_env({"CAO_HOME_DIR": str(home)})
    service = MemoryService(settings, store, tables, EventBus(1024))
    term = Terminal(
        id="abcd1234", session_name="cao-s7", window_name="w", provider="mock_cli",
        agent_profile="developer", working_directory="/work/project-7",
    )  # fmt: skip
    blocks, sizes = [], []
    for _ in range(args.recalls // 3):
        t1 = time.perf_counter()
        first = await service.first_task(term, "please " + sentence(rng, 8))
        blocks.append(time.perf_counter() - t1)
        sizes.append(len(first))
    store.close()
    return {
        "memories": args.memories,
        "fill_s": round(filled_s, 1),
        "recall_score": percentiles(scored),
        "recall_score_cpu": percentiles(scored_cpu),
        "recall_recency": percentiles(latest),
        "recall_recency_cpu": percentiles(latest_cpu),
        "stores_per_s": round(args.stores / store_s, 1),
        "first_task_block": percentiles(blocks),
        "first_task_chars_median": statistics.median(sizes),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--memories", type=int, default=100_000)
    ap.add_argument("--recalls", type=int, default=300)
    ap.add_argument("--stores", type=int, default=2000)
    ap.add_argument("--engines", default="sqlite,postgresql")
    args = ap.parse_args()
    results: dict[str, Any] = {}
    pg = Postgres().start() if "postgresql" in args.engines else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp) / "home"
            home.mkdir(mode=0o700)
            for engine in args.engines.split(","):
                url = str(Path(tmp) / "cao.db") if engine == "sqlite" else pg.new_database()  # type: ignore[union-attr]
                results[engine] = asyncio.run(measure(url, args, home))
    finally:
        if pg is not None:
            pg.stop()
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("engine      measure                 p50 ms   p95 ms")
    for engine, r in results.items():
        for name in ("recall_score", "recall_score_cpu", "recall_recency", "recall_recency_cpu", "first_task_block"):
            print(f"{engine:<11} {name:<22} {r[name]['p50_ms']:>7} {r[name]['p95_ms']:>8}")
        print(f"{engine:<11} stores per second      {r['stores_per_s']:>7}")
    out = HERE / "results" / "memory.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"at": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(), **results}, indent=2))
    print(f"wrote {out.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
