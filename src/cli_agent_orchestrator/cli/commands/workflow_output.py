"""Helpers of `cao workflow`: its HTTP client, the Server-Sent Events follow, and the
human renderings of specs, runs, results and events."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
import httpx

from ...clients.edge import describe_detail, parse_sse
from ...settings import Settings
from ..client import ApiError, CaoClient
from .common import print_fields, print_table

REQUEST_TIMEOUT = 30.0  # every non-blocking call
BLOCKING_TIMEOUT = 8820.0  # blocking run / resume: the server's own wait bound
STREAM_TIMEOUT = httpx.Timeout(30.0, connect=10.0, read=60.0)  # the server sends a keepalive every 15 s
MAX_RECONNECTS = 5
RUN_ID_RE = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")
STEP_COLUMNS = [("id", "ID"), ("state", "STATE"), ("attempts", "ATTEMPTS"), ("policy", "POLICY"), ("halt_rule", "HALT")]


def describe_workflow_detail(detail: Any) -> str:
    """The server's `detail` as one message; a halt or a divergence also names its kind,
    step and rule, since that is what the next `resume --decide` needs."""
    if isinstance(detail, dict) and detail.get("kind") in ("decision_required", "diverged"):
        extra = ", ".join(f"{key} {detail[key]}" for key in ("step_id", "rule") if detail.get(key))
        return f"{detail.get('message', '')} [{detail['kind']}{': ' + extra if extra else ''}]"
    return describe_detail(detail)


def _raise_for_detail(resp: httpx.Response) -> None:
    # A response hook: it sees the raw `detail` before CaoClient turns it into a message.
    if resp.status_code < 400:
        return
    resp.read()
    try:
        message = describe_workflow_detail(resp.json().get("detail"))
    except (ValueError, AttributeError):
        message = resp.text.strip()[:500]
    raise ApiError(message or f"HTTP {resp.status_code}", resp.status_code)


class WorkflowClient(CaoClient):
    """CaoClient (base URL, connection errors, `Error: ...` reporting) with workflow
    error details and a streaming GET."""

    def __init__(self, base_url: str, timeout: float):
        super().__init__(base_url, timeout)
        self._http.event_hooks["response"] = [_raise_for_detail]

    def stream(self, path: str, params: dict[str, Any]):
        return self._http.stream(
            "GET", path, params=params, timeout=STREAM_TIMEOUT, headers={"Accept": "text/event-stream"}
        )


@contextmanager
def wf_client() -> Iterator[WorkflowClient]:
    api = WorkflowClient(Settings.from_env().base_url, REQUEST_TIMEOUT)
    try:
        yield api
    finally:
        api.close()


def run_path(run_id: str, suffix: str = "") -> str:
    # Checked here too: the id goes into the URL path.
    if not RUN_ID_RE.match(run_id):
        raise click.ClickException(f"invalid run id {run_id!r}: use 1-64 of [A-Za-z0-9_-]")
    return f"/workflows/runs/{run_id}{suffix}"


def follow_events(api: WorkflowClient, run_id: str, after_seq: int, on_event: Callable[[dict], None]) -> str:
    """Follow the run's timeline until the server ends the stream (the drive ended).
    Returns "ended", "absent" (unknown run) or "lost" (no contact after the reconnects);
    each reconnect resumes after the last event seen."""
    last, failures = after_seq, 0
    while True:
        try:
            with api.stream(run_path(run_id, "/events"), {"stream": "true", "after_seq": last}) as resp:
                for frame in parse_sse(resp.iter_lines()):
                    failures = 0
                    if frame.event == "run_absent":
                        return "absent"
                    if not frame.data:
                        continue
                    row = json.loads(frame.data)
                    last = max(last, int(row.get("seq") or frame.id or last))
                    on_event(row)
            return "ended"
        except httpx.TransportError:  # refused, reset, read timeout, stream cut short
            failures += 1
            if failures > MAX_RECONNECTS:
                return "lost"
            time.sleep(min(0.5 * failures, 2.0))


def event_line(row: dict) -> str:
    """One line per event: `[type] step: what happened`."""
    data, kind = row.get("data") or {}, row.get("type", "?")
    step = row.get("step_id")
    if kind == "step.started":
        text = f"{step} attempt {data.get('attempt', '?')}"
        if data.get("reason") and data.get("reason") != "first attempt":
            text += f" ({data['reason']})"
    elif kind in ("step.halted", "step.diverged"):
        text = f"{step}: {data.get('message') or data.get('rule')}"
    elif kind in ("step.failed", "step.attempt.failed"):
        text = f"{step}: {data.get('error_kind') or 'error'}: {data.get('error') or ''}".rstrip(": ")
    elif kind == "step.replayed":
        text = f"{step} (stored result, status {data.get('status')})"
    elif kind == "terminal.created":
        text = f"{step} terminal {data.get('terminal_id')}"
    elif kind == "run.started":
        text = f"{data.get('workflow_name')} ({data.get('tier')})"
    elif kind == "run.resumed":
        decisions = ", ".join(f"{k}={v}" for k, v in (data.get("decisions") or {}).items())
        text = f"generation {row.get('generation')}" + (f", decisions {decisions}" if decisions else "")
    elif kind.startswith("run."):
        text = data.get("message") or (f"kind {data['kind']}" if data.get("kind") else "")
    else:
        text = step or ""
    return f"[{kind}] {text}".rstrip()


# --- renderings -----------------------------------------------------------------------------
def print_list(title: str, items: list[str]) -> None:
    if items:
        click.echo(f"{title}:")
        for item in items:
            click.echo(f"  {item}")


def halt_text(halt: dict | None) -> str | None:
    if not halt:
        return None
    return f"{halt.get('step_id')}: {halt.get('rule')} — {halt.get('message')}"


def print_steps(steps: list[dict]) -> None:
    rows = [{**s, "halt_rule": (s.get("halt") or {}).get("rule")} for s in steps]
    click.echo()
    print_table(rows, STEP_COLUMNS, empty="No steps yet.")


def state_text(run: dict) -> str:
    return run["state"] + (f" ({run['kind']})" if run.get("kind") else "")


def print_status(run: dict) -> None:
    print_fields(
        [
            ("Run", run["run_id"]),
            ("Workflow", run["workflow_name"]),
            ("Tier", run.get("tier")),
            ("State", run["state"]),
            ("Kind", run.get("kind")),
            ("Generation", run.get("generation")),
            ("Current step", run.get("current_step_id")),
            ("Driving", "yes" if run.get("driving") else "no"),
            ("Started", run.get("started_at")),
            ("Finished", run.get("finished_at")),
        ]
    )
    print_list("Halts", [text for h in run.get("halts") or [] if (text := halt_text(h))])
    print_steps(run.get("steps") or [])


def print_result(result: dict, *, short: bool = False) -> None:
    """A run result; `short` (the end of a followed run) leaves out the steps table. A failed
    run's cause comes right after the header; the script's stderr (a traceback) comes last."""
    print_fields(
        [
            ("Run", result["run_id"]),
            ("Workflow", result["workflow_name"]),
            ("State", result["state"]),
            ("Kind", result.get("kind")),
            ("Generation", result.get("generation")),
            ("Finished", result.get("finished_at")),
        ]
    )
    envelope = result.get("failure_envelope")
    if envelope:
        click.echo("Failure:")
        width = 14
        for label, value in [
            ("cause", failure_cause(result)),
            ("failing step", envelope.get("failing_step")),
            ("attempt", envelope.get("attempt")),
            ("error kind", envelope.get("error_kind")),
            ("halt", halt_text(envelope.get("halt"))),
            ("terminal", envelope.get("terminal_reference")),
            ("next command", next_command(result)),
        ]:
            click.echo(f"  {(label + ':').ljust(width)}{'-' if value in (None, '') else value}")
    if not short:
        print_steps(result.get("steps") or [])
        click.echo()
    if result.get("output") is not None:
        click.echo("Output:")
        click.echo(json.dumps(result["output"], indent=2, ensure_ascii=False))
    print_list("Warnings", result.get("warnings") or [])
    hint = None if envelope else resume_hint(result)
    if hint:
        click.echo(hint)


def failure_cause(result: dict) -> str | None:
    """One line on why a run failed: the halt, the failing step's error, else the script's
    exit and the last line of its stderr (a traceback's exception line)."""
    envelope = result.get("failure_envelope") or {}
    if envelope.get("halt"):
        return halt_text(envelope["halt"])
    failing = next((s for s in result.get("steps") or [] if s.get("id") == envelope.get("failing_step")), None)
    if failing and failing.get("error"):
        return f"step {failing['id']}: {failing['error']}"
    warnings = result.get("warnings") or []
    exits = [w for w in warnings if not w.startswith("stderr: ")]
    stderr = [w for w in warnings if w.startswith("stderr: ")]
    last_line = next((line.strip() for line in reversed(stderr[-1].splitlines()) if line.strip()), "") if stderr else ""
    parts = [last_line.removeprefix("stderr: ")] if last_line else []
    return " — ".join(parts + exits[:1]) or None


def next_command(result: dict) -> str:
    """What to type after reading a failure: decide the halted steps, else resume the run once the
    cause is fixed (finished steps replay). The server's envelope names `cao workflow result`, where
    this is read, so the CLI does not repeat it."""
    steps = sorted({h["step_id"] for h in result.get("halts") or [] if h.get("rule") != "diverged"})
    return f"cao workflow resume {result['run_id']}" + "".join(f" --decide {s}=rerun|skip" for s in steps)


def resume_hint(result: dict) -> str | None:
    """What to type next when the run stopped at halted steps (decision_required)."""
    if result.get("kind") != "halted":
        return None
    steps = sorted({h["step_id"] for h in result.get("halts") or [] if h.get("rule") != "diverged"})
    if not steps:
        return None
    decide = " ".join(f"--decide {s}=rerun|skip" for s in steps)
    return f"decision_required: cao workflow resume {result['run_id']} {decide}"


def print_spec(spec: dict) -> None:
    inputs = ", ".join(_input_text(name, decl) for name, decl in (spec.get("inputs") or {}).items())
    pairs: list[tuple[str, Any]] = [("Name", spec["name"]), ("Tier", spec["tier"]), ("Path", spec.get("path"))]
    if spec["tier"] == "yaml":
        pairs += [
            ("Mode", spec.get("mode")),
            ("Description", spec.get("description")),
            ("Validation", (spec.get("validation") or {}).get("status")),
        ]
    pairs.append(("Inputs", inputs or spec.get("inputs_error")))
    print_fields(pairs)
    if spec["tier"] == "script":
        findings = spec.get("findings") or []
        print_list("Findings", [finding_text(f) for f in findings] or ["none"])
    else:
        validation = spec.get("validation") or {}
        print_list("Errors", validation.get("errors") or [])
        print_list("Notes", validation.get("reserved_notes") or [])
    click.echo("---")
    click.echo(spec.get("source", "").rstrip("\n"))


def _input_text(name: str, decl: dict) -> str:
    text = f"{name}: {decl.get('type')}"
    if decl.get("default") is not None:
        text += f" = {json.dumps(decl['default'])}"
    return text + (" (required)" if decl.get("required") else "")


def finding_text(finding: dict) -> str:
    return f"line {finding.get('line')}: [{finding.get('rule_id')}] {finding.get('message')}"
