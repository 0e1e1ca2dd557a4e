"""cao's state in PostgreSQL (CAO_DATABASE_URL), against a real PostgreSQL server from Debian's
packages started by the tests (pg_support.py):

- the store's own tests run against both SQLite and PostgreSQL: the schema and its migrations,
  terminals, and the inbox's exactly-once claim raced by many connections at once;
- the inbox crash tests (kill -9 at each point of a delivery; a crash between claim and
  paste) and workflow resume tests run unchanged against a PostgreSQL-backed cao-server.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import sqlalchemy as sa
from conftest import CaoServer
from test_inbox_crash import KILL_POINTS
from test_inbox_crash import (
    test_a_message_claimed_but_never_pasted_is_delivered_after_the_crash as claimed_never_pasted,
)
from test_inbox_crash import test_kill9_during_message_stream_loses_and_repeats_nothing as kill9_stream
from test_workflow_crash import test_server_killed_mid_step_then_resume_per_policy as killed_mid_step
from test_workflow_runs import test_decision_lasts_one_drive as decision_lasts_one_drive
from test_workflow_runs import (
    test_manual_step_halts_on_every_resume_and_skip_is_single_use as manual_halts,
)
from workflow_support import Workflows

from cli_agent_orchestrator.models import MessageStatus, Terminal
from cli_agent_orchestrator.store.db import Store, engine_url, safe_url
from cli_agent_orchestrator.store.schema import LATEST_VERSION


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "cao.db")
    return request.getfixturevalue("postgres").new_database()


# --- the store on both engines ---------------------------------------------------------------
def test_schema_migrates_to_the_latest_version_once(store_url: str):
    first = Store(store_url)
    first.close()
    again = Store(store_url)  # a second start finds the schema current
    with again.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version FROM schema_version")).scalar() == LATEST_VERSION
    again.close()


def test_terminal_rows_round_trip_with_json_and_long_values(store_url: str):
    store = Store(store_url)
    try:
        term = Terminal(
            id="abcd1234",
            session_name="cao-" + "s" * 60,
            window_name="p" * 64 + "-1a2b",  # a 64-character profile name and its suffix
            provider="mock_cli",
            agent_profile="p" * 64,
            working_directory="/tmp/ü and spaces",
            allowed_tools=["fs_read", "@cao-mcp-server"],
        )
        store.add_terminal(term, "@7", "secret")
        from cli_agent_orchestrator.models import TerminalStatus

        store.set_status(term.id, TerminalStatus.PROCESSING, "hook:" + "E" * 64, "reason " * 100)
        got = store.get_terminal(term.id)
        assert got is not None and got.allowed_tools == ["fs_read", "@cao-mcp-server"]
        assert got.window_name == term.window_name and got.status_source == "hook:" + "E" * 64
        assert store.window_id(term.id) == "@7" and store.hook_secret(term.id) == "secret"
        store.mark_gone(term.id, "gone for the test")
        assert store.get_terminal(term.id).gone is True
    finally:
        store.close()


def test_the_inbox_claim_is_exactly_once_across_racing_connections(store_url: str):
    """Eight stores (eight engines, eight connections) race to claim each of 40 messages:
    exactly one wins every message, whatever the engine."""
    stores = [Store(store_url) for _ in range(8)]
    try:
        messages = [stores[0].add_message("sender", "rcvr0001", f"m{i}") for i in range(40)]
        wins: list[tuple[int, int]] = []
        lock = threading.Lock()
        start = threading.Barrier(len(stores))

        def race(n: int, store: Store) -> None:
            start.wait()
            for msg in messages:
                fresh = store.get_message(msg.id)
                if fresh is not None and fresh.status == MessageStatus.PENDING and store.claim(fresh, f"{n}"):
                    with lock:
                        wins.append((msg.id, n))

        threads = [threading.Thread(target=race, args=(n, s)) for n, s in enumerate(stores)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(m for m, _ in wins) == [m.id for m in messages]  # each claimed, once
        assert stores[0].pending_counts() == {}
        assert {m.status for m in stores[0].messages_in_status(MessageStatus.DELIVERING)} == {MessageStatus.DELIVERING}
    finally:
        for store in stores:
            store.close()


def test_pending_order_and_counts(store_url: str):
    store = Store(store_url)
    try:
        for i in range(3):
            store.add_message("s", "rcvr0001", f"first {i}")
        store.add_message("s", "rcvr0002", "other")
        assert store.pending_counts() == {"rcvr0001": 3, "rcvr0002": 1}
        oldest = store.next_pending("rcvr0001")
        assert oldest is not None and oldest.message == "first 0"
        assert store.claim(oldest, "1,1,0") and store.next_pending("rcvr0001") is None  # order first
        store.finish_message(oldest.id, MessageStatus.DELIVERED)
        assert store.next_pending("rcvr0001").message == "first 1"
    finally:
        store.close()


def test_urls_are_checked_and_passwords_never_shown():
    assert engine_url("/x/cao.db") == "sqlite:////x/cao.db"
    assert engine_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    with pytest.raises(ValueError, match="postgresql://"):
        engine_url("mysql://u@h/db")
    assert "hunter2" not in safe_url("postgresql+psycopg://u:hunter2@h:5432/db")


# --- the server on PostgreSQL: the same crash and resume tests -------------------------------
@pytest.mark.parametrize("kill_point", list(KILL_POINTS))
def test_kill9_during_message_stream_on_postgresql(pg_cao_factory, tmp_path: Path, kill_point: str):
    kill9_stream(pg_cao_factory, tmp_path, kill_point)


def test_a_claimed_message_is_delivered_after_the_crash_on_postgresql(pg_cao_factory, tmp_path: Path):
    claimed_never_pasted(pg_cao_factory, tmp_path, "done", "done")


@pytest.fixture
def pg_wf(tmp_path: Path, postgres):
    server = CaoServer(tmp_path / "home", {"CAO_DATABASE_URL": postgres.new_database()}).start()
    try:
        assert not (tmp_path / "home" / "db" / "cli-agent-orchestrator.db").exists()  # no SQLite file
        yield Workflows(server)
    finally:
        server.cleanup()


def test_workflow_resume_halts_and_decisions_on_postgresql(pg_wf):
    manual_halts(pg_wf)
    decision_lasts_one_drive(pg_wf)


def test_server_killed_mid_step_then_resumed_on_postgresql(pg_wf):
    killed_mid_step(pg_wf)


def test_a_database_that_cannot_be_reached_is_said_plainly(tmp_path: Path):
    from cli_agent_orchestrator.errors import StoreUnavailable

    with pytest.raises(StoreUnavailable) as refused:
        Store("postgresql://cao:hunter2@127.0.0.1:1/none")
    message = str(refused.value)
    assert "cannot use the database postgresql+psycopg://cao:***@127.0.0.1:1/none" in message
    assert "hunter2" not in message and "refused" in message.lower()
