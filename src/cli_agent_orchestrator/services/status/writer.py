"""Write-behind of statuses: the database copy of each terminal's status follows the published
event in coalesced batches, retried while the database is locked, so no status edge is lost.
"""

from __future__ import annotations

import asyncio
import logging

from ...errors import StoreFault
from ...models import TerminalStatus
from ...store import Store
from ...tasks import TaskGroup

log = logging.getLogger(__name__)

# Database writes of statuses that failed (locked database) are retried this often.
STATUS_WRITE_RETRY_S = 0.5
# Statuses are written this long after a change, in one batch: the writes of a burst of
# changes coalesce, and the work a change triggers (an inbox delivery) goes first.
STATUS_WRITE_DELAY_S = 0.1


class StatusWriter:
    """Writes the latest status of each terminal behind the published event; coalesces
    and retries while the database is locked (a status edge is never lost)."""

    def __init__(self, store: Store, tasks: TaskGroup):
        self.store = store
        self.tasks = tasks
        self._latest: dict[str, tuple[TerminalStatus, str, str]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def put(self, terminal_id: str, status: TerminalStatus, source: str, reason: str) -> None:
        self._latest[terminal_id] = (status, source, reason)
        if self._task is None or self._task.done():
            self._task = self.tasks.spawn(self._run(), "status-writer")
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(STATUS_WRITE_DELAY_S)  # batching window, not synchronisation
            self._wake.clear()
            batch, self._latest = self._latest, {}
            try:
                await self.store.run(self.store.set_statuses, batch)
            except StoreFault as exc:
                log.warning("status write deferred: %s", exc)
                self._latest = {**batch, **self._latest}  # newer readings win
                await asyncio.sleep(STATUS_WRITE_RETRY_S)  # retry a locked or failing database
                self._wake.set()
            except Exception:
                log.exception("status write failed; retrying")
                self._latest = {**batch, **self._latest}
                await asyncio.sleep(STATUS_WRITE_RETRY_S)
                self._wake.set()

    async def flush(self) -> None:
        if self._latest:
            batch, self._latest = self._latest, {}
            await self.store.run(self.store.set_statuses, batch)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        try:
            await self.flush()
        except Exception:  # shutting down: the next start re-reads every screen anyway
            log.warning("could not write the last statuses at shutdown")
