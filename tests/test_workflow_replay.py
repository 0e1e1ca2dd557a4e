"""Replay against a journal recorded from a real run and checked in
(`tests/fixtures/journals/`): resuming it must run nothing and return the recorded
results; the same journal with its script changed at one step key must diverge.

This also pins the journal's storage format: a cao that can no longer read a recorded
run fails here, not in a user's resume.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cao_support import CaoServer
from workflow_support import Workflows, import_journal, step_counts

RECORDED = json.loads((Path(__file__).parent / "fixtures" / "journals" / "review_loop.json").read_text())
RUN_ID = "run-recorded-review-loop"


@pytest.fixture
def wf(tmp_path):
    server = CaoServer(tmp_path / "home").start()
    try:
        yield Workflows(server)
    finally:
        server.cleanup()


def load(wf: Workflows, **run_changes) -> None:
    wf.server.stop()
    import_journal(wf.server.home / "db" / "cli-agent-orchestrator.db", RECORDED, **run_changes)
    wf.server.start()


def recorded_replies() -> list[str]:
    return [json.loads(step["envelope"])["last_message"] for step in RECORDED["workflow_steps"]]


def test_recorded_run_replays_without_running_anything(wf):
    load(wf)
    assert wf.status(RUN_ID)["state"] == "failed"
    result = wf.resume_ok(RUN_ID)
    assert result["state"] == "completed", result
    assert result["output"] == recorded_replies()
    assert all(s["attempts"] == 1 for s in result["steps"])
    new_events = [e for e in wf.events(RUN_ID) if e["generation"] == 2]
    assert step_counts(new_events, "step.replayed") == {"call-1": 1, "call-2": 1, "call-3": 1}
    assert not [e for e in new_events if e["type"] in ("step.started", "terminal.created")]
    assert wf.client.get("/terminals").json() == []


def test_recorded_run_with_a_changed_prompt_diverges(wf):
    source = RECORDED["workflow_runs"][0]["source"]
    changed = source.replace('f"review chapter {n}"', 'f"review chapter {n} carefully"')
    assert changed != source
    load(wf, source=changed)
    result = wf.resume_ok(RUN_ID)
    assert result["state"] == "failed" and result["kind"] == "diverged"
    assert result["halts"][0]["step_id"] == "call-1" and result["halts"][0]["rule"] == "diverged"
    assert [s["attempts"] for s in result["steps"]] == [1, 1, 1]
    assert wf.client.get("/terminals").json() == []
