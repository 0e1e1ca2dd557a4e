"""What the server knows about workflow runs in memory: which run is being driven right
now (at most one drive per run) and the step executions still in flight. Everything
durable lives in the journal; this is only what a live process needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from ..errors import Stopping
from .records import Halt, RunKind, RunState, Tier


@dataclass
class Drive:
    """One drive of a run: the fresh run, or one resume."""

    run_id: str
    generation: int
    tier: Tier
    process: Any = None  # ScriptProcess for scripts
    task: asyncio.Task | None = None
    keys: set[str] = field(default_factory=set)  # step keys already called in this drive
    halts: list[Halt] = field(default_factory=list)
    diverged: bool = False
    cancelled: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True)
class DriveEnd:
    """How a drive ended, for the run's journal row."""

    state: RunState  # completed | failed
    kind: RunKind | None = None
    output_json: str | None = None
    warnings: list[str] = field(default_factory=list)


Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task | None"]


class RunRegistry:
    def __init__(self, spawn: Spawn) -> None:
        self._spawn = spawn  # the runtime's task group: drives end with the runtime
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

    def is_current(self, run_id: str, generation: int) -> bool:
        """Whether the drive of `generation` is still the run's live, uncancelled one."""
        drive = self.drives.get(run_id)
        return drive is not None and not drive.cancelled and drive.generation == generation

    def start(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
        """Run a drive or a step execution in the runtime's task group."""
        task = self._spawn(coro, name)
        if task is None:
            raise Stopping("cao-server is stopping")
        return task

    def track(self, run_id: str, task: asyncio.Task) -> None:
        tasks = self._inflight.setdefault(run_id, set())
        tasks.add(task)
        task.add_done_callback(lambda t: tasks.discard(t))

    def inflight(self, run_id: str) -> list[asyncio.Task]:
        return [t for t in self._inflight.get(run_id, ()) if not t.done()]
