"""The host registry in the store, read back as `services/hosts/records.py`'s records.

Like the rest of the store, every method is one transaction and runs on the store's one
thread (`await store.run(host_tables.get_host, name)`). Values arrive validated.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ..services.hosts.records import HostRecord, HostState, parse_target
from .schema import hosts
from .stamps import utc_now


class HostTables:
    def __init__(self, engine: sa.Engine):
        self.engine = engine

    def add_host(self, record: HostRecord) -> HostRecord | None:
        """Store a new host; None when one of that name exists (it is left as it is)."""
        with self.engine.begin() as conn:
            if conn.execute(sa.select(hosts.c.name).where(hosts.c.name == record.name)).first():
                return None
            conn.execute(
                hosts.insert().values(
                    name=record.name,
                    ssh=str(record.target),
                    identity=record.identity,
                    max_agents=record.max_agents,
                    state=record.state,
                    added_at=utc_now(),
                )
            )
            row = conn.execute(sa.select(hosts).where(hosts.c.name == record.name)).mappings().one()
        return _host(row)

    def get_host(self, name: str) -> HostRecord | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(hosts).where(hosts.c.name == name)).mappings().first()
        return _host(row) if row else None

    def list_hosts(self) -> list[HostRecord]:
        with self.engine.connect() as conn:
            return [_host(r) for r in conn.execute(sa.select(hosts).order_by(hosts.c.name)).mappings()]

    def set_state(self, name: str, state: HostState) -> HostRecord | None:
        with self.engine.begin() as conn:
            conn.execute(sa.update(hosts).where(hosts.c.name == name).values(state=state))
            row = conn.execute(sa.select(hosts).where(hosts.c.name == name)).mappings().first()
        return _host(row) if row else None

    def delete_host(self, name: str) -> bool:
        with self.engine.begin() as conn:
            return conn.execute(sa.delete(hosts).where(hosts.c.name == name)).rowcount > 0


def _host(row: Any) -> HostRecord:
    return HostRecord(
        name=row["name"],
        target=parse_target(row["ssh"]),
        identity=row["identity"],
        max_agents=row["max_agents"],
        state=row["state"],
        added_at=row["added_at"],
    )
