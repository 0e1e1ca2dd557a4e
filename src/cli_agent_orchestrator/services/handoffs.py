"""Handoff records: a handoff that creates its own worker is recorded from before the worker
exists (its terminal id is chosen first) until it ends, so that the start after a crash finds
every worker whose answer nobody can receive any more, and tears it down.

Invariant: no record stays open across a start: its worker is removed as a normal teardown
removes it (scrollback saved), the record is closed `orphaned`, and HandoffOrphaned says so.
Workflow steps are not recorded: the workflow journal recovers their workers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from ..actor import acting_as
from ..bus import EventBus
from ..errors import CaoError, NotFound
from ..events import HandoffOrphaned
from ..store import Store
from ..store.handoffs import HandoffRecord, HandoffState, HandoffTables
from .inbox import SYSTEM_SENDER, InboxService
from .terminals.service import TerminalService

log = logging.getLogger(__name__)

HTTP_CLIENT = "the HTTP client"  # who waits for a handoff without a calling terminal (run-step)

# Where each open state's answer goes. Neither outlives cao-server, so after a restart no
# caller can receive it; a state whose answer survived a restart would be re-adopted instead.
LOST_WITH_THE_SERVER = {
    HandoffState.WAITING: "the call waiting for its answer died with the previous cao-server",
    HandoffState.ASKING: "it waited at a question, and its grace period ended with the previous cao-server",
}


def deadline_in(seconds: float) -> str:
    """A deadline as the handoff records hold it (UTC, like the store's other stamps)."""
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat(timespec="milliseconds")


class HandoffJobs:
    def __init__(
        self, store: Store, tables: HandoffTables, terminals: TerminalService, inbox: InboxService, bus: EventBus
    ):
        self.store = store
        self.tables = tables
        self.terminals = terminals
        self.inbox = inbox
        self.bus = bus

    # A `job_id` of None is a step that is not recorded (its worker is kept, or the workflow
    # journal owns it): each method then does nothing, so the step's code has one path.
    async def open(
        self,
        job_id: str | None,
        caller_id: str | None,
        terminal_id: str,
        agent: str,
        timeout: float,
        durable: bool = False,
    ) -> None:
        """Before the worker is created: from here on a crash cannot leave it unaccounted for."""
        if job_id is not None:
            record = HandoffRecord(
                job_id, caller_id, terminal_id, agent, HandoffState.WAITING, deadline_in(timeout), durable=durable
            )
            await self.store.run(self.tables.open_handoff, record)

    async def asking(self, job_id: str | None, grace_seconds: float) -> None:
        """The worker stopped at a question: it is kept for the grace period, its answer goes to the inbox."""
        if job_id is not None:
            await self.store.run(self.tables.set_asking, job_id, deadline_in(grace_seconds))

    async def close(self, job_id: str | None, error: str | None = None) -> None:
        """The handoff ended and its worker is gone: completed (error None) or failed."""
        if job_id is not None:
            state = HandoffState.COMPLETED if error is None else HandoffState.FAILED
            await self.store.run(self.tables.close, job_id, state, error)

    async def tear_down_orphans(self, adopt: Callable[[HandoffRecord], None] | None = None) -> list[str]:
        """At start-up, after adoption: a handoff still waiting for a worker that survived is
        given to `adopt`; the worker of every other open handoff is torn down (its answer had
        nowhere to go any more). Returns the ids of the handoffs it closed."""
        closed = []
        for record in await self.store.run(self.tables.list_open):
            survived = record.state == HandoffState.WAITING and await self._alive(record.terminal_id)
            if adopt is not None and record.durable and survived:
                adopt(record)
                continue
            with acting_as(record.caller_id):  # credited to the caller, like the handoff's own teardown
                if await self._tear_down(record):
                    closed.append(record.job_id)
        return closed

    async def _alive(self, terminal_id: str | None) -> bool:
        if terminal_id is None:
            return False
        try:
            await self.terminals.get(terminal_id)
        except CaoError:
            return False
        return True

    async def _tear_down(self, record: HandoffRecord) -> bool:
        reason = LOST_WITH_THE_SERVER[record.state]
        if record.terminal_id is not None:
            try:
                await self.terminals.delete(record.terminal_id)
            except NotFound:
                pass  # the server died before the worker's row was written: nothing runs
            except CaoError as exc:  # left open: the next start tries again
                log.warning("handoff %s: could not tear down its worker %s: %s", record.job_id, record.terminal_id, exc)
                return False
        await self.store.run(self.tables.close, record.job_id, HandoffState.ORPHANED, reason)
        log.warning(
            "handoff %s to %s for %s: worker %s torn down at start-up: %s",
            record.job_id,
            record.agent,
            record.caller_id or HTTP_CLIENT,
            record.terminal_id,
            reason,
        )
        self.bus.publish(HandoffOrphaned(record.job_id, record.agent, record.caller_id, record.terminal_id, reason))
        if record.state == HandoffState.ASKING and record.caller_id is not None:
            # It was promised the worker's reply by message; say why none will come.
            note = (
                f"[cao] Worker {record.terminal_id} ({record.agent}), which waited for your answer, has been "
                "removed: cao-server restarted, and the worker's grace period ended with it. Hand the task "
                "off again if you still need it."
            )
            try:
                await self.inbox.post(record.caller_id, SYSTEM_SENDER, note)
            except CaoError as exc:
                log.warning("could not tell %s about handoff %s: %s", record.caller_id, record.job_id, exc)
        return True
