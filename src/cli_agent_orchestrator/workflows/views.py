"""Read views over the journal, shaped for the HTTP, MCP and CLI surfaces: a run's status
and result, the list of runs, its timeline, two runs side by side, and a diagnostics
bundle for a bug report. Reads only; nothing here changes a run.
"""

from __future__ import annotations

import json
import platform
import re
import sys

from .. import __version__
from ..errors import InvalidInput, NotFound
from ..store import Store
from .drives import RunRegistry
from .records import EventRecord, RunRecord, RunState, StepRecord, StepState
from .specs import check_name

# Input names that look like credentials are masked in diagnostics.
_SECRET_NAME = re.compile(r"(token|secret|password|passwd|api[_-]?key|credential)", re.IGNORECASE)
MAX_LISTED_RUNS = 500
DIAGNOSTICS_EVENTS = 100000


class RunViews:
    def __init__(self, store: Store, registry: RunRegistry):
        self.store, self.registry = store, registry
        self.journal = store.journal

    async def get_run(self, run_id: str) -> RunRecord:
        run = await self.store.run(self.journal.get_run, check_name(run_id, "run id"))
        if run is None:
            raise NotFound(f"unknown workflow run {run_id!r}")
        return run

    def driving(self, run_id: str) -> bool:
        """Whether a drive of the run is live now (so its timeline may still grow)."""
        return run_id in self.registry.drives

    async def status(self, run_id: str) -> dict:
        run = await self.get_run(run_id)
        steps = await self.store.run(self.journal.list_steps, run_id)
        return {
            **_run_summary(run),
            "generation": run.generation,
            "kind": run.kind,
            "halts": _halts(run),
            "driving": self.driving(run_id),
            "steps": [_step_view(s) for s in steps],
        }

    async def result(self, run_id: str) -> dict:
        run = await self.get_run(run_id)
        steps = await self.store.run(self.journal.list_steps, run_id)
        out = {
            **_run_summary(run),
            "kind": run.kind,
            "generation": run.generation,
            "inputs": json.loads(run.inputs_json),
            "halts": _halts(run),
            "steps": [_step_view(s) for s in steps],
            "warnings": list(run.warnings),
            "output": json.loads(run.output_json) if run.output_json is not None else None,
        }
        if run.state in (RunState.FAILED, RunState.CANCELLED):
            out["failure_envelope"] = _failure_envelope(run, steps)
        return out

    async def list_runs(self, state: str | None, limit: int) -> list[dict]:
        if state is not None and state not in tuple(RunState):
            raise InvalidInput(f"invalid state {state!r}: use one of {', '.join(RunState)}")
        if not 1 <= limit <= MAX_LISTED_RUNS:
            raise InvalidInput(f"limit must be between 1 and {MAX_LISTED_RUNS}")
        runs = await self.store.run(self.journal.list_runs, RunState(state) if state else None, limit)
        return [_run_summary(r) for r in runs]

    async def timeline(self, run_id: str, after_seq: int, limit: int) -> list[EventRecord]:
        return await self.store.run(self.journal.events, run_id, after_seq, limit)

    async def compare(self, run_id: str, against: str) -> dict:
        """Steps matched by key: aligned (in both), removed (only in this run, the baseline),
        added (only in the other run); and where aligned steps' outputs, or the runs' outputs, differ."""
        base, other = await self.get_run(run_id), await self.get_run(against)
        a = {s.step_id: s for s in await self.store.run(self.journal.list_steps, run_id)}
        b = {s.step_id: s for s in await self.store.run(self.journal.list_steps, against)}
        rows, diffs = [], []
        for key in list(a) + [k for k in b if k not in a]:
            left = _step_summary(a[key]) if key in a else None
            right = _step_summary(b[key]) if key in b else None
            status = "aligned" if left and right else "removed" if left else "added"
            rows.append({"step_id": key, "status": status, "a": left, "b": right})
            if left and right and left["output"] != right["output"]:
                diffs.append({"step_id": key, "a": left["output"], "b": right["output"]})
        outputs = [json.loads(r.output_json) if r.output_json is not None else None for r in (base, other)]
        if outputs[0] != outputs[1]:
            diffs.append({"step_id": None, "a": outputs[0], "b": outputs[1]})
        return {
            "baseline_run_id": base.run_id,
            "compare_run_id": other.run_id,
            "same_source": base.content_hash == other.content_hash,
            "steps": rows,
            "output_diffs": diffs,
        }

    async def diagnostics(self, run_id: str) -> dict:
        """What to attach to a bug report: spec hash, inputs with credentials masked, step
        outcomes, the whole timeline, the environment."""
        run = await self.get_run(run_id)
        steps = await self.store.run(self.journal.list_steps, run_id)
        events = [e.as_json() for e in await self.store.run(self.journal.events, run_id, 0, DIAGNOSTICS_EVENTS)]
        # run.started carries the inputs too.
        events = [
            {**e, "data": {**e["data"], "inputs": _mask(e["data"]["inputs"])}}
            if isinstance(e.get("data"), dict) and isinstance(e["data"].get("inputs"), dict)
            else e
            for e in events
        ]
        base = f"/workflows/runs/{run.run_id}"
        return {
            "run_id": run.run_id,
            "workflow_name": run.workflow_name,
            "tier": run.tier,
            "state": run.state,
            "kind": run.kind,
            "generation": run.generation,
            "drives": run.drives,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "spec": {"source_path": run.source_path, "content_hash": run.content_hash},
            "inputs": _mask(json.loads(run.inputs_json)),
            "halts": _halts(run),
            "warnings": list(run.warnings),
            "steps": [
                {
                    "id": s.step_id,
                    "state": s.state,
                    "attempts": s.attempts,
                    "policy": s.policy,
                    "error_kind": s.error_kind,
                    "error": s.error,
                    "terminal_id": s.terminal_id,
                    "halt": s.halt,
                }
                for s in steps
            ],
            "events": events,
            "gaps": [],
            "environment": {
                "cao_version": __version__,
                "python": sys.version.split()[0],
                "platform": platform.platform(),
            },
            "references": {
                "status": base,
                "result": f"{base}/result",
                "events": f"{base}/events",
                "resume": f"cao workflow resume {run.run_id}",
            },
        }


def _halts(run: RunRecord) -> list[dict[str, str]]:
    return [h.as_json() for h in run.halts]


def _mask(inputs: dict) -> dict:
    return {k: "[masked]" if _SECRET_NAME.search(k) else v for k, v in inputs.items()}


def _run_summary(run: RunRecord) -> dict:
    return {
        "run_id": run.run_id,
        "workflow_name": run.workflow_name,
        "state": run.state,
        "tier": run.tier,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "current_step_id": run.current_step_id,
        "kind": run.kind,
    }


def _step_view(step: StepRecord) -> dict:
    envelope = step.envelope if isinstance(step.envelope, dict) else None
    return {
        "id": step.step_id,
        "state": step.state,
        "attempts": step.attempts,
        "output": step.reply,
        "output_json": step.output,
        "error": step.error,
        "error_kind": step.error_kind,
        "terminal_id": step.terminal_id,
        "policy": step.policy,
        "call_fingerprint": step.fingerprint,
        "generation": step.generation,
        "reprompted": bool(envelope and envelope.get("reprompted")),  # asked once more for schema-valid output
        "truncated": bool(envelope and envelope.get("truncated")),
        "halt": step.halt,
        "started_at": step.started_at,
        "finished_at": step.finished_at,
    }


def _step_summary(step: StepRecord) -> dict:
    return {
        "state": step.state,
        "attempts": step.attempts,
        "policy": step.policy,
        "call_fingerprint": step.fingerprint,
        "output": step.reply,
    }


def _failure_envelope(run: RunRecord, steps: list[StepRecord]) -> dict:
    failing = None
    if run.halts:
        failing = next((s for s in steps if s.step_id == run.halts[-1].step_id), None)
    if failing is None:
        failing = next((s for s in reversed(steps) if s.state in (StepState.FAILED, StepState.RUNNING)), None)
    return {
        "failing_step": failing.step_id if failing else None,
        "attempt": failing.attempts if failing else None,
        "error_kind": (failing.error_kind if failing and failing.error_kind else run.kind),
        "halt": run.halts[-1].as_json() if run.halts else None,
        "terminal_reference": failing.terminal_id if failing else None,
        "next_command": f"cao workflow result {run.run_id}",
    }
