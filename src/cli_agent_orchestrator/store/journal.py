"""The workflow journal: runs, steps, one-drive decisions and the event timeline, read
back as the typed records of `workflows/records.py`.

Runs on the store's one thread like the rest of the store (`await store.run(
store.journal.get_run, ...)`), so a read-decide-write sequence inside one method is
atomic with respect to every other writer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from ..errors import Conflict
from ..workflows.records import (
    Decision,
    EventRecord,
    Halt,
    RunFence,
    RunKind,
    RunRecord,
    RunState,
    StepErrorKind,
    StepRecord,
    StepState,
    Tier,
)
from .schema import workflow_decisions, workflow_events, workflow_runs, workflow_steps


def stamp() -> str:
    """Journal timestamps: UTC, second precision, `Z` suffix."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Journal:
    def __init__(self, engine: sa.Engine):
        self.engine = engine

    # --- runs -------------------------------------------------------------------------
    def create_run(self, run: RunRecord) -> None:
        values = {f.name: getattr(run, f.name) for f in fields(run)}
        values.update(warnings=list(run.warnings), halts=[h.as_json() for h in run.halts])
        try:
            with self.engine.begin() as conn:
                conn.execute(workflow_runs.insert().values(created_ns=time.time_ns(), **values))
        except IntegrityError:
            raise Conflict(f"run id {run.run_id!r} is already taken") from None

    def get_run(self, run_id: str) -> RunRecord | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(workflow_runs).where(workflow_runs.c.run_id == run_id)).mappings().first()
        return _run(row) if row else None

    def list_runs(self, state: RunState | None, limit: int) -> list[RunRecord]:
        query = (
            sa.select(workflow_runs)
            .order_by(
                workflow_runs.c.started_at.desc(), workflow_runs.c.created_ns.desc(), workflow_runs.c.run_id.desc()
            )
            .limit(limit)
        )
        if state is not None:
            query = query.where(workflow_runs.c.state == state)
        with self.engine.connect() as conn:
            return [_run(r) for r in conn.execute(query).mappings()]

    def runs_in_state(self, state: RunState) -> list[RunRecord]:
        with self.engine.connect() as conn:
            return [
                _run(r) for r in conn.execute(sa.select(workflow_runs).where(workflow_runs.c.state == state)).mappings()
            ]

    def update_run(self, run_id: str, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(workflow_runs.update().where(workflow_runs.c.run_id == run_id).values(**values))

    def bump_generation(self, run_id: str, **values: Any) -> int:
        """Fence off every process of the current drive; returns the new generation."""
        with self.engine.begin() as conn:
            gen = (
                conn.execute(sa.select(workflow_runs.c.generation).where(workflow_runs.c.run_id == run_id)).scalar_one()
                + 1
            )
            conn.execute(
                workflow_runs.update().where(workflow_runs.c.run_id == run_id).values(generation=gen, **values)
            )
        return gen

    def begin_drive(self, run_id: str, decisions: Mapping[str, Decision]) -> int:
        """Start a resume drive: new generation, run running again, the old halts cleared,
        and exactly `decisions` granted for this generation (nothing older survives)."""
        with self.engine.begin() as conn:
            run = conn.execute(sa.select(workflow_runs).where(workflow_runs.c.run_id == run_id)).mappings().one()
            gen = run["generation"] + 1
            conn.execute(
                workflow_runs.update()
                .where(workflow_runs.c.run_id == run_id)
                .values(
                    generation=gen,
                    state=RunState.RUNNING,
                    kind=None,
                    halts=[],
                    finished_at=None,
                    current_step_id=None,
                    drives=run["drives"] + 1,
                    output_json=None,
                    warnings=[],
                )
            )
            conn.execute(workflow_decisions.delete().where(workflow_decisions.c.run_id == run_id))
            for step_id, decision in decisions.items():
                conn.execute(
                    workflow_decisions.insert().values(
                        run_id=run_id, step_id=step_id, decision=decision, generation=gen
                    )
                )
        return gen

    def revoke_decisions(self, run_id: str | None = None) -> None:
        query = workflow_decisions.delete()
        if run_id is not None:
            query = query.where(workflow_decisions.c.run_id == run_id)
        with self.engine.begin() as conn:
            conn.execute(query)

    def delete_run(self, run_id: str) -> None:
        with self.engine.begin() as conn:
            for table in (workflow_events, workflow_decisions, workflow_steps, workflow_runs):
                conn.execute(table.delete().where(table.c.run_id == run_id))

    # --- steps ------------------------------------------------------------------------
    def gate_inputs(self, run_id: str, step_id: str) -> tuple[RunFence | None, StepRecord | None, Decision | None]:
        """Everything the gate reads for one call, in one read: run, step, decision."""
        with self.engine.connect() as conn:
            run = (
                conn.execute(
                    sa.select(workflow_runs.c.run_id, workflow_runs.c.generation, workflow_runs.c.state).where(
                        workflow_runs.c.run_id == run_id
                    )
                )
                .mappings()
                .first()
            )
            step = (
                conn.execute(
                    sa.select(workflow_steps).where(
                        workflow_steps.c.run_id == run_id, workflow_steps.c.step_id == step_id
                    )
                )
                .mappings()
                .first()
            )
            decision = None
            if run is not None:
                decision = conn.execute(
                    sa.select(workflow_decisions.c.decision).where(
                        workflow_decisions.c.run_id == run_id,
                        workflow_decisions.c.step_id == step_id,
                        workflow_decisions.c.generation == run["generation"],
                    )
                ).scalar()
        fence = RunFence(run["run_id"], run["generation"], RunState(run["state"])) if run else None
        return fence, _step(step) if step else None, Decision(decision) if decision else None

    def get_step(self, run_id: str, step_id: str) -> StepRecord | None:
        with self.engine.connect() as conn:
            row = (
                conn.execute(
                    sa.select(workflow_steps).where(
                        workflow_steps.c.run_id == run_id, workflow_steps.c.step_id == step_id
                    )
                )
                .mappings()
                .first()
            )
        return _step(row) if row else None

    def list_steps(self, run_id: str) -> list[StepRecord]:
        with self.engine.connect() as conn:
            return [
                _step(r)
                for r in conn.execute(
                    sa.select(workflow_steps)
                    .where(workflow_steps.c.run_id == run_id)
                    .order_by(workflow_steps.c.position)
                ).mappings()
            ]

    def seed_steps(self, run_id: str, step_ids: list[str]) -> None:
        """YAML runs: every step exists from the start, `pending`."""
        with self.engine.begin() as conn:
            for position, step_id in enumerate(step_ids):
                conn.execute(
                    workflow_steps.insert().values(
                        run_id=run_id, step_id=step_id, position=position, state=StepState.PENDING
                    )
                )

    def claim_step(
        self,
        run_id: str,
        step_id: str,
        *,
        generation: int,
        fingerprint: str | None,
        scheme: str | None,
        policy: str | None,
        consumes: Decision | None,
    ) -> None:
        """Record that an attempt is being dispatched (before anything runs), using up
        the decision that authorised it in the same transaction."""
        now = stamp()
        with self.engine.begin() as conn:
            existing = conn.execute(
                sa.select(workflow_steps.c.attempts).where(
                    workflow_steps.c.run_id == run_id, workflow_steps.c.step_id == step_id
                )
            ).first()
            values = dict(
                state=StepState.RUNNING,
                generation=generation,
                fingerprint=fingerprint,
                fingerprint_scheme=scheme,
                policy=policy,
                envelope=None,
                error=None,
                error_kind=None,
                terminal_id=None,
                halt_rule=None,
                halt_message=None,
                started_at=now,
                finished_at=None,
            )
            if existing is None:
                position = conn.execute(
                    sa.select(sa.func.count()).select_from(workflow_steps).where(workflow_steps.c.run_id == run_id)
                ).scalar_one()
                conn.execute(
                    workflow_steps.insert().values(
                        run_id=run_id, step_id=step_id, position=position, attempts=1, **values
                    )
                )
            else:
                conn.execute(
                    workflow_steps.update()
                    .where(workflow_steps.c.run_id == run_id, workflow_steps.c.step_id == step_id)
                    .values(attempts=existing.attempts + 1, **values)
                )
            if consumes:
                conn.execute(
                    workflow_decisions.delete().where(
                        workflow_decisions.c.run_id == run_id, workflow_decisions.c.step_id == step_id
                    )
                )
            conn.execute(workflow_runs.update().where(workflow_runs.c.run_id == run_id).values(current_step_id=step_id))

    def update_step(self, run_id: str, step_id: str, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                workflow_steps.update()
                .where(workflow_steps.c.run_id == run_id, workflow_steps.c.step_id == step_id)
                .values(**values)
            )

    def consume_decision(self, run_id: str, step_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                workflow_decisions.delete().where(
                    workflow_decisions.c.run_id == run_id, workflow_decisions.c.step_id == step_id
                )
            )

    def record_halt(self, run_id: str, step_id: str, rule: str, message: str) -> None:
        """A halt or divergence is a fact of the run, kept until the step is resolved."""
        with self.engine.begin() as conn:
            conn.execute(
                workflow_steps.update()
                .where(workflow_steps.c.run_id == run_id, workflow_steps.c.step_id == step_id)
                .values(halt_rule=rule, halt_message=message)
            )
            halts = conn.execute(sa.select(workflow_runs.c.halts).where(workflow_runs.c.run_id == run_id)).scalar_one()
            halts = [h for h in (halts or []) if h.get("step_id") != step_id]
            halts.append(Halt(step_id, rule, message).as_json())
            conn.execute(workflow_runs.update().where(workflow_runs.c.run_id == run_id).values(halts=halts))

    # --- events -----------------------------------------------------------------------
    def add_event(
        self, run_id: str, type_: str, step_id: str | None, generation: int | None, data: dict[str, Any]
    ) -> EventRecord:
        at = stamp()
        with self.engine.begin() as conn:
            seq = conn.execute(
                workflow_events.insert().values(
                    run_id=run_id, type=type_, step_id=step_id, generation=generation, data=data, at=at
                )
            ).inserted_primary_key[0]  # type: ignore[index]  # an insert has a key
        return EventRecord(seq, run_id, type_, step_id, generation, data, at)

    def events(self, run_id: str, after_seq: int, limit: int) -> list[EventRecord]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(workflow_events)
                .where(workflow_events.c.run_id == run_id, workflow_events.c.seq > after_seq)
                .order_by(workflow_events.c.seq)
                .limit(limit)
            ).mappings()
            return [
                EventRecord(r["seq"], r["run_id"], r["type"], r["step_id"], r["generation"], r["data"], r["at"])
                for r in rows
            ]


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _run(row: Any) -> RunRecord:  # a RowMapping
    return RunRecord(
        run_id=row["run_id"],
        workflow_name=row["workflow_name"],
        tier=Tier(row["tier"]),
        state=RunState(row["state"]),
        kind=RunKind(row["kind"]) if row["kind"] else None,
        generation=row["generation"],
        source=row["source"],
        source_path=row["source_path"],
        content_hash=row["content_hash"],
        inputs_json=row["inputs_json"],
        output_json=row["output_json"],
        warnings=tuple(row["warnings"] or ()),
        halts=tuple(Halt(h["step_id"], h["rule"], h["message"]) for h in row["halts"] or ()),
        current_step_id=row["current_step_id"],
        driver_pid=row["driver_pid"],
        drives=row["drives"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
    )


def _step(row: Any) -> StepRecord:  # a RowMapping
    return StepRecord(
        run_id=row["run_id"],
        step_id=row["step_id"],
        state=StepState(row["state"]),
        position=row["position"],
        attempts=row["attempts"],
        policy=row["policy"],
        fingerprint=row["fingerprint"],
        fingerprint_scheme=row["fingerprint_scheme"],
        envelope=row["envelope"],
        output=row["output"],
        error=row["error"],
        error_kind=StepErrorKind(row["error_kind"]) if row["error_kind"] else None,
        terminal_id=row["terminal_id"],
        generation=row["generation"],
        halt_rule=row["halt_rule"],
        halt_message=row["halt_message"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
    )
