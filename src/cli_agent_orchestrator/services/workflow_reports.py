"""Read-only reports over the journal: two runs side by side (`compare`), and one run's
diagnostics bundle (what to attach to a bug report: spec hash, inputs with secrets
masked, step outcomes, the whole timeline, the environment).
"""
from __future__ import annotations

import json
import platform
import re
import sys
from .. import __version__

# Input names that look like credentials are masked in diagnostics.
_SECRET_NAME = re.compile(r"(token|secret|password|passwd|api[_-]?key|credential)", re.IGNORECASE)


def _step_summary(step: dict) -> dict:
    envelope = step["envelope"] if isinstance(step["envelope"], dict) else {}
    return {"state": step["state"], "attempts": step["attempts"], "policy": step["policy"],
            "call_fingerprint": step["fingerprint"],
            "output": step["output"] if step["output"] is not None else envelope.get("last_message")}


def compare(base: dict, base_steps: list[dict], other: dict, other_steps: list[dict]) -> dict:
    """Steps matched by key: aligned (in both), removed (only in the baseline), added
    (only in the other run); and where aligned steps' outputs, or the runs' outputs, differ."""
    a = {s["step_id"]: s for s in base_steps}
    b = {s["step_id"]: s for s in other_steps}
    keys = list(a) + [k for k in b if k not in a]
    rows, diffs = [], []
    for key in keys:
        left = _step_summary(a[key]) if key in a else None
        right = _step_summary(b[key]) if key in b else None
        status = "aligned" if left and right else "removed" if left else "added"
        rows.append({"step_id": key, "status": status, "a": left, "b": right})
        if left and right and left["output"] != right["output"]:
            diffs.append({"step_id": key, "a": left["output"], "b": right["output"]})
    outputs = [json.loads(r["output_json"]) if r["output_json"] is not None else None for r in (base, other)]
    if outputs[0] != outputs[1]:
        diffs.append({"step_id": None, "a": outputs[0], "b": outputs[1]})
    return {"baseline_run_id": base["run_id"], "compare_run_id": other["run_id"],
            "same_source": base["content_hash"] == other["content_hash"], "steps": rows, "output_diffs": diffs}


def _mask(inputs: dict) -> dict:
    return {k: "[masked]" if _SECRET_NAME.search(k) else v for k, v in inputs.items()}


def diagnostics(run: dict, steps: list[dict], events: list[dict]) -> dict:
    masked = _mask(json.loads(run["inputs_json"]))
    # run.started carries the inputs too.
    events = [{**e, "data": {**e["data"], "inputs": _mask(e["data"]["inputs"])}}
              if isinstance(e.get("data"), dict) and isinstance(e["data"].get("inputs"), dict) else e
              for e in events]
    base = f"/workflows/runs/{run['run_id']}"
    return {
        "run_id": run["run_id"], "workflow_name": run["workflow_name"], "tier": run["tier"],
        "state": run["state"], "kind": run["kind"], "generation": run["generation"], "drives": run["drives"],
        "started_at": run["started_at"], "finished_at": run["finished_at"],
        "spec": {"source_path": run["source_path"], "content_hash": run["content_hash"]},
        "inputs": masked, "halts": run["halts"], "warnings": run["warnings"],
        "steps": [{"id": s["step_id"], "state": s["state"], "attempts": s["attempts"], "policy": s["policy"],
                   "error_kind": s["error_kind"], "error": s["error"], "terminal_id": s["terminal_id"],
                   "halt": {"rule": s["halt_rule"], "message": s["halt_message"]} if s["halt_rule"] else None}
                  for s in steps],
        "events": events, "gaps": [],
        "environment": {"cao_version": __version__, "python": sys.version.split()[0],
                        "platform": platform.platform()},
        "references": {"status": base, "result": f"{base}/result", "events": f"{base}/events",
                       "resume": f"cao workflow resume {run['run_id']}"},
    }
