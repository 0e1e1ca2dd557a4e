"""Waiting for a terminal's status, driven by status events (no polling).

The waiter subscribes first and then reads the current status, so an edge that
happens in between is never missed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..bus import EventBus
from ..events import StatusChanged, TerminalRemoved
from ..models import TerminalStatus
from .status.monitor import StatusMonitor

# (status, turn, settled) → done?
Predicate = Callable[[TerminalStatus, int, bool], bool]


class TerminalVanished(Exception):
    """The terminal was removed while we waited; the message says why."""


async def wait_for(
    bus: EventBus, monitor: StatusMonitor, terminal_id: str, predicate: Predicate, timeout: float
) -> TerminalStatus | None:
    """The first status satisfying `predicate`, or None when `timeout` runs out."""
    stream = bus.open_stream(
        f"wait:{terminal_id}", f"terminal.{terminal_id}.#", max_size=1 << 30, kinds=(StatusChanged, TerminalRemoved)
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        view = monitor.view(terminal_id)
        if view is None:
            raise TerminalVanished("deleted")
        if predicate(view.status, view.turn, view.settled):
            return view.status
        while True:
            event = await bus.next_event(stream, deadline - loop.time())
            if event is None:
                return None
            if isinstance(event, TerminalRemoved):
                raise TerminalVanished(event.reason or "deleted")
            if isinstance(event, StatusChanged):
                view = monitor.view(terminal_id)
                settled = view.settled if view else True
                if predicate(event.status, event.turn, settled):
                    return event.status
    finally:
        bus.close_stream(stream)


def ready_or_stuck(status: TerminalStatus, _turn: int, _settled: bool) -> bool:
    """Start-up finished: ready for input, or needs a human, or failed."""
    return status in (
        TerminalStatus.IDLE,
        TerminalStatus.COMPLETED,
        TerminalStatus.WAITING_USER_ANSWER,
        TerminalStatus.ERROR,
    )


def turn_finished(turn: int) -> Predicate:
    """The turn `turn` (or a later one) ended: completed, error, or a question for the user."""

    def check(status: TerminalStatus, current: int, settled: bool) -> bool:
        return (
            current >= turn
            and settled
            and status in (TerminalStatus.COMPLETED, TerminalStatus.ERROR, TerminalStatus.WAITING_USER_ANSWER)
        )

    return check
