"""The examples in examples/workflows/ (also reachable as docs/examples/) run end to end against a real cao-server.

Each example is copied into the server's workflow directory and run by its stem through
the blocking POST /workflows/runs, against the mock agent (its default provider), which
replies "MOCK: <prompt>". The checks are black-box: run state, the exact step keys in the
journal, the step outputs and the run output.

The replay tests take an example, append `raise SystemExit(1)` (the script emits its
output, then fails), run it, and resume the failed run: every step must come back
replayed from the journal (attempts stay 1, one `step.replayed` event per key in the new
generation, nothing started) and the run must fail again the same way. For the fan-out
example this proves that explicit step ids replay correctly under threads.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
from cao_support import REPO, CaoServer

from cli_agent_orchestrator.workflows import yaml_spec
from cli_agent_orchestrator.workflows.inputs import read_inputs_declaration
from cli_agent_orchestrator.workflows.lint import lint_script

EXAMPLES = REPO / "examples" / "workflows"
SCRIPTS = ("loop_example", "conditional_example", "fanout_example", "loop_raw_http_example")
RUN_TIMEOUT = 120
LOOP_PROMPTS = ("Review parser.py for bugs.", "Review lexer.py for bugs.", "Review emitter.py for bugs.")
SHARDS = ("alpha", "beta", "gamma")


@pytest.fixture(scope="module")
def server(cao_module: CaoServer) -> CaoServer:
    """One server for the module: every test copies in the file it runs, and runs get
    their own ids, so they do not interfere."""
    return cao_module


def workflow_dir(server: CaoServer) -> Path:
    path = server.home / "workflows"
    path.mkdir(parents=True, exist_ok=True)
    return path


def install(server: CaoServer, filename: str) -> None:
    shutil.copy(EXAMPLES / filename, workflow_dir(server) / filename)


def run(server: CaoServer, name: str, inputs: dict | None = None) -> dict:
    resp = server.client.post(
        "/workflows/runs", json={"name_or_path": name, "inputs": inputs or {}}, timeout=RUN_TIMEOUT
    )
    assert resp.status_code == 200, resp.text
    return resp.json()


def steps_by_id(result: dict) -> dict[str, dict]:
    return {s["id"]: s for s in result["steps"]}


def assert_completed(result: dict, step_ids: list[str]) -> dict[str, dict]:
    assert result["state"] == "completed", result
    assert result["kind"] is None
    steps = steps_by_id(result)
    assert sorted(steps) == sorted(step_ids), result["steps"]
    for s in steps.values():
        assert s["state"] == "completed" and s["attempts"] == 1, s
    return steps


def events(server: CaoServer, run_id: str) -> list[dict]:
    resp = server.client.get(f"/workflows/runs/{run_id}/events")
    assert resp.status_code == 200, resp.text
    return resp.json()["events"]


# --- end to end ----------------------------------------------------------------------------
def test_loop_example(server):
    install(server, "loop_example.py")
    result = run(server, "loop_example")
    steps = assert_completed(result, ["call-1", "call-2", "call-3"])
    for n, prompt in enumerate(LOOP_PROMPTS, start=1):
        assert steps[f"call-{n}"]["output"] == f"MOCK: {prompt}"
    assert result["output"] == {
        "reviews": [
            {"item": item, "step_id": f"call-{n}", "review": f"MOCK: {prompt}"}
            for n, (item, prompt) in enumerate(zip(("parser.py", "lexer.py", "emitter.py"), LOOP_PROMPTS), 1)
        ]
    }
    # the counter keys follow call order in a sequential loop
    started = [e["step_id"] for e in events(server, result["run_id"]) if e["type"] == "step.started"]
    assert started == ["call-1", "call-2", "call-3"]


def test_conditional_example_takes_urgent_branch_by_default(server):
    install(server, "conditional_example.py")
    result = run(server, "conditional_example")
    steps = assert_completed(result, ["triage", "urgent-branch"])
    ticket = "urgent: production login fails for every user"
    assert steps["triage"]["output"] == (
        f"MOCK: Triage this ticket and name its priority in one word. Ticket: {ticket}"
    )
    assert steps["urgent-branch"]["output"] == f"MOCK: Draft an incident plan for: {ticket}"
    assert result["output"] == {
        "branch": "urgent",
        "triage": steps["triage"]["output"],
        "follow_up": steps["urgent-branch"]["output"],
    }


def test_conditional_example_takes_routine_branch_for_a_routine_ticket(server):
    install(server, "conditional_example.py")
    ticket = "routine: rename a config key"
    result = run(server, "conditional_example", {"ticket": ticket, "provider": "mock_cli"})
    steps = assert_completed(result, ["triage", "routine-branch"])
    assert steps["routine-branch"]["output"] == f"MOCK: Add this to the backlog: {ticket}"
    assert result["output"]["branch"] == "routine"
    assert result["inputs"] == {"ticket": ticket, "provider": "mock_cli"}


def test_fanout_example(server):
    install(server, "fanout_example.py")
    result = run(server, "fanout_example")
    steps = assert_completed(result, [f"shard-{s}" for s in SHARDS])
    for shard in SHARDS:
        assert steps[f"shard-{shard}"]["output"] == f"MOCK: Review shard {shard} of the change."
        assert steps[f"shard-{shard}"]["policy"] == "idempotent"  # step(..., recovery=...) is stored
    assert result["output"] == {"shards": {s: f"MOCK: Review shard {s} of the change." for s in SHARDS}}


def test_loop_raw_http_example(server):
    install(server, "loop_raw_http_example.py")
    result = run(server, "loop_raw_http_example")
    steps = assert_completed(result, ["raw-1", "raw-2", "raw-3"])
    for n, prompt in enumerate(LOOP_PROMPTS, start=1):
        assert steps[f"raw-{n}"]["output"] == f"MOCK: {prompt}"
    assert [r["review"] for r in result["output"]["reviews"]] == [f"MOCK: {p}" for p in LOOP_PROMPTS]
    assert [r["step_id"] for r in result["output"]["reviews"]] == ["raw-1", "raw-2", "raw-3"]


def test_review_pipeline_yaml(server):
    install(server, "review_pipeline.yaml")
    result = run(server, "review_pipeline", {"topic": "the retry logic"})
    assert result["tier"] == "yaml"
    steps = assert_completed(result, ["review", "summarise", "follow-ups"])
    review = "MOCK: Review the retry logic and list concrete problems."
    summary = f"MOCK: Summarise these findings in three bullets: {review}"
    assert steps["review"]["output"] == review
    assert steps["summarise"]["output"] == summary  # {{ steps.review.output }} was substituted
    assert steps["follow-ups"]["output"] == f"MOCK: Turn this summary into follow-up tasks: {summary}"
    # a completed run has nothing to resume
    resp = server.client.post(f"/workflows/runs/{result['run_id']}/resume", json={})
    assert resp.status_code == 409, resp.text


# --- replay on resume --------------------------------------------------------------------
REPLAY_CASES = {
    "loop_example": ["call-1", "call-2", "call-3"],
    "fanout_example": [f"shard-{s}" for s in SHARDS],
    "loop_raw_http_example": ["raw-1", "raw-2", "raw-3"],
    "conditional_example": ["triage", "urgent-branch"],
}


@pytest.mark.parametrize("example", list(REPLAY_CASES))
def test_resume_replays_every_step(server, example):
    keys = REPLAY_CASES[example]
    variant = f"{example}_fails"
    source = (EXAMPLES / f"{example}.py").read_text(encoding="utf-8")
    # emits its output as usual, then fails after the last step
    (workflow_dir(server) / f"{variant}.py").write_text(source + "\nraise SystemExit(1)\n", encoding="utf-8")

    first = run(server, variant)
    assert first["state"] == "failed" and first["kind"] == "error", first
    assert any("exited with code 1" in w for w in first["warnings"]), first["warnings"]
    first_steps = steps_by_id(first)
    assert sorted(first_steps) == sorted(keys)
    assert all(s["state"] == "completed" and s["attempts"] == 1 for s in first_steps.values())

    run_id = first["run_id"]
    resp = server.client.post(f"/workflows/runs/{run_id}/resume", json={}, timeout=RUN_TIMEOUT)
    assert resp.status_code == 200, resp.text
    second = resp.json()

    # it fails again the same way...
    assert second["state"] == "failed" and second["kind"] == "error", second
    assert second["generation"] == first["generation"] + 1
    assert any("exited with code 1" in w for w in second["warnings"])
    assert second["output"] == first["output"]
    # ...with every step replayed: same keys, same outputs, not run again
    second_steps = steps_by_id(second)
    assert sorted(second_steps) == sorted(keys)
    for key in keys:
        assert second_steps[key]["attempts"] == 1, second_steps[key]
        assert second_steps[key]["state"] == "completed"
        assert second_steps[key]["output"] == first_steps[key]["output"]
        assert second_steps[key]["terminal_id"] == first_steps[key]["terminal_id"]
    resumed = [e for e in events(server, run_id) if e["generation"] == second["generation"]]
    assert sorted(e["step_id"] for e in resumed if e["type"] == "step.replayed") == sorted(keys)
    assert not [e for e in resumed if e["type"] in ("step.started", "terminal.created")], resumed


# --- static checks -----------------------------------------------------------------------
@pytest.mark.parametrize("example", SCRIPTS)
def test_example_lints_clean(example):
    source = (EXAMPLES / f"{example}.py").read_text(encoding="utf-8")
    result = lint_script(source)
    assert result["status"] == "pass" and result["errors"] == [], result
    # no warnings either: no nondeterministic imports, and the fan-out's step ids are stable
    assert result["findings"] == [], result["findings"]
    # credential-free by default, a real CLI via --input provider=...
    assert read_inputs_declaration(source)["provider"] == {"type": "string", "default": "mock_cli"}
    assert '"reviewer"' in source


def test_fanout_without_step_id_would_warn():
    """The linter sees the fan-out rule: the same example minus its step ids is flagged."""
    source = (EXAMPLES / "fanout_example.py").read_text(encoding="utf-8")
    assert lint_script(source)["findings"] == []
    stripped = source.replace(', step_id=f"shard-{shard}"', "")
    assert stripped != source
    rules = [f["rule_id"] for f in lint_script(stripped)["findings"]]
    assert "unstable-step-id" in rules


def test_raw_http_example_does_not_use_the_shim():
    tree = ast.parse((EXAMPLES / "loop_raw_http_example.py").read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= {"json", "os", "urllib"}, imported


def test_review_pipeline_yaml_validates():
    text = (EXAMPLES / "review_pipeline.yaml").read_text(encoding="utf-8")
    assert yaml_spec.validate_spec(text)["status"] == "pass"
    spec = yaml_spec.parse_spec(text)
    assert spec.name == "review_pipeline" and yaml_spec.runnable_problem(spec) is None
    assert [s.retries for s in spec.steps] == [1, 1, 1]
    assert {(s.provider, s.agent) for s in spec.steps} == {("mock_cli", "reviewer")}


def test_readme_covers_every_example():
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    for name in (*SCRIPTS, "review_pipeline"):
        assert name in readme
    assert "cao workflow run loop_example" in readme
