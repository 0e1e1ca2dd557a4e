"""The flows' timer: one task that sleeps until the earliest due time of the enabled flows,
or until told that flows changed (added, enabled, disabled, removed), then fires what is due.
Firing only starts runs (in the task group); it never waits for a gate or an agent, so one
slow flow delays no other.

The due times themselves are the database's (`flows.next_run`); the timer keeps none. asyncio
sleeps on the monotonic clock while due times are wall-clock times, so a sleep is cut to
RECHECK_S: the safety net that re-reads the wall clock after a suspend or a clock jump.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

log = logging.getLogger(__name__)

RECHECK_S = 60.0
# asyncio may wake a timer a little early: each sleep lasts this much longer than needed.
EARLY_WAKE_S = 0.005


def utc_now() -> datetime:
    return datetime.now(UTC)


class DueTimer:
    def __init__(
        self,
        fire_due: Callable[[datetime], Awaitable[None]],
        earliest_due: Callable[[], Awaitable[datetime | None]],
        clock: Callable[[], datetime] = utc_now,
    ):
        self._fire_due = fire_due
        self._earliest_due = earliest_due
        self._clock = clock
        self._changed = asyncio.Event()

    def changed(self) -> None:
        """Flows changed: compute the next wake-up again now."""
        self._changed.set()

    async def run(self) -> None:
        while True:
            self._changed.clear()  # before reading: a change during the read wakes the next wait
            try:
                await self._fire_due(self._clock())
                due = await self._earliest_due()
            except Exception:  # e.g. the database stayed locked: try again at the next recheck
                log.exception("flow timer: could not fire or read due flows; retrying in %.0fs", RECHECK_S)
                due = None
                delay: float | None = RECHECK_S
            else:
                delay = None if due is None else (due - self._clock()).total_seconds()
                if delay is not None:
                    delay = min(RECHECK_S, max(0.0, delay) + EARLY_WAKE_S)
            try:
                await asyncio.wait_for(self._changed.wait(), delay)
            except TimeoutError:
                pass
