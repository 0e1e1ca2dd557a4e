"""Handoff records in the store: one row per handoff that creates its own worker, open while
something waits for the worker's answer, closed once when the handoff ends.

Like the rest of the store, every method is one transaction and runs on the store's one
thread (`await store.run(handoff_tables.open_handoff, record)`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from .schema import handoffs
from .stamps import utc_now

KEEP_CLOSED = 1000  # closed records kept (newest first); older ones go as new ones are opened


class HandoffState(StrEnum):
    WAITING = "waiting"  # its call waits for the answer: the worker is being created, or works
    ASKING = "asking"  # the worker stopped at a question; its answer goes to the caller's inbox
    COMPLETED = "completed"  # the answer reached the caller
    FAILED = "failed"  # it ended without an answer; `error` says why
    ORPHANED = "orphaned"  # its call died with cao-server; the next start tore the worker down


OPEN_STATES = (HandoffState.WAITING, HandoffState.ASKING)


@dataclass(frozen=True)
class HandoffRecord:
    job_id: str
    caller_id: str | None  # the calling terminal; None: the HTTP client of run-step
    terminal_id: str | None
    agent: str
    state: HandoffState
    deadline: str  # UTC, as utc_now() writes it
    created_at: str = ""
    finished_at: str | None = None
    error: str | None = None
    result: str | None = None  # JSON: what the handoff answered, kept until read once
    delivered_at: str | None = None
    durable: bool = False  # a job its caller can read later (services/handoff_results.py)


class HandoffTables:
    def __init__(self, engine: sa.Engine):
        self.engine = engine

    def open_handoff(self, record: HandoffRecord) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                handoffs.insert().values(
                    job_id=record.job_id,
                    caller_id=record.caller_id,
                    terminal_id=record.terminal_id,
                    agent=record.agent,
                    state=record.state.value,
                    deadline=record.deadline,
                    created_at=utc_now(),
                    durable=record.durable,
                )
            )
            oldest_kept = (
                sa.select(handoffs.c.created_at)
                .where(handoffs.c.state.not_in([s.value for s in OPEN_STATES]))
                .order_by(handoffs.c.created_at.desc())
                .offset(KEEP_CLOSED - 1)
                .limit(1)
                .scalar_subquery()
            )
            conn.execute(
                sa.delete(handoffs).where(
                    handoffs.c.state.not_in([s.value for s in OPEN_STATES]), handoffs.c.created_at < oldest_kept
                )
            )

    def set_asking(self, job_id: str, deadline: str) -> bool:
        """The worker stopped at a question: its answer now goes to the caller's inbox, until `deadline`."""
        with self.engine.begin() as conn:
            query = sa.update(handoffs).where(
                handoffs.c.job_id == job_id, handoffs.c.state == HandoffState.WAITING.value
            )
            return conn.execute(query.values(state=HandoffState.ASKING.value, deadline=deadline)).rowcount == 1

    def close(self, job_id: str, state: HandoffState, error: str | None = None) -> bool:
        """Close an open record; False when it was not open (a record closes once)."""
        assert state not in OPEN_STATES
        with self.engine.begin() as conn:
            query = sa.update(handoffs).where(
                handoffs.c.job_id == job_id, handoffs.c.state.in_([s.value for s in OPEN_STATES])
            )
            values = {"state": state.value, "error": error, "finished_at": utc_now()}
            return conn.execute(query.values(**values)).rowcount == 1

    def set_result(self, job_id: str, result: str) -> bool:
        """Keep what the handoff answered (once: a result is never replaced)."""
        with self.engine.begin() as conn:
            query = sa.update(handoffs).where(handoffs.c.job_id == job_id, handoffs.c.result.is_(None))
            return conn.execute(query.values(result=result)).rowcount == 1

    def deliver(self, job_id: str) -> bool:
        """Mark the result read; True for exactly one reader (the one that gets it)."""
        with self.engine.begin() as conn:
            query = sa.update(handoffs).where(
                handoffs.c.job_id == job_id, handoffs.c.result.is_not(None), handoffs.c.delivered_at.is_(None)
            )
            return conn.execute(query.values(delivered_at=utc_now())).rowcount == 1

    def get(self, job_id: str) -> HandoffRecord | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(handoffs).where(handoffs.c.job_id == job_id)).mappings().first()
        return _record(row) if row else None

    def list_open(self) -> list[HandoffRecord]:
        query = (
            sa.select(handoffs)
            .where(handoffs.c.state.in_([s.value for s in OPEN_STATES]))
            .order_by(handoffs.c.created_at)
        )
        with self.engine.connect() as conn:
            return [_record(r) for r in conn.execute(query).mappings()]


def _record(row: Any) -> HandoffRecord:
    return HandoffRecord(
        job_id=row["job_id"],
        caller_id=row["caller_id"],
        terminal_id=row["terminal_id"],
        agent=row["agent"],
        state=HandoffState(row["state"]),
        deadline=row["deadline"],
        created_at=row["created_at"],
        finished_at=row["finished_at"],
        error=row["error"],
        result=row["result"],
        delivered_at=row["delivered_at"],
        durable=bool(row["durable"]),
    )
