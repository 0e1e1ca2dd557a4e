"""The MCP workflow tools end to end: the real cao-mcp-server console script on stdio,
driven by the official MCP client SDK, against a real cao-server running workflow
scripts whose steps are mock agents in tmux.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import httpx
import pytest
from cao_support import CaoServer
from mcp.client.session import ClientSession
from mcp_support import agent_env, mcp_session
from mcp_support import call as call_tool

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")]

WORKFLOW_TOOLS = {
    "workflow_run": ({"name_or_path", "inputs", "run_id"}, {"name_or_path"}),
    "workflow_start": ({"name_or_path", "inputs", "run_id"}, {"name_or_path"}),
    "workflow_status": ({"run_id"}, {"run_id"}),
    "workflow_wait": ({"run_id", "timeout"}, {"run_id"}),
    "workflow_result": ({"run_id"}, {"run_id"}),
    "workflow_list": ({"state", "limit"}, set()),
    "workflow_events": ({"run_id", "after_seq", "max_events"}, {"run_id"}),
    "workflow_resume": ({"run_id", "decisions"}, {"run_id"}),
    "workflow_cancel": ({"run_id"}, {"run_id"}),
    "workflow_return": ({"output", "output_schema"}, {"output"}),
}
ONE_STEP = """from cao_workflow import run_step, step, emit_output
h = run_step("mock_cli", "reviewer", "review part 1")
emit_output({"out": h.output})
"""
SLOW_STEP = """from cao_workflow import run_step, emit_output
h = run_step("mock_cli", "reviewer", "__mock_sleep_1.5")
emit_output({"out": h.output})
"""
# The first drive stops after its manual step; every resume drive gets past that point.
MANUAL_STEP = """import os
import sys
from cao_workflow import step, emit_output
h = step("mock_cli", "reviewer", "review part 1", recovery="manual")
if not os.environ.get("CAO_WORKFLOW_RESUME"):
    sys.exit("first drive stops here")
emit_output({"out": h.output})
"""
NOT_IN_STEP = (
    "workflow_return only works inside a workflow step (CAO_WORKFLOW_RUN_ID / CAO_WORKFLOW_STEP_ID are not set)"
)


def mcp_env(cao: CaoServer, terminal_id: str | None = None) -> dict[str, str]:
    return agent_env(cao, terminal_id)


def as_step_agent(cao: CaoServer, run_id: str, step_id: str) -> str:
    """A live agent the server records as a workflow step's (as run-step records the agents it
    starts for a step): whose `workflow_return` is about that step."""
    term = cao.create_session()
    step = json.dumps({"CAO_WORKFLOW_RUN_ID": run_id, "CAO_WORKFLOW_STEP_ID": step_id})
    assert cao.sql("UPDATE terminals SET workflow_step = :step WHERE id = :id", step=step, id=term["id"]) == [1]
    return term["id"]


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """Every outcome, failures included, is an envelope with `ok`, never a tool error."""
    result = await call_tool(session, tool, **arguments)
    assert isinstance(result.get("ok"), bool), result
    return result


def write_workflow(cao: CaoServer, name: str, source: str) -> None:
    directory = cao.home / "workflows"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.py").write_text(source, encoding="utf-8")


def event_count(cao: CaoServer, run_id: str) -> int:
    return len(cao.client.get(f"/workflows/runs/{run_id}/events").json()["events"])


async def test_tools_and_finished_run_views(cao: CaoServer) -> None:
    write_workflow(cao, "one", ONE_STEP)
    async with mcp_session(mcp_env(cao)) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert WORKFLOW_TOOLS.keys() <= tools.keys()
        for name, (params, required) in WORKFLOW_TOOLS.items():
            schema = tools[name].input_schema
            assert (set(schema["properties"]), set(schema.get("required", []))) == (params, required), name
            assert tools[name].description and len(tools[name].description) > 40, name
        assert tools["workflow_wait"].input_schema["properties"]["timeout"]["default"] == 8820
        assert tools["workflow_events"].input_schema["properties"]["max_events"]["default"] == 500

        ran = await call(session, "workflow_run", name_or_path="one", run_id="mcp-one")
        assert ran["ok"] is True, ran
        assert set(ran) == {"ok", "run_id", "state", "kind", "steps", "output", "halts", "warnings"}
        assert (ran["run_id"], ran["state"], ran["kind"], ran["halts"]) == ("mcp-one", "completed", None, [])
        assert ran["output"] == {"out": "MOCK: review part 1"}
        assert [(s["id"], s["state"]) for s in ran["steps"]] == [("call-1", "completed")]

        status = await call(session, "workflow_status", run_id="mcp-one")
        assert set(status) == {"ok", "run_id", "state", "kind", "current_step_id", "halts", "steps"}
        assert status["ok"] is True and status["state"] == "completed"
        assert status["steps"][0]["output"] == "MOCK: review part 1"

        result = await call(session, "workflow_result", run_id="mcp-one")
        assert result["ok"] is True and result["workflow_name"] == "one" and result["inputs"] == {}
        assert result["output"] == {"out": "MOCK: review part 1"} and "failure_envelope" not in result

        other = await call(session, "workflow_run", name_or_path="one")
        assert other["ok"] is True and other["run_id"].startswith("run-") and other["state"] == "completed"
        listed = await call(session, "workflow_list")
        assert listed["ok"] is True
        assert [r["run_id"] for r in listed["runs"]] == [other["run_id"], "mcp-one"]
        assert [r["run_id"] for r in (await call(session, "workflow_list", limit=1))["runs"]] == [other["run_id"]]
        assert (await call(session, "workflow_list", state="failed"))["runs"] == []
        bad_state = await call(session, "workflow_list", state="sleeping")
        assert bad_state["ok"] is False and bad_state["error"].startswith("invalid state 'sleeping'")

        events = await call(session, "workflow_events", run_id="mcp-one")
        assert events["ok"] is True and events["run_id"] == "mcp-one" and events["state"] == "completed"
        assert events["gaps"] == [] and events["timed_out"] is False
        types = [e["type"] for e in events["events"]]
        assert types[0] == "run.started" and types[-1] == "run.completed"
        assert "step.started" in types and "step.completed" in types
        seqs = [e["seq"] for e in events["events"]]
        assert seqs == sorted(seqs) and events["next_after_seq"] == seqs[-1]
        page = await call(session, "workflow_events", run_id="mcp-one", after_seq=seqs[0], max_events=2)
        assert [e["seq"] for e in page["events"]] == seqs[1:3] and page["timed_out"] is False
        absent = await call(session, "workflow_events", run_id="no-such-run")
        assert absent == {"ok": True, "run_id": "no-such-run", "events": [], "events_unavailable": True}

        # Errors carry the server's message; a finished run cannot be cancelled.
        cancelled = await call(session, "workflow_cancel", run_id="mcp-one")
        assert cancelled == {"ok": False, "error": "run 'mcp-one' is already finished (completed)"}
        for tool in ("workflow_status", "workflow_result", "workflow_wait", "workflow_cancel", "workflow_resume"):
            unknown = await call(session, tool, run_id="no-such-run")
            assert unknown == {"ok": False, "error": "unknown workflow run 'no-such-run'"}, tool
        malformed = await call(session, "workflow_status", run_id="../terminals")
        assert malformed["ok"] is False and "1-64 of [A-Za-z0-9_-]" in malformed["error"]
        missing = await call(session, "workflow_run", name_or_path="nope")
        assert missing["ok"] is False and "nope" in missing["error"]
        taken = await call(session, "workflow_start", name_or_path="one", run_id="mcp-one")
        assert taken == {"ok": False, "error": "run id 'mcp-one' is already taken"}


async def test_start_then_follow_wait_and_result(cao: CaoServer) -> None:
    write_workflow(cao, "slow", SLOW_STEP)
    async with mcp_session(mcp_env(cao)) as session:
        # workflow_start answers while the run goes on: `workflow_wait` with timeout 0 below still
        # finds it running. (How fast it answers: bench/workflow_bench.py, "detached start".)
        started = await call(session, "workflow_start", name_or_path="slow", run_id="mcp-slow")
        assert started == {
            "ok": True,
            "run_id": "mcp-slow",
            "state": "running",
            "status_url": f"{cao.url}/workflows/runs/mcp-slow",
        }
        assert httpx.get(started["status_url"], trust_env=False).json()["run_id"] == "mcp-slow"

        early = await call(session, "workflow_wait", run_id="mcp-slow", timeout=0)
        assert early["ok"] is True and early["state"] == "running" and early["timed_out"] is True

        # A live follow ends with the run, not with the 45 s window.
        followed = await call(session, "workflow_events", run_id="mcp-slow")
        assert followed["ok"] is True and followed["timed_out"] is False
        assert followed["events"][-1]["type"] == "run.completed"

        waited = await call(session, "workflow_wait", run_id="mcp-slow", timeout=60)
        assert waited["ok"] is True and waited["timed_out"] is False
        assert (waited["state"], waited["kind"], waited["halts"]) == ("completed", None, [])
        assert waited["output"] == {"out": "MOCK: slept 1.5s"}
        assert "failure_envelope" not in waited

        result = await call(session, "workflow_result", run_id="mcp-slow")
        assert result["ok"] is True and result["state"] == "completed" and result["steps"][0]["attempts"] == 1

        bad = await call(session, "workflow_wait", run_id="mcp-slow", timeout=-1)
        assert bad["ok"] is False and "timeout must be between 0 and 8820" in bad["error"]


async def test_resume_through_a_manual_halt(cao: CaoServer) -> None:
    write_workflow(cao, "manual", MANUAL_STEP)
    async with mcp_session(mcp_env(cao)) as session:
        first = await call(session, "workflow_run", name_or_path="manual", run_id="mcp-manual")
        assert first["ok"] is True and (first["state"], first["kind"]) == ("failed", "error")
        assert any("first drive stops here" in w for w in first["warnings"])

        halted = await call(session, "workflow_resume", run_id="mcp-manual")
        assert halted["ok"] is True and (halted["state"], halted["kind"]) == ("failed", "halted")
        assert halted["halts"][0]["step_id"] == "call-1" and halted["halts"][0]["rule"] == "policy_manual"
        waited = await call(session, "workflow_wait", run_id="mcp-manual", timeout=5)
        assert waited["failure_envelope"]["failing_step"] == "call-1" and waited["timed_out"] is False

        # Bad decisions are refused before any request: nothing reaches the server's journal.
        before = event_count(cao, "mcp-manual")
        bogus = await call(session, "workflow_resume", run_id="mcp-manual", decisions={"call-1": "bogus"})
        assert bogus == {"ok": False, "error": "decision for step 'call-1' must be 'rerun' or 'skip', got 'bogus'"}
        blank = await call(session, "workflow_resume", run_id="mcp-manual", decisions={"": "skip"})
        assert blank == {"ok": False, "error": "decisions: every step id must be a non-empty string"}
        assert event_count(cao, "mcp-manual") == before

        done = await call(session, "workflow_resume", run_id="mcp-manual", decisions={"call-1": "skip"})
        assert done["ok"] is True and (done["state"], done["kind"], done["halts"]) == ("completed", None, [])
        assert done["output"] == {"out": "MOCK: review part 1"}
        assert done["steps"][0]["attempts"] == 1  # skipped: the stored result was accepted, nothing re-ran

        again = await call(session, "workflow_resume", run_id="mcp-manual")
        assert again == {"ok": False, "error": "run 'mcp-manual' is completed; there is nothing to resume"}


async def test_workflow_return_records_the_step_output(cao: CaoServer) -> None:
    write_workflow(cao, "one", ONE_STEP)
    assert cao.client.post("/workflows/runs", json={"name_or_path": "one", "run_id": "mcp-ret"}).status_code == 200
    async with mcp_session(mcp_env(cao)) as session:
        outside = await call(session, "workflow_return", output={"verdict": "ok"})
        assert outside == {"ok": False, "error": NOT_IN_STEP}

    # A claim in the client's environment is not an identity: only what the server recorded is.
    claimed = mcp_env(cao) | {"CAO_WORKFLOW_RUN_ID": "mcp-ret", "CAO_WORKFLOW_STEP_ID": "call-1"}
    async with mcp_session(claimed) as session:
        assert await call(session, "workflow_return", output={"verdict": "ok"}) == {"ok": False, "error": NOT_IN_STEP}

    step_env = mcp_env(cao, as_step_agent(cao, "mcp-ret", "call-1"))
    async with mcp_session(step_env) as session:
        returned = await call(session, "workflow_return", output={"verdict": "ok", "issues": 2})
        assert returned == {"ok": True, "validated": True, "errors": []}
        step = cao.client.get("/workflows/runs/mcp-ret").json()["steps"][0]
        assert step["output_json"] == {"verdict": "ok", "issues": 2}

        schema = {"type": "object", "required": ["verdict", "summary"]}
        partial = await call(session, "workflow_return", output={"verdict": "bad"}, output_schema=schema)
        assert partial == {"ok": True, "validated": False, "errors": ["$.summary: 'summary' is a required property"]}
        full = await call(session, "workflow_return", output={"verdict": "fine", "summary": "s"}, output_schema=schema)
        assert full == {"ok": True, "validated": True, "errors": []}
        step = cao.client.get("/workflows/runs/mcp-ret").json()["steps"][0]
        assert step["output_json"] == {"verdict": "fine", "summary": "s"}

    wrong_step = mcp_env(cao, as_step_agent(cao, "mcp-ret", "call-9"))
    async with mcp_session(wrong_step) as session:
        unknown = await call(session, "workflow_return", output={"verdict": "ok"})
        assert unknown == {"ok": False, "error": "run 'mcp-ret' has no step 'call-9'"}
