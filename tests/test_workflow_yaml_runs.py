"""The YAML tier end to end: a sequential spec run inside cao-server against mock agents
(templating, retries, on_failure), resume from the first unfinished step, and reserved
constructs refused with a clear message."""

from __future__ import annotations

import pytest
from cao_support import CaoServer
from workflow_support import Workflows

PIPELINE = """
    name: review_flow
    description: triage then review
    inputs:
      topic: {type: string, default: parsers}
    steps:
      - id: triage
        provider: mock_cli
        agent: reviewer
        prompt: "triage {{ workflow.inputs.topic }}"
      - id: flaky
        provider: mock_cli
        agent: reviewer
        prompt: "__mock_error__"
        retries: 1
        on_failure: continue
      - id: review
        provider: mock_cli
        agent: reviewer
        prompt: "review after {{ steps.triage.output }}"
"""


@pytest.fixture(scope="module")
def wf(cao_module: CaoServer) -> Workflows:
    return Workflows(cao_module)


def test_sequential_spec_runs_with_templates_retries_and_continue(wf):
    wf.write("pipeline.yaml", PIPELINE)
    result = wf.run_ok("review_flow", {"topic": "lexers"})
    assert result["state"] == "completed" and result["tier"] == "yaml"
    steps = {s["id"]: s for s in result["steps"]}
    assert steps["triage"]["output"] == "MOCK: triage lexers"
    assert steps["flaky"]["state"] == "failed" and steps["flaky"]["attempts"] == 2
    assert steps["review"]["output"] == "MOCK: review after MOCK: triage lexers"
    assert result["output"]["review"] == "MOCK: review after MOCK: triage lexers"
    types = [e["type"] for e in wf.events(result["run_id"])]
    assert types.count("step.attempt.failed") == 2 and "step.failed" in types
    listed = {s["name"]: s for s in wf.client.get("/workflows").json()}
    assert listed["review_flow"]["step_count"] == 3 and listed["review_flow"]["mode"] == "sequential"


def test_halt_on_failure_skips_the_rest_and_resume_keeps_completed_steps(wf):
    wf.write(
        "halting.yaml",
        """
        name: halting_flow
        steps:
          - {id: first, provider: mock_cli, agent: reviewer, prompt: "one"}
          - {id: broken, provider: mock_cli, agent: reviewer, prompt: "__mock_error__", retries: 0}
          - {id: last, provider: mock_cli, agent: reviewer, prompt: "after {{ steps.first.output }}"}
    """,
    )
    first = wf.run_ok("halting_flow")
    steps = {s["id"]: s for s in first["steps"]}
    assert first["state"] == "failed" and first["failure_envelope"]["failing_step"] == "broken"
    assert steps["first"]["state"] == "completed" and steps["last"]["state"] == "skipped"
    resumed = wf.resume_ok(first["run_id"])
    steps = {s["id"]: s for s in resumed["steps"]}
    assert steps["first"]["attempts"] == 1  # kept, not re-run
    assert steps["broken"]["attempts"] == 2 and resumed["state"] == "failed"
    # YAML runs take no decisions.
    assert wf.resume(first["run_id"], {"broken": "rerun"}).status_code == 400


def test_reserved_constructs_validate_but_refuse_to_run(wf):
    wf.write(
        "parallel.yaml",
        """
        name: parallel_flow
        mode: parallel
        steps:
          - {id: a, agent: reviewer, prompt: hi}
    """,
    )
    wf.write(
        "guarded.yaml",
        """
        name: guarded_flow
        steps:
          - {id: a, agent: reviewer, prompt: hi, when: "x"}
    """,
    )
    for name, text in (("parallel_flow", "parallel"), ("guarded_flow", "when")):
        resp = wf.run(name)
        assert resp.status_code == 501 and text in resp.json()["detail"], resp.text
    check = wf.client.post("/workflows/validate", json={"path": "parallel.yaml"}).json()
    assert check["status"] == "pass_reserved" and check["reserved_notes"]
    bad = wf.client.post("/workflows/validate", json={"source": "name: x\nsteps: []\n", "tier": "yaml"}).json()
    assert bad["status"] == "fail" and bad["errors"]
    outside = wf.client.post("/workflows/validate", json={"path": "/etc/hosts"})
    assert outside.status_code == 400


def test_get_and_delete_specs(wf):
    wf.write(
        "doomed.py",
        """
        INPUTS = {"who": {"type": "string", "default": "me"}}
        print("hi")
    """,
    )
    spec = wf.client.get("/workflows/doomed").json()
    assert spec["tier"] == "script" and spec["inputs"] == {"who": {"type": "string", "default": "me"}}
    assert spec["source"].startswith("INPUTS")
    assert wf.client.delete("/workflows/doomed").json() == {"success": True, "name": "doomed"}
    assert not (wf.dir / "doomed.py").exists()
    assert wf.client.get("/workflows/doomed").status_code == 404
    assert wf.client.delete("/workflows/doomed").status_code == 404


def test_get_yaml_spec_and_reserved_names(wf):
    wf.write("shown.yaml", "name: shown_flow\nsteps:\n  - {id: a, agent: reviewer, prompt: hi, when: x}\n")
    spec = wf.client.get("/workflows/shown_flow").json()
    assert spec["tier"] == "yaml" and spec["steps"][0]["id"] == "a"
    assert spec["validation"]["status"] == "pass_reserved"
    wf.write("runs.py", "print(1)\n")
    resp = wf.run("runs")
    assert resp.status_code == 400 and "reserved name" in resp.json()["detail"]
