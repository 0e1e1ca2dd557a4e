"""Flows own their sessions, and a gate's processes end with it: a run replaces only a session
the flow started (a user's session holding the name survives, and the run is skipped, saying
why); nobody else may create a session in `cao-flow-`; a gate that hides a child in a session
of its own (setsid, a double fork) loses it at its limit, at its exit and when cao-server stops.
Real cao-server, tmux and SQLite; mock agents.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
from pathlib import Path

import httpx
import pytest
from cao_support import CaoServer, wait_until
from test_flows import CAO, add, write_flow


@pytest.fixture(scope="module")
def srv(cao_module: CaoServer) -> CaoServer:
    return cao_module


def run_now(server: CaoServer, name: str) -> dict:
    resp = server.client.post(f"/flows/{name}/run", params={"wait": "true"})
    assert resp.status_code == 200, resp.text
    return resp.json()


def add_agent(server: CaoServer, session: str, **params: str) -> dict:
    resp = server.client.post(
        f"/sessions/{session}/terminals", params={"agent_profile": "developer", "provider": "mock_cli", **params}
    )
    assert resp.status_code == 201, resp.text
    return resp.json()


def has_session(server: CaoServer, name: str) -> bool:
    return server.tmux("has-session", "-t", f"={name}").returncode == 0


# --- a flow replaces only its own session ---------------------------------------------------
def test_a_user_session_holding_the_flows_name_survives_its_run_which_is_skipped(srv: CaoServer, tmp_path: Path):
    # A session a user created as `flow-victim` before cao reserved the namespace: made here
    # under another name, then given that one in tmux and in the store, as it would have been.
    first = srv.create_session(session_name="victim-src")
    second = add_agent(srv, "cao-victim-src")
    assert srv.tmux("rename-session", "-t", "=cao-victim-src", "cao-flow-victim").returncode == 0
    srv.sql("UPDATE terminals SET session_name = 'cao-flow-victim' WHERE session_name = 'cao-victim-src'")
    add(srv, write_flow(tmp_path, "victim"))

    answer = run_now(srv, "victim")

    run = answer["run"]
    assert answer["executed"] is False and run["state"] == "skipped", run
    assert "session cao-flow-victim" in run["reason"] and "did not start" in run["reason"]
    assert first["id"] in run["reason"] and second["id"] in run["reason"]
    assert run["terminal_id"] is None and run["prompt"] is None
    assert has_session(srv, "cao-flow-victim")
    for term in (first, second):
        assert srv.client.get(f"/terminals/{term['id']}").status_code == 200
        assert srv.status(term["id"]) == "idle"
    srv.client.delete("/sessions/cao-flow-victim")


def test_a_session_made_by_hand_in_tmux_under_the_flows_name_is_not_replaced(srv: CaoServer, tmp_path: Path):
    assert srv.tmux("new-session", "-d", "-s", "cao-flow-byhand", "sleep 600").returncode == 0
    add(srv, write_flow(tmp_path, "byhand"))
    try:
        run = run_now(srv, "byhand")["run"]
        assert run["state"] == "skipped" and "session cao-flow-byhand" in run["reason"], run
        assert "no agent this flow started" in run["reason"]
        assert has_session(srv, "cao-flow-byhand")
    finally:
        srv.tmux("kill-session", "-t", "=cao-flow-byhand")


def test_a_flows_own_session_is_replaced_on_the_next_run_with_its_workers(srv: CaoServer, tmp_path: Path):
    add(srv, write_flow(tmp_path, "own", prompt="report"))
    first = run_now(srv, "own")["run"]
    assert first["state"] == "completed" and first["terminal_id"], first
    # A worker the flow's agent starts joins its session (handoff and assign use the caller's).
    worker = add_agent(srv, "cao-flow-own", caller_id=first["terminal_id"])
    assert worker["session_name"] == "cao-flow-own"

    second = run_now(srv, "own")["run"]

    assert second["state"] == "completed" and second["reply"] == "MOCK: report", second
    assert second["terminal_id"] not in (None, first["terminal_id"])
    for gone in (first["terminal_id"], worker["id"]):
        assert srv.client.get(f"/terminals/{gone}").status_code == 404
    assert [t["id"] for t in srv.client.get("/sessions/cao-flow-own/terminals").json()] == [second["terminal_id"]]


def test_a_flow_still_owns_its_session_after_more_runs_than_are_kept(srv: CaoServer, tmp_path: Path):
    add(srv, write_flow(tmp_path, "busyday", prompt="report"))
    first = run_now(srv, "busyday")["run"]
    assert first["state"] == "completed", first
    # 250 runs that started no agent since (a gate that said no all day): more than the 200 kept.
    srv.sql(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 250) "
        "INSERT INTO flow_runs (flow_name, trigger, state, started_at, finished_at, session_name) "
        "SELECT 'busyday', 'schedule', 'skipped', '2020-01-01T00:00:00Z', '2020-01-01T00:00:00Z', "
        "'cao-flow-busyday' FROM n"
    )

    second = run_now(srv, "busyday")["run"]

    assert second["state"] == "completed" and second["terminal_id"] != first["terminal_id"], second
    (kept,) = srv.sql("SELECT COUNT(*), MIN(id) FROM flow_runs WHERE flow_name = 'busyday'")
    assert kept == (201, first["id"])  # the 200 newest, and the one whose agent held the session


def test_an_agent_added_to_a_flows_session_by_hand_keeps_the_session_from_being_replaced(
    srv: CaoServer, tmp_path: Path
):
    add(srv, write_flow(tmp_path, "shared"))
    first = run_now(srv, "shared")["run"]
    mine = add_agent(srv, "cao-flow-shared")  # no caller: not the flow's

    run = run_now(srv, "shared")["run"]

    assert run["state"] == "skipped" and mine["id"] in run["reason"] and first["terminal_id"] not in run["reason"]
    assert srv.client.get(f"/terminals/{mine['id']}").status_code == 200
    srv.client.delete("/sessions/cao-flow-shared")


# --- nobody else creates a session in the flows' namespace ------------------------------------
@pytest.mark.parametrize("name", ["cao-flow-x", "flow-x"])
def test_creating_a_session_in_the_flow_namespace_is_refused_and_nothing_is_created(srv: CaoServer, name: str):
    before = srv.client.get("/terminals").json()
    resp = srv.client.post(
        "/sessions", params={"agent_profile": "developer", "provider": "mock_cli", "session_name": name}
    )
    assert resp.status_code == 400, resp.text
    assert "cao-flow-x" in resp.json()["detail"] and "reserved" in resp.json()["detail"]
    assert not has_session(srv, "cao-flow-x")
    assert "cao-flow-x" not in [s["name"] for s in srv.client.get("/sessions").json()]
    assert srv.client.get("/terminals").json() == before


def test_cao_launch_into_the_flow_namespace_is_refused(srv: CaoServer):
    proc = subprocess.run(
        [CAO, "launch", "--agents", "developer", "--provider", "mock_cli", "--headless", "--auto-approve"]
        + ["--session-name", "flow-x"],
        env=srv.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode != 0 and "reserved" in proc.stderr, proc.stderr
    assert not has_session(srv, "cao-flow-x")


# --- a gate's whole process tree ends -------------------------------------------------------
def hiding_gate(directory: Path, then: str) -> tuple[str, list[Path]]:
    """A gate that records its pid and starts two children that escape its process group: one
    in a session of its own, one double-forked (orphaned) too; then runs `then`."""
    pids = [directory / f"{what}.pid" for what in ("gate", "setsid", "orphan")]
    source = (
        "#!/bin/sh\n"
        f"echo $$ > {pids[0]}\n"
        f"setsid sh -c 'echo $$ > {pids[1]}; exec sleep 600' >/dev/null 2>&1 &\n"
        f"( setsid sh -c 'echo $$ > {pids[2]}; exec sleep 600' >/dev/null 2>&1 & )\n"
        f"while [ ! -s {pids[1]} ] || [ ! -s {pids[2]} ]; do sleep 0.05; done\n"
        f"{then}\n"
    )
    return source, pids


def gone(pid: int) -> bool:
    """Ended: no such process, or only a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] in "ZX"


def wait_gone(pid_files: list[Path], timeout: float = 10) -> None:
    pids = [int(p.read_text()) for p in pid_files]
    wait_until(lambda: all(gone(p) for p in pids), timeout, message=f"processes {pids} ended")


def kill_leftovers(pid_files: list[Path]) -> None:
    """Only the processes this test's gate started, by pid, should the feature have failed."""
    for path in pid_files:
        if path.exists() and not gone(pid := int(path.read_text())):
            os.kill(pid, signal.SIGKILL)


def test_a_gate_past_its_limit_is_killed_with_the_children_it_hid_from_its_process_group(tmp_path: Path):
    from cli_agent_orchestrator.flows.gate_script import GateFailed, run_gate

    source, pids = hiding_gate(tmp_path, "sleep 600")
    script = tmp_path / "gate.sh"
    script.write_text(source)
    script.chmod(0o755)
    try:
        with pytest.raises(GateFailed, match="did not finish within 2s; it was stopped"):
            asyncio.run(run_gate(str(script), str(tmp_path), {"PATH": "/usr/bin:/bin"}, timeout=2))
        wait_gone(pids)
    finally:
        kill_leftovers(pids)


def test_what_a_gate_leaves_behind_ends_when_it_exits(tmp_path: Path):
    from cli_agent_orchestrator.flows.gate_script import run_gate

    source, pids = hiding_gate(tmp_path, """echo '{"execute": false, "output": {}}'""")
    script = tmp_path / "gate.sh"
    script.write_text(source)
    script.chmod(0o755)
    try:
        decision = asyncio.run(run_gate(str(script), str(tmp_path), {"PATH": "/usr/bin:/bin"}, timeout=20))
        assert decision.execute is False
        wait_gone(pids)
    finally:
        kill_leftovers(pids)


@pytest.mark.parametrize("how", ["stop", "kill9"])
def test_a_gates_tree_ends_when_cao_server_stops(cao_factory, tmp_path: Path, how: str):
    server = cao_factory()
    server.start()
    source, pids = hiding_gate(tmp_path, "sleep 600")
    gate = write_flow(tmp_path, "hangs", gate=source)
    add(server, gate)

    def trigger() -> None:  # answers only once the gate has decided, which it never does
        try:
            httpx.post(f"{server.url}/flows/hangs/run", timeout=30)
        except httpx.HTTPError:
            pass

    threading.Thread(target=trigger, daemon=True).start()
    try:
        wait_until(lambda: all(p.exists() and p.read_text().strip() for p in pids), 20, message="the gate's pids")
        assert not any(gone(int(p.read_text())) for p in pids)
        if how == "stop":
            server.stop()
        else:
            server.kill9()
        wait_gone(pids)
    finally:
        kill_leftovers(pids)
