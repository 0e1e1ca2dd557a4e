"""The timeline writer: a workflow event is appended to its run's timeline in the journal,
and only after that commit published on the bus, carrying the row's `seq` and `at`, so a
follower never sees a fact that the journal does not hold.
"""

from __future__ import annotations

from dataclasses import replace

from ..bus import EventBus
from ..events import WorkflowEvent
from ..store import Store
from .records import EventRecord


class Timeline:
    def __init__(self, store: Store, bus: EventBus):
        self.store, self.bus = store, bus

    async def record(self, event: WorkflowEvent) -> EventRecord:
        entry = await self.store.run(
            self.store.journal.add_event,
            event.run_id,
            event.journal_type,
            event.step_id,
            event.generation,
            event.data(),
        )
        self.bus.publish(replace(event, seq=entry.seq, at=entry.at))
        return entry
