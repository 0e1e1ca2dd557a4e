"""Every older database upgrades: a dump of each schema version below LATEST_VERSION
(tests/fixtures/schemas, written by scripts/make_schema_fixtures.py from git history) is loaded
into a fresh SQLite file and a fresh PostgreSQL database, a real cao-server starts on it, and
then the schema is the latest, every table, column and index of a fresh database is there
(on PostgreSQL with the same column types), and the rows it held read back through the API.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from conftest import REPO, CaoServer, wait_until

from cli_agent_orchestrator.store.db import Store, engine_url
from cli_agent_orchestrator.store.schema import LATEST_VERSION

FIXTURES = REPO / "tests" / "fixtures" / "schemas"
TERMINAL_ID = "fe000001"  # the rows' values are those of scripts/make_schema_fixtures.py
DB_FILE = Path("db") / "cli-agent-orchestrator.db"


def fixture_sql(version: int, dialect: str) -> str:
    return (FIXTURES / f"v{version}.{dialect}.sql").read_text(encoding="utf-8")


def test_a_fixture_exists_for_every_older_version():
    """A new migration comes with the dump of the version it upgrades from."""
    for version in range(LATEST_VERSION):
        for dialect in ("sqlite", "postgresql"):
            assert f"INSERT INTO schema_version (version) VALUES ({version});" in fixture_sql(version, dialect)


def shape(url: str, with_types: bool) -> dict[str, object]:
    """Tables → columns (with their type's class on PostgreSQL) and index names."""
    engine = sa.create_engine(engine_url(url), poolclass=sa.pool.NullPool)
    try:
        inspector = sa.inspect(engine)
        out: dict[str, object] = {}
        for table in sorted(inspector.get_table_names()):
            columns = {
                c["name"]: (type(c["type"]).__name__ if with_types else None) for c in inspector.get_columns(table)
            }
            indexes = sorted(i["name"] or "" for i in inspector.get_indexes(table))
            out[table] = (columns, indexes)
        return out
    finally:
        engine.dispose()


def fresh_shape(url: str, with_types: bool) -> dict[str, object]:
    Store(url).close()  # a new database, migrated from nothing
    return shape(url, with_types)


def check_upgraded(server: CaoServer, version: int, url: str, fresh: dict[str, object], with_types: bool) -> None:
    assert server.sql("SELECT version FROM schema_version") == [(LATEST_VERSION,)]
    assert shape(url, with_types) == fresh
    assert server.client.get("/diagnostics").json()["consumer_failures"] == []
    if version >= 1:
        term = server.client.get(f"/terminals/{TERMINAL_ID}")
        assert term.status_code == 200, term.text
        body = term.json()
        assert (body["provider"], body["agent_profile"], body["session_name"]) == (
            "mock_cli",
            "developer",
            "cao-fixture",
        )
        # Its tmux window did not survive (there is no tmux server): gone, and the message
        # that waited for it fails with the reason; the delivered one keeps its record.
        messages = wait_until(
            lambda: (
                (ms := server.client.get(f"/terminals/{TERMINAL_ID}/inbox/messages").json())
                and ms[1]["status"] != "pending"
                and ms
            ),
            message="the old pending message settled",
        )
        assert [(m["id"], m["message"], m["sender_id"]) for m in messages] == [
            (1, "an old delivered message", "fixture-sender"),
            (2, "an old pending message", "fixture-sender"),
        ]
        assert messages[0]["status"] == "delivered" and messages[0]["delivered_at"] == "2026-11-30T10:01:02.000Z"
        assert messages[1]["status"] == "failed" and messages[1]["error"], messages[1]
        # The inbox's ids go on after the old ones (PostgreSQL's sequence included).
        other = server.create_session()["id"]
        posted = server.client.post(
            f"/terminals/{other}/inbox/messages", json={"sender_id": "t", "message": "after the upgrade"}
        )
        assert posted.status_code == 200 and posted.json()["message_id"] > 2, posted.text
    if version >= 2:
        run = server.client.get("/workflows/runs/fixture-run-1")
        assert run.status_code == 200, run.text
        assert run.json()["state"] == "completed" and run.json()["workflow_name"] == "fixture_flow"
    if version >= 5:
        [flow] = [f for f in server.client.get("/flows").json() if f["name"] == "fixture-flow"]
        assert flow["schedule"] == "0 9 * * 1-5" and flow["timezone"] == "Europe/Paris"
        assert flow["enabled"] is False and flow["description"] == "a flow kept across upgrades"
        runs = server.client.get("/flows/fixture-flow/runs").json()
        assert [(r["state"], r["reply"]) for r in runs] == [("completed", "hello")]
    if version >= 9:
        assert server.sql("SELECT job_id, state FROM handoffs") == [("fixture-handoff-1", "completed")]
    if version >= 11:
        body = server.client.get(f"/terminals/{TERMINAL_ID}").json()
        assert (body["description"], body["group"], body["metadata"]) == (
            "a worker kept across upgrades",
            ["fixture-team", "backend"],
            {"phase": "review"},
        )
    if version >= 12:  # the memory, and its full-text index (FTS5 triggers, the generated tsvector)
        found = server.client.get("/memories", params={"query": "kept upgrades", "sort_by": "score"}).json()
        assert [m["key"] for m in found] == ["fixture-memory"], found
        # v14 on, SQLite's index also holds each memory's scope: a search in one scope finds it.
        params = {"query": "kept upgrades", "sort_by": "score", "scope": "global", "scope_id": ""}
        in_scope = server.client.get("/memories", params=params).json()
        assert [m["key"] for m in in_scope] == ["fixture-memory"], in_scope


@pytest.mark.parametrize("version", range(LATEST_VERSION))
def test_an_older_sqlite_database_upgrades_on_start(cao_factory, tmp_path: Path, version: int):
    fresh = fresh_shape(str(tmp_path / "fresh.db"), with_types=False)
    server = cao_factory("home")
    db = server.home / DB_FILE
    db.parent.mkdir(mode=0o700)
    with sqlite3.connect(db) as conn:
        conn.executescript(fixture_sql(version, "sqlite"))
    conn.close()
    server.start()
    check_upgraded(server, version, str(db), fresh, with_types=False)


@pytest.mark.parametrize("version", range(LATEST_VERSION))
def test_an_older_postgresql_database_upgrades_on_start(cao_factory, postgres, version: int):
    import psycopg

    fresh = fresh_shape(postgres.new_database(), with_types=True)
    url = postgres.new_database()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(fixture_sql(version, "postgresql").encode())
    server = cao_factory("home", CAO_DATABASE_URL=url).start()
    check_upgraded(server, version, url, fresh, with_types=True)
