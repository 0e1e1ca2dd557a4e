"""A database another process holds locked: status edges are still published at once and
written once the lock goes, writes that cannot wait get a clear 503 with the reason, and
nothing is half made or lost."""

from __future__ import annotations

import json
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path

import httpx
from conftest import CaoServer, wait_until


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
