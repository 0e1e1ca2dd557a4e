"""Tables and migrations, in SQLAlchemy Core so that the SQL stays portable
(SQLite today, PostgreSQL when a user outgrows one machine).

The schema is versioned: `MIGRATIONS[n]` moves a database from version n to n+1.
Add a function at the end; never edit one that has shipped.
"""
from __future__ import annotations

from typing import Callable

import sqlalchemy as sa

metadata = sa.MetaData()

schema_version = sa.Table(
    "schema_version", metadata,
    sa.Column("version", sa.Integer, nullable=False),
)

terminals = sa.Table(
    "terminals", metadata,
    sa.Column("id", sa.String(8), primary_key=True),
    sa.Column("session_name", sa.String(64), nullable=False, index=True),
    sa.Column("window_name", sa.String(64), nullable=False),
    sa.Column("window_id", sa.String(16)),  # tmux @N, stable while the window lives
    sa.Column("provider", sa.String(32), nullable=False),
    sa.Column("agent_profile", sa.String(64), nullable=False),
    sa.Column("working_directory", sa.Text, nullable=False),
    sa.Column("caller_id", sa.String(8)),
    sa.Column("model", sa.String(128)),
    sa.Column("allowed_tools", sa.JSON),
    sa.Column("status", sa.String(32), nullable=False, server_default="unknown"),
    sa.Column("status_source", sa.String(32)),
    sa.Column("status_reason", sa.Text),
    sa.Column("gone", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("created_at", sa.String(40), nullable=False),
    sa.Column("last_active", sa.String(40), nullable=False),
)

inbox_messages = sa.Table(
    "inbox_messages", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("sender_id", sa.String(128), nullable=False),
    sa.Column("receiver_id", sa.String(8), nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False, index=True),
    sa.Column("created_at", sa.String(40), nullable=False),
    sa.Column("claimed_at", sa.String(40)),
    sa.Column("delivered_at", sa.String(40)),
    sa.Column("error", sa.Text),
    sa.Index("ix_inbox_receiver_status", "receiver_id", "status", "id"),
)


def _v0_to_v1(conn: sa.Connection) -> None:
    for table in (terminals, inbox_messages):
        table.create(conn, checkfirst=True)


MIGRATIONS: list[Callable[[sa.Connection], None]] = [_v0_to_v1]
LATEST_VERSION = len(MIGRATIONS)


def migrate(conn: sa.Connection) -> int:
    """Bring the database to LATEST_VERSION; returns the version it started at."""
    schema_version.create(conn, checkfirst=True)
    current = conn.execute(sa.select(schema_version.c.version)).scalar()
    if current is None:
        conn.execute(schema_version.insert().values(version=0))
        current = 0
    if current > LATEST_VERSION:
        raise RuntimeError(f"database schema v{current} is newer than this cao (v{LATEST_VERSION}); "
                           "upgrade cao or use another CAO_HOME_DIR")
    for version in range(current, LATEST_VERSION):
        MIGRATIONS[version](conn)
        conn.execute(schema_version.update().values(version=version + 1))
    return current
