"""A database another process holds locked: status edges are still published at once and
written once the lock goes, writes that cannot wait get a clear 503 with the reason, and
nothing is half made or lost. An inbox delivery that met the lock is tried again about a second
later (a timer), not at the next sweep. On PostgreSQL a table lock answers 503 within
CAO_DB_BUSY_TIMEOUT (its lock_timeout), never an open-ended wait."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
from conftest import CaoServer, read_records, wait_until


@contextmanager
def locked(db: Path):
    """Hold SQLite's write lock like another program would (BEGIN EXCLUSIVE)."""
    conn = sqlite3.connect(db, timeout=0, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def _follow(cao: CaoServer, pattern: str, seen: list[dict], stop: threading.Event) -> threading.Thread:
    def run() -> None:
        try:
            with httpx.Client(base_url=cao.url, timeout=None) as client:
                with client.stream("GET", "/events", params={"pattern": pattern}) as resp:
                    for line in resp.iter_lines():
                        if line.startswith("data: "):
                            seen.append(json.loads(line[len("data: ") :]))
                        if stop.is_set():
                            return
        except httpx.HTTPError:
            pass  # the server stopped at the end of the test

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _db_status(cao: CaoServer, terminal_id: str) -> str:
    with sqlite3.connect(cao.home / "db" / "cli-agent-orchestrator.db", timeout=5) as db:
        return db.execute("SELECT status FROM terminals WHERE id = ?", (terminal_id,)).fetchone()[0]


def test_a_locked_database_loses_no_status_and_answers_503(cao_factory):
    cao = cao_factory(CAO_DB_BUSY_TIMEOUT="1.5").start()
    db = cao.home / "db" / "cli-agent-orchestrator.db"
    term = cao.create_session()
    tid = term["id"]
    seen: list[dict] = []
    stop = threading.Event()
    _follow(cao, f"terminal.{tid}.status", seen, stop)
    wait_until(
        lambda: (
            cao.client.get("/diagnostics").json()["subscribers"]
            and any(s["name"].startswith("sse:") for s in cao.client.get("/diagnostics").json()["subscribers"])
        ),
        message="SSE subscribed",
    )
    windows = cao.tmux("list-windows", "-a", "-F", "#{window_id}").stdout.split()
    with locked(db):
        cao.send(tid, "__mock_sleep_1")  # the turn starts and ends while the lock is held
        wait_until(
            lambda: any(e["status"] == "completed" for e in seen),
            timeout=15,
            message="completed published during the lock",
        )
        assert cao.status(tid) == "completed"
        refused = cao.client.post("/sessions", params={"agent_profile": "developer", "provider": "mock_cli"})
        assert refused.status_code == 503, refused.text
        assert "locked" in refused.json()["detail"]
        inbox = cao.client.post(f"/terminals/{tid}/inbox/messages", json={"sender_id": "t", "message": "m"})
        assert inbox.status_code == 503 and "locked" in inbox.json()["detail"]
        # A refused creation leaves no window, no terminal and no launch file behind.
        assert cao.tmux("list-windows", "-a", "-F", "#{window_id}").stdout.split() == windows
        assert list((cao.home / "tmp").glob("*.env")) == []
        assert _db_status(cao, tid) != "completed"  # not written yet: the lock is still held
    wait_until(lambda: _db_status(cao, tid) == "completed", timeout=10, message="status written after the lock")
    stop.set()
    assert [e["status"] for e in seen].count("completed") == 1
    assert cao.client.get("/diagnostics").json()["consumer_failures"] == []
    assert cao.client.get("/terminals").json()[0]["id"] == tid
    again = cao.create_session()
    assert again["status"] == "idle"


def _inbox(cao: CaoServer, tid: str) -> list[dict]:
    return cao.client.get(f"/terminals/{tid}/inbox/messages").json()


def test_a_delivery_that_met_a_locked_database_is_retried_within_about_a_second(cao_factory, tmp_path: Path):
    """The receiver becomes ready while another program holds the database: the delivery
    that edge started fails on the lock and is tried again shortly (a timer), not at the next
    sweep (set to ten minutes here), and nothing else would start it."""
    record = tmp_path / "rec.jsonl"
    cao = cao_factory(CAO_DB_BUSY_TIMEOUT="0.3", CAO_INBOX_SWEEP_SECONDS="600", CAO_MOCK_RECORD=str(record)).start()
    db = cao.home / "db" / "cli-agent-orchestrator.db"
    rcv = cao.create_session()["id"]
    cao.send(rcv, "__mock_sleep_1")
    cao.wait_status(rcv, "processing")
    posted = cao.client.post(f"/terminals/{rcv}/inbox/messages", json={"sender_id": "t", "message": "after the lock"})
    assert posted.status_code == 200, posted.text
    log = cao.home / "server.out"
    deferrals_before = log.read_text(errors="replace").count(f"delivery to {rcv} deferred")
    with locked(db):
        cao.wait_status(rcv, "completed")  # the ready edge, published while the lock is held
        # The delivery it started met the lock, and so did at least one retry after it.
        wait_until(
            lambda: log.read_text(errors="replace").count(f"delivery to {rcv} deferred") >= deferrals_before + 2,
            timeout=10,
            message="the delivery deferred, then retried, on the lock",
        )
        assert [m["status"] for m in _inbox(cao, rcv)] == ["pending"]  # reads still go on
    released = time.monotonic()
    wait_until(
        lambda: [m["status"] for m in _inbox(cao, rcv)] == ["delivered"],
        timeout=4,
        message="delivered about a second after the lock went (not at the sweep)",
    )
    assert time.monotonic() - released < 4
    wait_until(lambda: len(read_records(record)) == 2, message="typed into the receiver")
    assert read_records(record) == ["__mock_sleep_1", "after the lock"]


def test_a_postgresql_lock_answers_503_within_the_busy_timeout_and_loses_nothing(pg_cao_factory):
    import psycopg

    cao = pg_cao_factory(CAO_DB_BUSY_TIMEOUT="1").start()
    url = cao.env["CAO_DATABASE_URL"]
    tid = cao.create_session()["id"]
    cao.send(tid, "__mock_sleep_1")
    cao.wait_status(tid, "processing")
    with psycopg.connect(url) as holder:  # a transaction of another program
        holder.execute("LOCK TABLE inbox_messages IN ACCESS EXCLUSIVE MODE")
        holder.execute("LOCK TABLE terminals IN EXCLUSIVE MODE")  # its writes wait; reads go on
        started = time.monotonic()
        refused = cao.client.post(
            f"/terminals/{tid}/inbox/messages", json={"sender_id": "t", "message": "refused"}, timeout=15
        )
        waited = time.monotonic() - started
        assert refused.status_code == 503, refused.text
        assert refused.headers["content-type"].startswith("application/json")
        detail = refused.json()["detail"]
        assert "locked" in detail and "try again" in detail, detail
        assert waited < 1 + 5, waited  # the busy timeout, not an open-ended wait
        cao.wait_status(tid, "completed")  # published at once; its row waits for the lock
        holder.rollback()
    wait_until(
        lambda: cao.sql("SELECT status FROM terminals WHERE id = :id", id=tid) == [("completed",)],
        timeout=10,
        message="the status written once the lock went",
    )
    assert cao.sql("SELECT COUNT(*) FROM inbox_messages") == [(0,)]  # the refused one was not half made
    accepted = cao.client.post(f"/terminals/{tid}/inbox/messages", json={"sender_id": "t", "message": "accepted"})
    assert accepted.status_code == 200, accepted.text
    wait_until(
        lambda: [(m["message"], m["status"]) for m in _inbox(cao, tid)] == [("accepted", "delivered")],
        message="delivered after the lock",
    )
