"""Issue 9 through the HTTP API of a real cao-server: nothing a client sends becomes tmux
syntax, a dead agent or a dead tmux server is told truthfully and never takes other agents
down, and no secret or private file is left readable or behind."""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import pytest
from cao_support import CaoServer, read_records, wait_until


def _tmux_pid(cao: CaoServer) -> int:
    return int(cao.tmux("display-message", "-p", "#{pid}").stdout.strip())


# --- 1. command execution through names and paths ---------------------------------------------
def test_a_working_directory_with_tmux_formats_is_only_a_path(cao: CaoServer, tmp_path: Path):
    marker = tmp_path / "pwned"
    workdir = tmp_path / "proj#(touch pwned)#{pane_id}"
    workdir.mkdir()
    term = cao.create_session(working_directory=str(workdir))
    assert term["working_directory"] == str(workdir)
    wait_until(
        lambda: (
            cao.client.get(f"/terminals/{term['id']}/working-directory").json()["working_directory"] == str(workdir)
        ),
        message="the agent runs in the literal directory",
    )
    # A worker inherits its caller's live directory: the same path again, still only a path.
    worker = cao.client.post(
        f"/sessions/{term['session_name']}/terminals",
        params={"agent_profile": "developer", "provider": "mock_cli", "caller_id": term["id"]},
    )
    assert worker.status_code == 201, worker.text
    assert worker.json()["working_directory"] == str(workdir)
    step = cao.client.post(
        "/terminals/run-step",
        json={"agent": "developer", "provider": "mock_cli", "prompt": "hi", "caller_id": term["id"]},
    )
    assert step.status_code == 200, step.text
    for where in (tmp_path, workdir, Path.cwd(), cao.home):
        assert not (where / "pwned").exists()
    assert not marker.exists()


@pytest.mark.parametrize(
    "field,value",
    [
        ("session_name", "leak\n"),
        ("session_name", "ok\nkill-server"),
        ("session_name", "x#(touch y)"),
        ("session_name", "a:b"),
        ("agent_profile", "developer\n"),
        ("model", "m\n"),
        ("provider", "mock_cli\n"),
    ],
)
def test_names_must_match_whole_and_nothing_is_left_behind(cao: CaoServer, field: str, value: str):
    params = {"agent_profile": "developer", "provider": "mock_cli", field: value}
    before = cao.tmux("list-windows", "-a", "-F", "#{window_id}").stdout.split()
    resp = cao.client.post("/sessions", params=params)
    assert 400 <= resp.status_code < 500, resp.text
    assert cao.tmux("list-windows", "-a", "-F", "#{window_id}").stdout.split() == before
    assert cao.client.get("/terminals").json() == []


# --- 5. a dead pane never receives a paste --------------------------------------------------------
def test_typing_into_an_exited_agent_is_refused_and_the_tmux_server_survives(cao: CaoServer, tmp_path: Path):
    bystander = cao.create_session()
    victim = cao.create_session()
    assert cao.client.post(f"/terminals/{victim['id']}/exit").status_code == 200
    answers = []
    for _ in range(10):  # at once after the exit: the agent dies while these arrive
        answers.append(cao.client.post(f"/terminals/{victim['id']}/exit").status_code)
        answers.append(cao.client.post(f"/terminals/{victim['id']}/input", json={"message": "hello?"}).status_code)
        answers.append(cao.client.post(f"/terminals/{victim['id']}/key", json={"key": "Enter"}).status_code)
    assert set(answers) <= {200, 409}
    cao.wait_status(victim["id"], "error")
    refused = cao.client.post(f"/terminals/{victim['id']}/input", json={"message": "hello?"})
    assert refused.status_code == 409 and "exited" in refused.json()["detail"]
    # The inbox does not paste into it either; the message waits, nothing crashes.
    posted = cao.client.post(f"/terminals/{victim['id']}/inbox/messages", json={"sender_id": "t", "message": "m"})
    assert posted.status_code == 200
    assert cao.client.get("/health").json()["status"] == "ok"
    cao.send(bystander["id"], "still here")
    cao.wait_status(bystander["id"], "completed")
    assert cao.client.get(f"/terminals/{victim['id']}/inbox/messages").json()[0]["status"] == "pending"


# --- 6. a dead tmux server is seen at once ----------------------------------------------------------
@pytest.mark.parametrize("source", ["control", "pipe-pane"])
def test_a_killed_tmux_server_marks_its_agents_gone_and_new_sessions_work(cao_factory, tmp_path: Path, source: str):
    record = tmp_path / "rec.jsonl"
    cao = cao_factory(CAO_MOCK_RECORD=str(record), CAO_OUTPUT_SOURCE=source).start()
    sender = cao.create_session()
    receiver = cao.create_session()
    cao.send(receiver["id"], "__mock_sleep_30")  # busy: the message below waits in its inbox
    cao.wait_status(receiver["id"], "processing")
    msg = cao.client.post(
        f"/terminals/{receiver['id']}/inbox/messages", json={"sender_id": sender["id"], "message": "for later"}
    ).json()
    os.kill(_tmux_pid(cao), signal.SIGKILL)
    for term in (sender, receiver):
        gone = wait_until(
            lambda t=term: (d := cao.client.get(f"/terminals/{t['id']}").json())["gone"] and d,
            timeout=5,
            message="agent marked gone",
        )
        assert gone["status"] == "error" and "tmux server" in gone["status_reason"]
    health = cao.client.get("/health").json()
    assert health["status"] == "degraded" and "tmux server" in health["reason"]
    failed = cao.client.get(f"/terminals/{receiver['id']}/inbox/messages").json()
    assert [(m["id"], m["status"]) for m in failed] == [(msg["message_id"], "failed")]
    assert cao.client.get("/terminals").json() == []
    fresh = cao.create_session()
    assert fresh["status"] == "idle"
    assert cao.client.get("/health").json()["status"] == "ok"
    # The new tmux server numbers its windows anew: a gone agent's old window id must never
    # reach the fresh agent's window.
    for gone_id in (sender["id"], receiver["id"]):
        assert cao.client.post(f"/terminals/{gone_id}/input", json={"message": "to a ghost"}).status_code == 409
        assert cao.client.post(f"/terminals/{gone_id}/key", json={"key": "C-c"}).status_code == 409
        assert cao.client.get(f"/terminals/{gone_id}/output").status_code == 409
    cao.send(fresh["id"], "after the crash")
    cao.wait_status(fresh["id"], "completed")
    assert "for later" not in read_records(record)


# --- 4. secrets and private files ------------------------------------------------------------------
def test_no_launch_file_survives_a_failed_start(cao_factory, tmp_path: Path):
    """The file carrying the server's environment (OPENAI_API_KEY here) to a new pane is gone
    whichever way the start ends: refused by tmux, an agent that never gets ready, success."""
    cao = cao_factory(
        OPENAI_API_KEY="sk-should-not-linger", CAO_PROVIDER_INIT_TIMEOUT="3", CAO_MOCK_STARTUP_MS="60000"
    ).start()
    tmp = cao.home / "tmp"
    slow = cao.client.post("/sessions", params={"agent_profile": "developer", "provider": "mock_cli"})
    assert slow.status_code == 504, slow.text
    assert list(tmp.glob("*.env")) == []
    # An assign-style deferred start whose agent never becomes ready.
    deferred = cao.client.post(
        "/sessions", params={"agent_profile": "developer", "provider": "mock_cli"}, json={"initial_message": "go"}
    )
    assert deferred.status_code == 201
    wait_until(
        lambda: list(tmp.glob("*.env")) == [] and cao.client.get("/terminals").json() == [],
        timeout=15,
        message="deferred start cleaned up",
    )
    assert not any("sk-should-not-linger" in p.read_text(errors="ignore") for p in tmp.rglob("*") if p.is_file())


def test_a_launch_file_left_by_a_crash_is_removed_at_start(cao: CaoServer):
    stale = cao.home / "tmp" / "0badc0de.env"
    stale.write_text("export OPENAI_API_KEY=sk-left-by-a-crash\n")
    cao.kill9()
    cao.start()
    assert not stale.exists()


def test_logs_scrollbacks_and_snapshots_are_private(cao: CaoServer):
    term = cao.create_session()
    cao.send(term["id"], "write my log")
    cao.wait_status(term["id"], "completed")
    log = cao.home / "logs" / "terminal" / f"{term['id']}.log"
    wait_until(log.exists, message="log written")
    assert cao.client.delete(f"/terminals/{term['id']}").status_code == 200
    logs = cao.home / "logs" / "terminal"
    for path in (
        log,
        logs / f"{term['id']}.scrollback",
        logs / f"{term['id']}.snapshot.json",
        cao.home / "logs" / "server.log",
        cao.home / "db" / "cli-agent-orchestrator.db",
    ):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for path in (cao.home, cao.home / "logs", logs, cao.home / "tmp"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
