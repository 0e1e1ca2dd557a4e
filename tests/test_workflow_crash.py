"""kill -9 at the moments that matter — of cao-server, of the script, of a worker's CLI —
then check that the journal is consistent, `status` tells the truth, and resume does the
right thing per step."""

from __future__ import annotations

import signal

import pytest
from cao_support import CaoServer, wait_until
from workflow_support import Workflows, processes_with_env, step_counts

SLOW = "__mock_sleep_4"


@pytest.fixture
def wf(tmp_path):
    server = CaoServer(tmp_path / "home").start()
    try:
        yield Workflows(server)
    finally:
        server.cleanup()


def restart(wf: Workflows) -> None:
    wf.server.kill9()
    wf.server.start()


def no_script_left(run_id: str) -> None:
    wait_until(
        lambda: (
            not [p for p in processes_with_env("CAO_WORKFLOW_RUN_ID", run_id) if "CAO_TERMINAL_ID" not in p.environ()]
        ),
        15,
        message="the orphan script ended",
    )


def test_server_killed_mid_step_then_resume_per_policy(wf):
    name = wf.write(
        "three_steps.py",
        f"""
        from cao_workflow import run_step, step, emit_output
        a = run_step("mock_cli", "reviewer", "fast first")
        b = step("mock_cli", "reviewer", "{SLOW}", recovery="idempotent", step_id="b")
        c = run_step("mock_cli", "reviewer", "{SLOW} ", step_id="c")
        emit_output([a.replayed, b.replayed, c.replayed])
    """,
    )
    run_id = wf.submit(name)
    b_terminal = wf.wait_step_terminal(run_id, "b")
    restart(wf)  # kill -9 while b runs

    status = wf.status(run_id)
    assert status["state"] == "failed" and status["kind"] == "interrupted" and not status["driving"]
    steps = {s["id"]: s for s in status["steps"]}
    assert steps["call-1"]["state"] == "completed" and steps["b"]["state"] == "running"
    assert "c" not in steps
    assert any("cao workflow resume" in w for w in wf.result(run_id)["warnings"])
    assert "run.interrupted" in [e["type"] for e in wf.events(run_id)]
    no_script_left(run_id)
    wait_until(
        lambda: wf.client.get(f"/terminals/{b_terminal}").status_code == 404,
        15,
        message="the unsettled step's terminal removed",
    )

    # Resume: call-1 replays, b (idempotent) runs again, c is new; kill -9 while c runs.
    assert wf.client.post(f"/workflows/runs/{run_id}/resume", json={"wait": False}).status_code == 202
    wf.wait_step_terminal(run_id, "c")
    restart(wf)
    steps = {s["id"]: s for s in wf.status(run_id)["steps"]}
    assert steps["call-1"]["attempts"] == 1 and steps["b"]["attempts"] == 2
    assert steps["b"]["state"] == "completed" and steps["c"]["state"] == "running"

    # c declared nothing: it halts instead of silently running again.
    halted = wf.resume_ok(run_id)
    assert halted["kind"] == "halted"
    assert halted["halts"][0]["step_id"] == "c" and halted["halts"][0]["rule"] == "interrupted_no_policy"
    assert {s["id"]: s["attempts"] for s in halted["steps"]} == {"call-1": 1, "b": 2, "c": 1}

    # A rerun decision authorises one attempt; that attempt crashes too...
    assert (
        wf.client.post(
            f"/workflows/runs/{run_id}/resume", json={"decisions": {"c": "rerun"}, "wait": False}
        ).status_code
        == 202
    )
    wait_until(
        lambda: wf.step(run_id, "c")["attempts"] == 2 and wf.step(run_id, "c")["terminal_id"],
        20,
        message="c re-dispatched",
    )
    restart(wf)
    # ... so the next resume asks again rather than re-running on the old consent.
    again = wf.resume_ok(run_id)
    assert again["kind"] == "halted" and again["halts"][0]["rule"] == "interrupted_no_policy"
    assert wf.step(run_id, "c")["attempts"] == 2

    done = wf.resume_ok(run_id, {"c": "rerun"})
    assert done["state"] == "completed" and done["output"] == [True, True, False]
    assert {s["id"]: s["attempts"] for s in done["steps"]} == {"call-1": 1, "b": 2, "c": 3}
    events = wf.events(run_id)
    assert step_counts(events, "step.replayed")["call-1"] == 5  # one per resume


def test_script_killed_mid_step_the_step_still_settles_and_replays(wf):
    name = wf.write(
        "killed_script.py",
        f"""
        from cao_workflow import run_step, emit_output
        h = run_step("mock_cli", "reviewer", "{SLOW}")
        emit_output({{"out": h.output, "replayed": h.replayed}})
    """,
    )
    run_id = wf.submit(name)
    wf.wait_step_terminal(run_id, "call-1")
    scripts = [
        p
        for p in processes_with_env("CAO_WORKFLOW_RUN_ID", run_id)
        # Not an agent, and not the launcher the script runs under (process_tree.py).
        if "CAO_TERMINAL_ID" not in p.environ() and not any(a.endswith("process_tree.py") for a in p.cmdline())
    ]
    assert len(scripts) == 1
    scripts[0].send_signal(signal.SIGKILL)
    result = wf.wait_done(run_id)
    assert result["state"] == "failed" and result["kind"] == "error"
    assert any("killed by signal 9" in w for w in result["warnings"])
    # The step's work was not lost with its caller: it settles in the journal...
    wait_until(lambda: wf.step(run_id, "call-1")["state"] == "completed", 20, message="step settled")
    # ... and a resume replays it instead of running it again.
    done = wf.resume_ok(run_id)
    assert done["state"] == "completed" and done["output"] == {"out": "MOCK: slept 4s", "replayed": True}
    assert done["steps"][0]["attempts"] == 1


def test_worker_cli_killed_mid_step(wf):
    name = wf.write(
        "killed_worker.py",
        f"""
        from cao_workflow import run_step, step, emit_output
        a = run_step("mock_cli", "reviewer", "{SLOW}", step_id="plain")
        emit_output(a.output)
    """,
    )
    run_id = wf.submit(name)
    terminal_id = wf.wait_step_terminal(run_id, "plain")
    agents = processes_with_env("CAO_TERMINAL_ID", terminal_id)
    assert agents
    for proc in agents:
        proc.send_signal(signal.SIGKILL)
    result = wf.wait_done(run_id)
    assert result["state"] == "failed"
    step = wf.step(run_id, "plain")
    assert step["state"] == "failed" and step["error_kind"] == "error"
    # Undeclared: a failed outcome is not re-run without a human.
    halted = wf.resume_ok(run_id)
    assert halted["halts"][0]["rule"] == "outcome_failed"
    done = wf.resume_ok(run_id, {"plain": "rerun"})
    assert done["state"] == "completed" and done["output"] == "MOCK: slept 4s"
    assert done["steps"][0]["attempts"] == 2


def test_server_killed_after_completion_and_during_start(wf):
    name = wf.write(
        "quick.py",
        """
        from cao_workflow import run_step, emit_output
        emit_output(run_step("mock_cli", "reviewer", "hello").output)
    """,
    )
    done = wf.run_ok(name)
    restart(wf)
    after = wf.result(done["run_id"])
    assert after["state"] == "completed" and after["output"] == "MOCK: hello"
    assert after["steps"] == done["steps"]

    # Killed during start: the run is journaled and its script runs, but no step has begun.
    # The first drive holds before its step (a resume sets CAO_WORKFLOW_RESUME=1), so the
    # kill lands there every time rather than wherever the race put it.
    held = wf.write(
        "held_at_start.py",
        """
        import os
        import signal
        from cao_workflow import run_step, emit_output
        if os.environ.get("CAO_WORKFLOW_RESUME") != "1":
            signal.pause()  # the first drive never gets further
        emit_output(run_step("mock_cli", "reviewer", "hello").output)
    """,
    )
    run_id = wf.submit(held)
    wait_until(
        lambda: [p for p in processes_with_env("CAO_WORKFLOW_RUN_ID", run_id) if "CAO_TERMINAL_ID" not in p.environ()],
        15,
        message="the script started",
    )
    restart(wf)
    status = wf.status(run_id)
    assert (status["state"], status["kind"], status["steps"]) == ("failed", "interrupted", [])
    no_script_left(run_id)
    # Nothing had run, so nothing replays or halts: the resume runs the step for the first time.
    resumed = wf.resume_ok(run_id)
    assert resumed["state"] == "completed" and resumed["output"] == "MOCK: hello", resumed
    assert [(s["id"], s["attempts"]) for s in resumed["steps"]] == [("call-1", 1)]
    assert resumed["halts"] == []
    assert "step.replayed" not in [e["type"] for e in wf.events(run_id)]


def test_damaged_journal_halts_instead_of_guessing(wf):
    """A stored result that is gone, truncated, or recorded under another fingerprint
    scheme: the gate halts (or re-runs only what is declared idempotent)."""
    import sqlite3

    name = wf.write(
        "integrity.py",
        """
        import json
        from cao_workflow import run_step, step, emit_output, ShimHTTPError
        seen = {}
        for key, policy in (("absent", None), ("lossy", None), ("old", None), ("old-idem", "idempotent"),
                            ("fine", None)):
            try:
                if policy:
                    h = step("mock_cli", "reviewer", key, recovery=policy, step_id=key)
                else:
                    h = run_step("mock_cli", "reviewer", key, step_id=key)
                seen[key] = "replayed" if h.replayed else "executed"
            except ShimHTTPError as exc:
                detail = json.loads(exc.body)["detail"]
                seen[key] = detail.get("rule") or detail["kind"]
        print("CAO_WORKFLOW_OUTPUT:" + json.dumps(seen))
        raise SystemExit(1)
    """,
    )
    run_id = wf.run_ok(name)["run_id"]
    wf.server.stop()
    db = sqlite3.connect(wf.server.home / "db" / "cli-agent-orchestrator.db")
    with db:
        db.execute("UPDATE workflow_steps SET envelope = NULL WHERE step_id = 'absent'")
        db.execute(
            "UPDATE workflow_steps SET envelope = json_set(envelope, '$.truncated', json('true')) "
            "WHERE step_id = 'lossy'"
        )
        db.execute("UPDATE workflow_steps SET fingerprint_scheme = 'v0' WHERE step_id IN ('old', 'old-idem')")
    db.close()
    wf.server.start()
    resumed = wf.resume_ok(run_id)
    halts = {h["step_id"]: h["rule"] for h in resumed["halts"]}
    assert halts == {"absent": "envelope_absent", "lossy": "envelope_lossy", "old": "provenance_unverifiable"}
    steps = {s["id"]: s for s in resumed["steps"]}
    assert steps["old-idem"]["attempts"] == 2 and steps["fine"]["attempts"] == 1
    assert resumed["kind"] == "halted"
    # skip accepts the truncated result; rerun re-runs the others.
    done = wf.resume_ok(run_id, {"lossy": "skip", "absent": "rerun", "old": "rerun"})
    assert done["halts"] == [] and done["kind"] == "error"  # only the script's own exit 1 is left
    steps = {s["id"]: s for s in done["steps"]}
    assert (steps["absent"]["attempts"], steps["lossy"]["attempts"], steps["old"]["attempts"]) == (2, 1, 2)


def test_script_over_its_time_limit_is_stopped(tmp_path):
    server = CaoServer(tmp_path / "short", {"CAO_WORKFLOW_SCRIPT_TIMEOUT": "2"}).start()
    try:
        wf = Workflows(server)
        name = wf.write(
            "sleeper.py",
            """
            import signal
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # ignores the polite stop: SIGKILL follows
            signal.pause()
        """,
        )
        result = wf.run_ok(name)
        assert result["state"] == "failed" and result["kind"] == "timeout"
        assert any("longer than 2s" in w for w in result["warnings"])
        assert result["generation"] == 2  # fenced: nothing of that drive can run steps any more
        assert not processes_with_env("CAO_WORKFLOW_RUN_ID", result["run_id"])
    finally:
        server.cleanup()
