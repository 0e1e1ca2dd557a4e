"""What the server knows about workflow runs in memory: which run is being driven right
now (at most one drive per run), the step executions still in flight, and the
timeline writer that journals an event and then publishes it on the bus.

Everything durable lives in the journal; this is only what a live process needs.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ..bus import EventBus
from ..events import WorkflowEventRecorded
from ..store import Store

# Event types that close a drive; waiters and followers stop on them.
FINAL_EVENTS = frozenset({"run.completed", "run.failed", "run.cancelled", "run.interrupted"})


@dataclass
class Drive:
    """One drive of a run: the fresh run, or one resume."""

    run_id: str
    generation: int
    tier: str
    process: Any = None  # ScriptProcess for scripts
    task: asyncio.Task | None = None
    keys: set[str] = field(default_factory=set)  # step keys already called in this drive
    halts: list[dict] = field(default_factory=list)
    diverged: bool = False
    cancelled: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)


class RunRegistry:
    def __init__(self) -> None:
        self.drives: dict[str, Drive] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._inflight: dict[str, set[asyncio.Task]] = {}

    def lock(self, run_id: str) -> asyncio.Lock:
        """Serialises the gate's read-decide-claim for one run."""
        return self._locks.setdefault(run_id, asyncio.Lock())

    def claim(self, drive: Drive) -> None:
        """Register a drive; the caller has checked that none exists (no await between)."""
        assert drive.run_id not in self.drives
        self.drives[drive.run_id] = drive

    def release(self, drive: Drive) -> None:
        if self.drives.get(drive.run_id) is drive:
            del self.drives[drive.run_id]
            self._locks.pop(drive.run_id, None)
        drive.done.set()

    def track(self, run_id: str, task: asyncio.Task) -> None:
        tasks = self._inflight.setdefault(run_id, set())
        tasks.add(task)
        task.add_done_callback(lambda t: tasks.discard(t))

    def inflight(self, run_id: str) -> list[asyncio.Task]:
        return [t for t in self._inflight.get(run_id, ()) if not t.done()]


class Timeline:
    """Appends to a run's event timeline, then tells the bus (after the commit)."""

    def __init__(self, store: Store, bus: EventBus):
        self.store, self.bus = store, bus

    async def record(self, run_id: str, type_: str, step_id: str | None = None,
                     generation: int | None = None, **data: Any) -> dict:
        row = await self.store.run(self.store.journal.add_event, run_id, type_, step_id, generation, data)
        self.bus.publish(WorkflowEventRecorded(run_id, row["seq"], type_, step_id, generation, data, row["at"]))
        return row
