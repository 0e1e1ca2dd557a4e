"""The runtime's one group of background tasks: everything cao starts and nobody awaits
(status workers, deliveries, sweeps, writers) is spawned here, kept referenced while it
runs, has its failure recorded (never "Task exception was never retrieved"), and is
cancelled and awaited when the runtime stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)


class TaskGroup:
    def __init__(self, on_failure: Callable[[str, BaseException], None] | None = None):
        self._tasks: set[asyncio.Task] = set()
        self._on_failure = on_failure
        self._closed = False

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task | None:
        """Start `coro` in the background; None once the runtime is stopping (it is dropped)."""
        if self._closed:
            coro.close()
            log.debug("runtime stopping: %s not started", name)
            return None
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        assert exc is not None
        log.error("background task %s failed", task.get_name(), exc_info=exc)
        if self._on_failure is not None:
            self._on_failure(task.get_name(), exc)

    def __len__(self) -> int:
        return len(self._tasks)

    async def close(self) -> None:
        """Cancel every task still running and wait for them to end."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
