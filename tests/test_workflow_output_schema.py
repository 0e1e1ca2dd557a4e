"""A YAML step's `output_schema` end to end: the schema checked by the linter (`cao workflow
validate`), step output validated with the `jsonschema` library when the step ends (from
`workflow_return` or the reply's JSON), one reprompt on a fresh terminal, and the typed error
naming the failing path when even that fails; the same validator behind the step output route
and MCP `workflow_return` (official client). Agents are mock agents scripted with rules that
call cao's MCP tools.
"""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest
from cao_support import CaoServer, cli
from mcp_support import agent_env, mcp_session
from mcp_support import call as call_tool
from workflow_support import Workflows

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")

# The reprompt repeats the task, so a rule for the reprompt comes before the task's own rule.
REPROMPT = "did not match the output schema"
PROFILES = {
    # Returns through workflow_return (MCP), in the right shape.
    "wf_returner": [
        {"match": "triage", "steps": [{"tool": "workflow_return", "args": {"output": {"verdict": "ok", "n": 2}}}]},
        {"reply": "returned"},
    ],
    # Answers with the JSON object as its reply text.
    "wf_texter": [{"reply": '{"verdict": "needs_work", "n": 5}'}],
    # Wrong the first time, corrected when told what was wrong.
    "wf_fixer": [
        {
            "match": REPROMPT,
            "steps": [{"tool": "workflow_return", "args": {"output": {"verdict": "ok", "n": 1}}}],
            "reply": "fixed",
        },
        {"steps": [{"tool": "workflow_return", "args": {"output": {"verdict": "maybe", "n": 1}}}], "reply": "done"},
    ],
    # Wrong every time.
    "wf_stubborn": [
        {"steps": [{"tool": "workflow_return", "args": {"output": {"verdict": "maybe", "n": "x"}}}], "reply": "done"}
    ],
    # Never gives structured output at all.
    "wf_silent": [{"reply": "I looked at it and it seems fine"}],
}
SCHEMA = """
      type: object
      required: [verdict, n]
      properties:
        verdict: {enum: [ok, needs_work]}
        n: {type: integer}
"""


def step_spec(name: str, steps: list[tuple[str, str, str]]) -> str:
    """A sequential spec; each (id, agent, prompt) step declares SCHEMA."""
    out = f"name: {name}\nsteps:\n"
    for step_id, agent, prompt in steps:
        out += f"  - id: {step_id}\n    provider: mock_cli\n    agent: {agent}\n    prompt: {json.dumps(prompt)}\n"
        out += (
            "    retries: 0\n    output_schema:\n" + textwrap.indent(textwrap.dedent(SCHEMA).strip(), "      ") + "\n"
        )
    return out


@pytest.fixture(scope="module")
def wf(cao_module: CaoServer) -> Workflows:
    store = cao_module.home / "agent-store"
    store.mkdir(parents=True, exist_ok=True)
    for name, rules in PROFILES.items():
        front = {"name": name, "provider": "mock_cli", "mock": {"rules": rules}}
        (store / f"{name}.md").write_text(f"---\n{json.dumps(front)}\n---\nA scripted worker.\n", encoding="utf-8")
    return Workflows(cao_module)


def steps_of(result: dict) -> dict[str, dict]:
    return {s["id"]: s for s in result["steps"]}


def of_step(events: list[dict], step_id: str, type_: str) -> list[dict]:
    return [e for e in events if e["step_id"] == step_id and e["type"] == type_]


# --- running --------------------------------------------------------------------------------
def test_valid_output_from_workflow_return_or_reply_json_completes_without_a_reprompt(wf):
    wf.write(
        "valid.yaml",
        step_spec("schema_valid", [("triage", "wf_returner", "triage it"), ("texted", "wf_texter", "look")])
        + "  - {id: after, provider: mock_cli, agent: reviewer, prompt: 'then {{ steps.triage.output.verdict }}'}\n",
    )
    result = wf.run_ok("schema_valid")
    assert result["state"] == "completed", result
    steps = steps_of(result)
    assert (steps["triage"]["state"], steps["triage"]["output_json"]) == ("completed", {"verdict": "ok", "n": 2})
    assert (steps["texted"]["state"], steps["texted"]["output_json"]) == (
        "completed",
        {"verdict": "needs_work", "n": 5},
    )
    assert not steps["triage"]["reprompted"] and not steps["texted"]["reprompted"]
    assert steps["triage"]["error"] is None and steps["triage"]["error_kind"] is None
    assert steps["after"]["output"] == "MOCK: then ok"  # a later step reads the validated field
    assert result["output"]["texted"] == {"verdict": "needs_work", "n": 5} and result["warnings"] == []
    events = wf.events(result["run_id"])
    assert not [e for e in events if e["type"] == "step.reprompted"]
    assert len(of_step(events, "triage", "terminal.created")) == 1


def test_invalid_output_is_reprompted_once_on_a_fresh_terminal_and_the_correction_passes(wf):
    wf.write("fixed.yaml", step_spec("schema_fixed", [("judge", "wf_fixer", "judge the patch")]))
    result = wf.run_ok("schema_fixed")
    judge = steps_of(result)["judge"]
    assert result["state"] == "completed" and judge["state"] == "completed", result
    assert judge["output_json"] == {"verdict": "ok", "n": 1} and judge["reprompted"] is True
    assert judge["attempts"] == 1 and judge["error"] is None
    events = wf.events(result["run_id"])
    [reprompt] = of_step(events, "judge", "step.reprompted")
    assert reprompt["data"]["attempt"] == 1
    assert [e["path"] for e in reprompt["data"]["errors"]] == ["$.verdict"]
    assert "'maybe' is not one of ['ok', 'needs_work']" in reprompt["data"]["errors"][0]["message"]
    terminals = [e["data"]["terminal_id"] for e in of_step(events, "judge", "terminal.created")]
    assert len(terminals) == 2 and terminals[0] != terminals[1]  # the reprompt had its own worker
    assert judge["terminal_id"] == terminals[1]


def test_output_still_invalid_after_the_reprompt_ends_the_step_with_a_typed_error_naming_the_path(wf):
    wf.write(
        "stubborn.yaml",
        step_spec("schema_stubborn", [("judge", "wf_stubborn", "judge again"), ("quiet", "wf_silent", "say")])
        + "  - {id: after, provider: mock_cli, agent: reviewer, prompt: 'then {{ steps.judge.output.verdict }}'}\n",
    )
    result = wf.run_ok("schema_stubborn")
    steps = steps_of(result)
    judge, quiet = steps["judge"], steps["quiet"]
    assert (judge["state"], judge["error_kind"], judge["reprompted"]) == (
        "completed_unvalidated",
        "output_invalid",
        True,
    )
    assert "after one reprompt: $.n: 'x' is not of type 'integer' (and 1 more)" in judge["error"]
    assert judge["output_json"] == {"verdict": "maybe", "n": "x"}  # kept: nothing is lost
    assert (quiet["state"], quiet["error_kind"]) == ("completed_unvalidated", "output_invalid")
    assert "$: no structured output" in quiet["error"] and quiet["output"] == "I looked at it and it seems fine"
    # The run goes on with what the step gave; its warnings say which steps are unvalidated.
    assert steps["after"]["output"] == "MOCK: then maybe" and result["state"] == "completed"
    assert [w.split(":")[0] for w in result["warnings"]] == [
        "step 'judge' is completed_unvalidated",
        "step 'quiet' is completed_unvalidated",
    ]
    events = wf.events(result["run_id"])
    assert len(of_step(events, "judge", "step.reprompted")) == 1
    [done] = of_step(events, "judge", "step.completed")
    assert (done["data"]["state"], done["data"]["error_kind"], done["data"]["path"]) == (
        "completed_unvalidated",
        "output_invalid",
        "$.n",
    )
    assert {e["path"] for e in done["data"]["errors"]} == {"$.n", "$.verdict"}
    assert of_step(events, "quiet", "step.completed")[0]["data"]["path"] == "$"
    # A resume keeps the unvalidated steps (they are done) and runs nothing again.
    again = wf.client.post(f"/workflows/runs/{result['run_id']}/resume", json={}, timeout=60)
    assert again.status_code == 409 and "completed" in again.json()["detail"]


# --- the schema itself ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, schema, words",
    [
        ("bad_type", "{type: nope}", "output_schema is not valid JSON Schema 2020-12 at $.type"),
        ("bad_min", "{properties: {n: {minimum: low}}}", "at $.properties.n.minimum: 'low' is not of type 'number'"),
        ("bad_list", "[1, 2]", "output_schema must be a JSON Schema object (a mapping), not list"),
        ("too_deep", "{a: {b: {c: {d: {e: {f: {g: {h: {}}}}}}}}}", "nested 9 levels deep; the limit is 8"),
    ],
)
def test_a_schema_that_is_not_a_usable_schema_fails_validation_and_refuses_to_run(
    wf, cao_module: CaoServer, name: str, schema: str, words: str
):
    wf.write(
        f"{name}.yaml",
        f"name: {name}\nsteps:\n  - id: s\n    agent: wf_texter\n    prompt: go\n    output_schema: {schema}\n",
    )
    checked = cli(cao_module, "workflow", "validate", f"{name}.yaml", "--json")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    result = json.loads(checked.stdout)
    assert result["status"] == "fail" and len(result["errors"]) == 1
    assert result["errors"][0].startswith("steps[0] (id 's'): ") and words in result["errors"][0], result
    ran = wf.run(name)
    assert ran.status_code == 400 and words in ran.json()["detail"], ran.text
    assert not [r for r in wf.client.get("/workflows/runs").json() if r["workflow_name"] == name]


def test_a_depth_8_schema_is_accepted(cao_module: CaoServer, wf):
    wf.write(
        "deep_ok.yaml",
        "name: deep_ok\nsteps:\n  - id: s\n    agent: wf_texter\n    prompt: go\n"
        "    output_schema: {properties: {a: {properties: {b: {properties: {c: {enum: [1]}}}}}}}\n",
    )
    checked = cli(cao_module, "workflow", "validate", "deep_ok.yaml")
    assert checked.returncode == 0 and checked.stdout.startswith("valid"), checked.stdout + checked.stderr


# --- the step output route and workflow_return ------------------------------------------------
ONE_STEP = """from cao_workflow import run_step, emit_output
h = run_step("mock_cli", "reviewer", "review part 1")
emit_output({"out": h.output})
"""


def test_the_output_route_validates_with_json_schema_and_refuses_bad_input_writing_nothing(wf):
    wf.write("schema_script.py", ONE_STEP)
    run_id = wf.run_ok("schema_script")["run_id"]
    url = f"/workflows/runs/{run_id}/steps/call-1/output"
    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}, "required": ["n"]}

    ok = wf.client.post(url, json={"output": {"n": 2}, "output_schema": schema})
    assert ok.status_code == 200 and ok.json() == {"validated": True, "errors": [], "state": "completed"}
    wrong = wf.client.post(url, json={"output": {"n": 9, "m": [1]}, "output_schema": schema})
    assert wrong.status_code == 200, wrong.text
    assert wrong.json() == {
        "validated": False,
        "errors": ["$.n: 9 is greater than the maximum of 3"],
        "state": "completed",
    }
    assert wf.step(run_id, "call-1")["output_json"] == {"n": 9, "m": [1]}  # a mismatch is still kept

    for bad_schema, words in (
        ({"type": 5}, "output_schema is not valid JSON Schema 2020-12 at $.type"),
        ({"$defs": {"x": {"$defs": {"y": {"$defs": {"z": {"$defs": {"w": {}}}}}}}}}, "nested 9 levels deep"),
    ):
        refused = wf.client.post(url, json={"output": {"n": 1}, "output_schema": bad_schema})
        assert refused.status_code == 400 and words in refused.json()["detail"], refused.text
    huge = wf.client.post(url, json={"output": {"blob": "x" * (1024 * 1024 + 10)}}, timeout=60)
    assert huge.status_code == 400 and "the limit is 1048576" in huge.json()["detail"], huge.text
    binary = wf.client.post(
        url, content=b'{"output": {"blob": "\\ud800"}}', headers={"Content-Type": "application/json"}
    )
    # Refused at the HTTP edge already, with the reason.
    assert binary.status_code == 422 and "lone UTF-16 surrogate" in binary.text, binary.text
    # None of the refused calls wrote anything: the last accepted output is still there.
    assert wf.step(run_id, "call-1")["output_json"] == {"n": 9, "m": [1]}
    unknown = wf.client.post(f"/workflows/runs/{run_id}/steps/call-9/output", json={"output": {}})
    assert unknown.status_code == 404


@pytest.mark.anyio
async def test_workflow_return_over_mcp_checks_the_full_schema_on_the_server(wf, cao_module: CaoServer):
    wf.write("schema_mcp.py", ONE_STEP)
    run_id = wf.run_ok("schema_mcp")["run_id"]
    # An agent the server records as that step's (as run-step records the agents it starts).
    term = cao_module.create_session()
    identity = json.dumps({"CAO_WORKFLOW_RUN_ID": run_id, "CAO_WORKFLOW_STEP_ID": "call-1"})
    assert cao_module.sql("UPDATE terminals SET workflow_step = :s WHERE id = :id", s=identity, id=term["id"]) == [1]
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}}
    async with mcp_session(agent_env(cao_module, term["id"])) as session:
        typed = await call_tool(session, "workflow_return", output={"tags": ["a", 2]}, output_schema=schema)
        # More than `required`: an item of the wrong type is found, with its path.
        assert typed == {"ok": True, "validated": False, "errors": ["$.tags[1]: 2 is not of type 'string'"]}
        good = await call_tool(session, "workflow_return", output={"tags": ["a"]}, output_schema=schema)
        assert good == {"ok": True, "validated": True, "errors": []}
        not_schema = await call_tool(session, "workflow_return", output={"tags": []}, output_schema={"type": 1})
        assert not_schema["ok"] is False and "not valid JSON Schema 2020-12 at $.type" in not_schema["error"]
    assert wf.step(run_id, "call-1")["output_json"] == {"tags": ["a"]}
