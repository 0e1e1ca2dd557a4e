"""Scheduled flows and their runs in SQLite, read back as `flows/records.py`'s records.

Like the rest of the store, every method is one transaction and runs on the store's one
thread (`await store.run(flow_tables.get_flow, name)`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from ..flows.records import FlowRecord, FlowRun, FlowSpec
from .schema import flow_runs, flows

KEEP_RUNS_PER_FLOW = 200  # older runs of a flow are dropped as new ones are recorded
STAMP = "%Y-%m-%dT%H:%M:%SZ"


def stamp(moment: datetime | None = None) -> str:
    """UTC, second precision, `Z` suffix (what the flow tables hold)."""
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime(STAMP)


def parse_stamp(text: str | None) -> datetime | None:
    return datetime.strptime(text, STAMP).replace(tzinfo=UTC) if text else None


class FlowTables:
    def __init__(self, engine: sa.Engine):
        self.engine = engine

    # --- flows --------------------------------------------------------------------------
    def put_flow(self, spec: FlowSpec, next_run: datetime | None) -> FlowRecord:
        """Add the flow, or replace the definition of the one with its name (its runs stay);
        either way it is enabled."""
        values = {
            "file_path": spec.file_path,
            "schedule": spec.schedule,
            "timezone": spec.timezone,
            "agent_profile": spec.agent_profile,
            "provider": spec.provider,
            "script": spec.script,
            "engine": spec.engine,
            "host": spec.host,
            "timeout": spec.timeout,
            "prompt_template": spec.prompt_template,
            "description": spec.description,
            "enabled": True,
            "next_run": stamp(next_run) if next_run else None,
        }
        with self.engine.begin() as conn:
            found = conn.execute(sa.update(flows).where(flows.c.name == spec.name).values(**values)).rowcount
            if not found:
                conn.execute(flows.insert().values(name=spec.name, added_at=stamp(), **values))
            row = conn.execute(sa.select(flows).where(flows.c.name == spec.name)).mappings().one()
        return _flow(row)

    def get_flow(self, name: str) -> FlowRecord | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(flows).where(flows.c.name == name)).mappings().first()
        return _flow(row) if row else None

    def list_flows(self) -> list[FlowRecord]:
        with self.engine.connect() as conn:
            return [_flow(r) for r in conn.execute(sa.select(flows).order_by(flows.c.name)).mappings()]

    def set_enabled(self, name: str, enabled: bool, next_run: datetime | None) -> bool:
        with self.engine.begin() as conn:
            query = sa.update(flows).where(flows.c.name == name)
            values = {"enabled": enabled, "next_run": stamp(next_run) if next_run else None}
            return conn.execute(query.values(**values)).rowcount > 0

    def set_times(self, name: str, next_run: datetime | None, last_run: datetime | None = None) -> None:
        values: dict[str, Any] = {"next_run": stamp(next_run) if next_run else None}
        if last_run is not None:
            values["last_run"] = stamp(last_run)
        with self.engine.begin() as conn:
            conn.execute(sa.update(flows).where(flows.c.name == name).values(**values))

    def set_last_run(self, name: str, last_run: datetime) -> None:
        with self.engine.begin() as conn:
            conn.execute(sa.update(flows).where(flows.c.name == name).values(last_run=stamp(last_run)))

    def delete_flow(self, name: str) -> bool:
        """Remove the flow and its runs."""
        with self.engine.begin() as conn:
            found = conn.execute(sa.delete(flows).where(flows.c.name == name)).rowcount > 0
            conn.execute(sa.delete(flow_runs).where(flow_runs.c.flow_name == name))
        return found

    # --- runs ---------------------------------------------------------------------------
    def add_run(self, values: Mapping[str, Any]) -> FlowRun:
        with self.engine.begin() as conn:
            inserted = conn.execute(flow_runs.insert().values(**values)).inserted_primary_key
            assert inserted is not None
            run_id = inserted[0]
            oldest_kept = (
                sa.select(flow_runs.c.id)
                .where(flow_runs.c.flow_name == values["flow_name"])
                .order_by(flow_runs.c.id.desc())
                .offset(KEEP_RUNS_PER_FLOW - 1)
                .limit(1)
                .scalar_subquery()
            )
            # The newest run that started an agent stays too: it says which session is the flow's own.
            newest_agent = sa.func.coalesce(_newest_agent_run_id(values["flow_name"]).scalar_subquery(), 0)
            conn.execute(
                sa.delete(flow_runs).where(
                    flow_runs.c.flow_name == values["flow_name"],
                    flow_runs.c.id < oldest_kept,
                    flow_runs.c.id != newest_agent,
                )
            )
            row = conn.execute(sa.select(flow_runs).where(flow_runs.c.id == run_id)).mappings().one()
        return _run(row)

    def update_run(self, run_id: int, values: Mapping[str, Any]) -> FlowRun | None:
        with self.engine.begin() as conn:
            conn.execute(sa.update(flow_runs).where(flow_runs.c.id == run_id).values(**values))
            row = conn.execute(sa.select(flow_runs).where(flow_runs.c.id == run_id)).mappings().first()
        return _run(row) if row else None

    def newest_agent_run(self, name: str) -> FlowRun | None:
        """The flow's newest run that started an agent (recorded its terminal), if any."""
        query = sa.select(flow_runs).where(flow_runs.c.id == _newest_agent_run_id(name).scalar_subquery())
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return _run(row) if row else None

    def list_runs(self, name: str, limit: int) -> list[FlowRun]:
        query = sa.select(flow_runs).where(flow_runs.c.flow_name == name).order_by(flow_runs.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [_run(r) for r in conn.execute(query).mappings()]

    def interrupt_running(self, reason: str) -> list[FlowRun]:
        """Runs a previous cao-server left `running` (it stopped or crashed meanwhile)."""
        with self.engine.begin() as conn:
            ids = [r.id for r in conn.execute(sa.select(flow_runs.c.id).where(flow_runs.c.state == "running"))]
            if not ids:
                return []
            conn.execute(
                sa.update(flow_runs)
                .where(flow_runs.c.id.in_(ids))
                .values(state="interrupted", reason=reason, finished_at=stamp())
            )
            rows = conn.execute(sa.select(flow_runs).where(flow_runs.c.id.in_(ids))).mappings()
            return [_run(r) for r in rows]


def _newest_agent_run_id(name: str) -> sa.Select:
    return sa.select(sa.func.max(flow_runs.c.id)).where(
        flow_runs.c.flow_name == name, flow_runs.c.terminal_id.is_not(None)
    )


def _flow(row: Any) -> FlowRecord:
    spec = FlowSpec(
        name=row["name"],
        schedule=row["schedule"],
        timezone=row["timezone"],
        agent_profile=row["agent_profile"],
        provider=row["provider"],
        script=row["script"],
        engine=row["engine"],
        timeout=row["timeout"],
        prompt_template=row["prompt_template"],
        file_path=row["file_path"],
        description=row["description"] or "",
        host=row["host"],
    )
    return FlowRecord(
        spec=spec,
        enabled=bool(row["enabled"]),
        last_run=parse_stamp(row["last_run"]),
        next_run=parse_stamp(row["next_run"]),
        added_at=row["added_at"],
    )


def _run(row: Any) -> FlowRun:
    return FlowRun(
        id=row["id"],
        flow_name=row["flow_name"],
        trigger=row["trigger"],
        state=row["state"],
        started_at=row["started_at"],
        due_at=row["due_at"],
        finished_at=row["finished_at"],
        execute=row["execute"],
        gate_output=row["gate_output"],
        reason=row["reason"],
        session_name=row["session_name"],
        terminal_id=row["terminal_id"],
        prompt=row["prompt"],
        reply=row["reply"],
    )
