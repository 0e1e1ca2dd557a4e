"""No orphans after a crash: a handoff's worker whose call died with cao-server (kill -9) is torn
down at the next start — row and tmux window, scrollback saved — with a log line and a
`handoff.orphaned` event, also while it was still starting or waiting at a question; an assigned
worker outlives its caller's call and is kept. A normal handoff leaves no open record, a workflow
step none at all; the record's table migrates and round-trips on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from cao_support import CaoServer, read_records, wait_until
from workflow_support import Workflows

from cli_agent_orchestrator.store.db import Store, engine_url
from cli_agent_orchestrator.store.handoffs import HandoffRecord, HandoffState, HandoffTables
from cli_agent_orchestrator.store.schema import LATEST_VERSION, MIGRATIONS, schema_version

OPEN = ("waiting", "asking")


# --- helpers --------------------------------------------------------------------------------------
def audited(make, **env: str) -> CaoServer:
    """A started cao-server whose audit_log plugin writes every event to <home>/logs/audit.jsonl."""
    server = make(**env)
    server.home.mkdir(parents=True, exist_ok=True)
    (server.home / "settings.json").write_text(json.dumps({"plugins": {"enabled": ["audit_log"]}}))
    return server.start()


def orphaned_events(server: CaoServer) -> list[dict]:
    return [e for e in read_records(server.home / "logs" / "audit.jsonl") if e["type"] == "handoff.orphaned"]  # type: ignore[index]


def records(server: CaoServer) -> list[tuple]:
    """(job id, caller, worker, agent, state, error) of every handoff record, oldest first."""
    return server.sql("SELECT job_id, caller_id, terminal_id, agent, state, error FROM handoffs ORDER BY created_at")


def windows(server: CaoServer) -> set[str]:
    return set(server.tmux("list-windows", "-a", "-F", "#{window_id}").stdout.split())


def window_of(server: CaoServer, terminal_id: str) -> str:
    return server.sql("SELECT window_id FROM terminals WHERE id = :id", id=terminal_id)[0][0]


def removed(server: CaoServer, terminal_id: str) -> bool:
    return server.client.get(f"/terminals/{terminal_id}").status_code == 404


class BackgroundHandoff:
    """`POST /terminals/run-step` waiting in a thread of its own, as MCP `handoff`'s call waits."""

    def __init__(self, server: CaoServer, **body: object):
        self.response: httpx.Response | None = None
        self.error: Exception | None = None
        body = {"agent": "developer", "provider": "mock_cli", "timeout": 120, **body}
        self.thread = threading.Thread(target=self._call, args=(server.url, body), daemon=True)
        self.thread.start()

    def _call(self, url: str, body: dict) -> None:
        try:
            with httpx.Client(base_url=url, timeout=150) as client:
                self.response = client.post("/terminals/run-step", json=body)
        except httpx.HTTPError as exc:
            self.error = exc

    def died_with_the_server(self) -> bool:
        self.thread.join(15)
        return not self.thread.is_alive() and self.response is None and self.error is not None


def assign(server: CaoServer, caller_id: str, session: str, task: str) -> str:
    """An assigned worker, created as MCP `assign` creates it."""
    resp = server.client.post(
        f"/sessions/{session}/terminals",
        params={"agent_profile": "developer", "provider": "mock_cli", "caller_id": caller_id, "defer_init": "true"},
        json={"initial_message": task, "initial_message_orchestration_type": "assign"},
    )
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


# --- after a crash ----------------------------------------------------------------------------------
def test_a_handoff_worker_whose_call_died_is_torn_down_and_an_assigned_one_kept(cao_factory):
    check_handoff_worker_torn_down_and_assigned_kept(cao_factory)


def check_handoff_worker_torn_down_and_assigned_kept(make) -> None:
    server = audited(make)
    sup = server.create_session("code_supervisor")
    assigned = assign(server, sup["id"], sup["session_name"], "__mock_sleep_60")
    call = BackgroundHandoff(server, prompt="__mock_sleep_60", caller_id=sup["id"])
    job, caller, worker, agent, state, _ = wait_until(
        lambda: next((r for r in records(server) if r[4] in OPEN), None), 20, message="the handoff recorded"
    )
    assert (caller, agent, state) == (sup["id"], "developer", "waiting")
    wait_until(lambda: not removed(server, worker), 10, message="the worker's row written")  # after its record
    server.wait_status(worker, "processing", 20)
    server.wait_status(assigned, "processing", 20)
    worker_window, assigned_window = window_of(server, worker), window_of(server, assigned)

    server.kill9()
    assert call.died_with_the_server()
    server.start()

    wait_until(lambda: removed(server, worker), 15, message="the handoff's worker removed")
    assert worker_window not in windows(server)
    assert (server.home / "logs" / "terminal" / f"{worker}.scrollback").is_file()  # a normal teardown
    [(_, _, _, _, state, error)] = [r for r in records(server) if r[0] == job]
    assert state == "orphaned" and "died with the previous cao-server" in error
    [event] = wait_until(lambda: orphaned_events(server), 10, message="handoff.orphaned in the audit log")
    assert event["data"]["terminal_id"] == worker and event["data"]["caller_id"] == sup["id"]
    assert event["topic"] == f"handoff.{job}.orphaned" and event["actor"] == sup["id"]
    assert (
        f"handoff {job} to developer for {sup['id']}: worker {worker} torn down"
        in (server.home / "server.out").read_text()
    )
    # The assigned worker outlives its caller's call by design: adopted, still at work.
    kept = server.client.get(f"/terminals/{assigned}").json()
    assert kept["gone"] is False and kept["status"] == "processing"
    assert assigned_window in windows(server)
    assert server.client.get(f"/terminals/{sup['id']}").json()["gone"] is False


def test_a_worker_still_starting_and_one_never_created_are_closed_too(cao_factory):
    """The HTTP client's handoff dies while its worker starts (its record and row exist); another
    record names a worker whose row was never written (the crash came between the two)."""
    server = audited(cao_factory, CAO_MOCK_STARTUP_MS="60000")
    call = BackgroundHandoff(server, prompt="never typed")
    job, caller, worker, _, _, _ = wait_until(
        lambda: next((r for r in records(server) if r[4] in OPEN), None), 20, message="the handoff recorded"
    )
    assert caller is None  # the HTTP client
    wait_until(lambda: not removed(server, worker), 10, message="the worker's row written")
    assert server.status(worker) != "idle"  # still starting
    window = window_of(server, worker)
    server.kill9()
    assert call.died_with_the_server()
    server.sql(
        "INSERT INTO handoffs (job_id, caller_id, terminal_id, agent, state, deadline, created_at) "
        "VALUES ('neverstarted', NULL, '0badf00d', 'developer', 'waiting', '2099-01-01', '2000-01-01')"
    )
    server.start()

    wait_until(lambda: removed(server, worker), 15, message="the starting worker removed")
    assert window not in windows(server)
    states = {r[0]: r[4] for r in records(server)}
    assert states == {job: "orphaned", "neverstarted": "orphaned"}
    events = wait_until(lambda: len(orphaned_events(server)) == 2 and orphaned_events(server), 10)
    assert {(e["data"]["terminal_id"], e["data"]["caller_id"]) for e in events} == {(worker, None), ("0badf00d", None)}
    assert f"worker {worker} torn down at start-up" in (server.home / "server.out").read_text()
    assert "for the HTTP client" in (server.home / "server.out").read_text()


def test_a_worker_kept_at_its_question_is_torn_down_and_its_caller_told(cao_factory):
    """The grace period of a worker that asked lived in the old server: it ends with it."""
    server = audited(cao_factory)
    sup = server.create_session("code_supervisor")
    resp = server.client.post(
        "/terminals/run-step",
        json={"agent": "developer", "provider": "mock_cli", "prompt": "__mock_ask__", "caller_id": sup["id"]},
    )
    assert resp.status_code == 502 and resp.json()["detail"]["kind"] == "waiting_user_answer", resp.text
    worker = resp.json()["detail"]["terminal_id"]
    [(job, _, _, _, state, _)] = records(server)
    assert state == "asking" and server.status(worker) == "waiting_user_answer"

    server.kill9()
    server.start()

    wait_until(lambda: removed(server, worker), 15, message="the asking worker removed")
    assert records(server)[0][4] == "orphaned" and "grace period ended" in records(server)[0][5]
    assert [e["data"]["terminal_id"] for e in wait_until(lambda: orphaned_events(server), 10)] == [worker]
    notes = wait_until(
        lambda: [
            m["message"]
            for m in server.client.get(f"/terminals/{sup['id']}/inbox/messages").json()
            if worker in m["message"]
        ],
        10,
        message="the caller told",
    )
    assert "has been removed: cao-server restarted" in notes[0]


# --- without a crash ------------------------------------------------------------------------------
def test_normal_handoffs_leave_no_open_record(cao: CaoServer):
    sup = cao.create_session("code_supervisor")
    base = {"agent": "developer", "provider": "mock_cli", "caller_id": sup["id"]}
    done = cao.client.post("/terminals/run-step", json={**base, "prompt": "hello"})
    assert done.status_code == 200, done.text
    failed = cao.client.post("/terminals/run-step", json={**base, "prompt": "__mock_error__"})
    assert failed.status_code == 502, failed.text
    kept = cao.client.post("/terminals/run-step", json={**base, "prompt": "hello", "teardown": False})
    assert kept.status_code == 200, kept.text  # its worker outlives the call: no record
    asked = cao.client.post("/terminals/run-step", json={**base, "prompt": "__mock_ask__"})
    asker = asked.json()["detail"]["terminal_id"]
    cao.send(asker, "1")  # answered: its reply goes to the caller's inbox, then it is removed
    wait_until(lambda: removed(cao, asker), 15, message="the answered worker removed")

    rows = wait_until(lambda: (rows := records(cao))[-1][4] != "asking" and rows, 10, message="the linger closed")
    assert [(r[1], r[2], r[4]) for r in rows] == [
        (sup["id"], done.json()["terminal_id"], "completed"),
        (sup["id"], failed.json()["detail"]["terminal_id"], "failed"),
        (sup["id"], asker, "completed"),
    ]
    assert rows[0][5] is None and "error" in rows[1][5]


def test_a_workflow_step_is_left_to_the_workflow_journal(cao: CaoServer):
    wf = Workflows(cao)
    name = wf.write("one_step.py", 'from cao_workflow import run_step\nrun_step("mock_cli", "reviewer", "hi")\n')
    assert wf.run_ok(name)["state"] == "completed"
    assert records(cao) == []


def test_on_postgresql_a_handoff_worker_whose_call_died_is_torn_down(pg_cao_factory):
    check_handoff_worker_torn_down_and_assigned_kept(pg_cao_factory)


# --- the table on both engines ---------------------------------------------------------------------
@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "cao.db")
    return request.getfixturevalue("postgres").new_database()


def test_a_v8_database_migrates_and_records_round_trip(store_url: str):
    engine = sa.create_engine(engine_url(store_url), poolclass=sa.pool.NullPool)
    with engine.begin() as conn:  # a database as the previous cao left it
        schema_version.create(conn)
        conn.execute(schema_version.insert().values(version=8))
        for step in MIGRATIONS[:8]:
            step(conn)
    assert "handoffs" not in sa.inspect(engine).get_table_names()
    engine.dispose()

    store = Store(store_url)
    try:
        with store.engine.connect() as conn:
            assert conn.execute(sa.select(schema_version.c.version)).scalar() == LATEST_VERSION
        tables = HandoffTables(store.engine)
        tables.open_handoff(HandoffRecord("job1", None, "1234abcd", "developer", HandoffState.WAITING, "2099-01-01"))
        tables.open_handoff(HandoffRecord("job2", "0c1d2e3f", "5678abcd", "reviewer", HandoffState.WAITING, "x"))
        assert tables.set_asking("job2", "2099-02-02")
        assert [r.job_id for r in tables.list_open()] == ["job1", "job2"]
        assert tables.close("job1", HandoffState.COMPLETED)
        assert not tables.close("job1", HandoffState.ORPHANED)  # a record closes once
        assert not tables.set_asking("job1", "later")
        assert tables.close("job2", HandoffState.ORPHANED, "the call died")
        assert tables.list_open() == []
        job2 = tables.get("job2")
        assert job2 is not None and job2.caller_id == "0c1d2e3f" and job2.deadline == "2099-02-02"
        assert job2.state == HandoffState.ORPHANED and job2.error == "the call died" and job2.finished_at
        job1 = tables.get("job1")
        assert job1 is not None and job1.state == HandoffState.COMPLETED and job1.error is None
    finally:
        store.close()
