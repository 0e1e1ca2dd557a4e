"""The MCP workflow tools, independent of MCP plumbing.

Every method returns an envelope, `{"ok": True, ...}` or `{"ok": False, "error": "<line>"}`,
and never raises: a raised error reaches the agent as an opaque tool error. Run and
step ids are checked here before they go into a URL, so a typo never reaches a
different route. HTTP errors carry the server's own `detail` message; a 409 whose
detail is an object also carries its `kind`, `step_id` and `rule`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from ..clients.aio import ApiResponse, CaoApi, describe_detail
from ..clients.edge import SseParser
from ..workflows.specs import NAME_RE
from .tools import ToolConfig

Envelope = dict[str, Any]

BLOCKING_TIMEOUT_S = 8820  # a blocking run or resume: the server's own cap
HTTP_MARGIN_S = 60  # on top of a server-side wait, for the answer to arrive
WAIT_CHUNK_S = 300  # one server long-poll within workflow_wait
EVENTS_CAP = 500
EVENTS_WINDOW_S = 45.0
DECISIONS = ("rerun", "skip")
NOT_IN_STEP = (
    "workflow_return only works inside a workflow step (CAO_WORKFLOW_RUN_ID / CAO_WORKFLOW_STEP_ID are not set)"
)


def fail(error: str, **extra: Any) -> Envelope:
    return {"ok": False, "error": error, **extra}


def guarded_by(failure: Callable[[str], Envelope]) -> Callable[[Any], Any]:
    """A decorator for tool methods: the contract holds even for a surprise (an odd answer
    shape), which becomes `failure(<line>)`, not a raise. Shared with the ops tools."""

    def guard(method: Any) -> Any:
        @functools.wraps(method)
        async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Envelope:
            try:
                return await method(self, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001
                return failure(f"unexpected failure in {method.__name__}: {type(exc).__name__}: {exc}")

        return wrapper

    return guard


guarded = guarded_by(fail)


def http_failure(resp: ApiResponse) -> Envelope:
    """The envelope for a failed call: the server's message, plus the 409 details."""
    out = fail(resp.error or "unexpected answer from cao-server")
    detail = resp.detail
    if resp.status == 409 and isinstance(detail, dict):
        out.update(kind=detail.get("kind"), step_id=detail.get("step_id"), rule=detail.get("rule"))
    return out


def bad_id(value: Any, what: str = "run id") -> str | None:
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        return f"invalid {what} {value!r}: use 1-64 of [A-Za-z0-9_-]"
    return None


def pick(body: dict, *keys: str) -> Envelope:
    return {k: body.get(k) for k in keys}


def check_decisions(decisions: Any) -> str | None:
    if decisions is None:
        return None
    if not isinstance(decisions, dict):
        return "decisions must be an object mapping step ids to 'rerun' or 'skip'"
    for step_id, value in decisions.items():
        if not isinstance(step_id, str) or not step_id.strip():
            return "decisions: every step id must be a non-empty string"
        if value not in DECISIONS:
            return f"decision for step {step_id!r} must be 'rerun' or 'skip', got {value!r}"
    return None


class WorkflowTools:
    def __init__(self, config: ToolConfig, api: CaoApi | None = None, env: Mapping[str, str] | None = None):
        self.config = config
        self.api = api or CaoApi(config.base_url, config.request_timeout)
        self.env = os.environ if env is None else env  # read at call time: the step's identity

    # --- starting runs -------------------------------------------------------------------
    @staticmethod
    def _run_body(name_or_path: str, inputs: Any, run_id: str | None) -> tuple[dict | None, str | None]:
        if not isinstance(name_or_path, str) or not name_or_path.strip():
            return None, "name_or_path must not be empty"
        if inputs is not None and not isinstance(inputs, dict):
            return None, "inputs must be an object"
        if run_id is not None and (error := bad_id(run_id)):
            return None, error
        return {"name_or_path": name_or_path, "inputs": inputs or {}, "run_id": run_id}, None

    @guarded
    async def run(self, name_or_path: str, inputs: dict | None = None, run_id: str | None = None) -> Envelope:
        body, error = self._run_body(name_or_path, inputs, run_id)
        if error:
            return fail(error)
        resp = await self.api.post("/workflows/runs", json=body, timeout=BLOCKING_TIMEOUT_S + HTTP_MARGIN_S)
        if not (resp.ok and isinstance(resp.body, dict)):
            return http_failure(resp)
        return {"ok": True, **pick(resp.body, "run_id", "state", "kind", "steps", "output", "halts", "warnings")}

    @guarded
    async def start(self, name_or_path: str, inputs: dict | None = None, run_id: str | None = None) -> Envelope:
        body, error = self._run_body(name_or_path, inputs, run_id)
        if error:
            return fail(error)
        resp = await self.api.post("/workflows/runs:submit", json=body)
        if not (resp.ok and isinstance(resp.body, dict)):
            return http_failure(resp)
        run = resp.body.get("run_id")
        status = (resp.body.get("links") or {}).get("status") or f"/workflows/runs/{run}"
        return {
            "ok": True,
            "run_id": run,
            "state": resp.body.get("state"),
            "status_url": self.config.base_url.rstrip("/") + status,
        }

    # --- looking at runs -----------------------------------------------------------------
    async def _get(self, path: str, **kw: Any) -> tuple[Any, Envelope | None]:
        resp = await self.api.get(path, **kw)
        if not resp.ok or resp.body is None:
            return None, http_failure(resp)
        return resp.body, None

    @guarded
    async def status(self, run_id: str) -> Envelope:
        if error := bad_id(run_id):
            return fail(error)
        body, failed = await self._get(f"/workflows/runs/{run_id}")
        if failed:
            return failed
        return {"ok": True, **pick(body, "run_id", "state", "kind", "current_step_id", "halts", "steps")}

    @guarded
    async def result(self, run_id: str) -> Envelope:
        if error := bad_id(run_id):
            return fail(error)
        body, failed = await self._get(f"/workflows/runs/{run_id}/result")
        return failed or {"ok": True, **body}

    @guarded
    async def list_runs(self, state: str | None = None, limit: int = 50) -> Envelope:
        body, failed = await self._get("/workflows/runs", params={"state": state, "limit": limit})
        return failed or {"ok": True, "runs": body}

    @guarded
    async def wait(self, run_id: str, timeout: int = BLOCKING_TIMEOUT_S) -> Envelope:
        if error := bad_id(run_id):
            return fail(error)
        if isinstance(timeout, bool) or not isinstance(timeout, int) or not 0 <= timeout <= BLOCKING_TIMEOUT_S:
            return fail(f"timeout must be between 0 and {BLOCKING_TIMEOUT_S} seconds, got {timeout!r}")
        deadline = time.monotonic() + timeout
        finished = False
        while True:
            chunk = round(max(0.0, min(deadline - time.monotonic(), WAIT_CHUNK_S)), 3)
            body, failed = await self._get(
                f"/workflows/runs/{run_id}/wait", params={"timeout": chunk}, timeout=chunk + HTTP_MARGIN_S
            )
            if failed:
                return failed
            finished = bool(body.get("finished"))
            # Not driven and not final (a crash remnant): waiting longer changes nothing.
            if finished or not body.get("driving", True) or time.monotonic() >= deadline:
                break
        body, failed = await self._get(f"/workflows/runs/{run_id}/result")
        if failed:
            return failed
        out = {"ok": True, **pick(body, "run_id", "state", "kind", "steps", "output", "halts")}
        if "failure_envelope" in body:
            out["failure_envelope"] = body["failure_envelope"]
        out["timed_out"] = not finished and body.get("state") == "running"
        return out

    @guarded
    async def events(self, run_id: str, after_seq: int = 0, max_events: int = EVENTS_CAP) -> Envelope:
        if error := bad_id(run_id):
            return fail(error)
        if isinstance(after_seq, bool) or not isinstance(after_seq, int) or after_seq < 0:
            return fail(f"after_seq must be a non-negative integer, got {after_seq!r}")
        if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < 1:
            return fail(f"max_events must be a positive integer, got {max_events!r}")
        read = StreamRead(min(max_events, EVENTS_CAP))
        try:
            async with asyncio.timeout(EVENTS_WINDOW_S):
                failure = await self._read_stream(run_id, after_seq, read)
        except TimeoutError:  # what arrived so far is kept
            read.timed_out, failure = True, None
        if failure is not None:
            return failure
        if read.absent:
            return {"ok": True, "run_id": run_id, "events": [], "events_unavailable": True}
        status, failed = await self._get(f"/workflows/runs/{run_id}")
        last = read.events[-1].get("seq") if read.events and isinstance(read.events[-1], dict) else None
        return {
            "ok": True,
            "run_id": run_id,
            "state": None if failed else status.get("state"),
            "events": read.events,
            "gaps": read.gaps,
            "timed_out": read.timed_out,
            "next_after_seq": last if isinstance(last, int) else after_seq,
        }

    async def _read_stream(self, run_id: str, after_seq: int, read: StreamRead) -> Envelope | None:
        """Follow the SSE stream into `read` until its limit or the stream's end; an
        envelope only when the request itself failed."""
        params: dict[str, str | int] = {"stream": "true", "after_seq": after_seq}
        try:
            async with self.api._http().stream(
                "GET", f"/workflows/runs/{run_id}/events", params=params, timeout=EVENTS_WINDOW_S + 5
            ) as resp:
                if resp.status_code != 200:
                    await resp.aread()
                    try:
                        body = resp.json()
                    except ValueError:
                        body = resp.text
                    detail = ApiResponse(resp.status_code, body).detail
                    return http_failure(ApiResponse(resp.status_code, body, describe_detail(detail)))
                parser = SseParser()
                async for line in resp.aiter_lines():
                    frame = parser.feed(line)
                    if frame is not None and read.add(frame.event, frame.data):
                        return None
        except httpx.TimeoutException:
            raise TimeoutError from None
        except httpx.HTTPError as exc:
            return fail(f"cannot reach cao-server at {self.config.base_url}: {exc}")
        return None

    # --- acting on runs ------------------------------------------------------------------
    @guarded
    async def resume(self, run_id: str, decisions: dict[str, str] | None = None) -> Envelope:
        if error := bad_id(run_id) or check_decisions(decisions):
            return fail(error)
        resp = await self.api.post(
            f"/workflows/runs/{run_id}/resume",
            json={"decisions": decisions or {}},
            timeout=BLOCKING_TIMEOUT_S + HTTP_MARGIN_S,
        )
        if not (resp.ok and isinstance(resp.body, dict)):
            return http_failure(resp)
        return {"ok": True, **pick(resp.body, "run_id", "state", "kind", "steps", "output", "halts")}

    @guarded
    async def cancel(self, run_id: str) -> Envelope:
        if error := bad_id(run_id):
            return fail(error)
        resp = await self.api.post(f"/workflows/runs/{run_id}/cancel")
        return {"ok": True, "run_id": run_id} if resp.ok else http_failure(resp)

    @guarded
    async def return_output(self, output: dict, output_schema: dict | None = None) -> Envelope:
        run_id = (self.env.get("CAO_WORKFLOW_RUN_ID") or "").strip()
        step_id = (self.env.get("CAO_WORKFLOW_STEP_ID") or "").strip()
        if not run_id or not step_id:
            return fail(NOT_IN_STEP)
        if error := bad_id(run_id, "CAO_WORKFLOW_RUN_ID") or bad_id(step_id, "CAO_WORKFLOW_STEP_ID"):
            return fail(error)
        if not isinstance(output, dict):
            return fail("output must be an object")
        if output_schema is not None and not isinstance(output_schema, dict):
            return fail("output_schema must be a JSON Schema object")
        # Checked by cao-server, with the same validator as a YAML step's output_schema.
        body: dict[str, Any] = {"output": output}
        if output_schema is not None:
            body["output_schema"] = output_schema
        generation = (self.env.get("CAO_WORKFLOW_GENERATION") or "").strip()
        if generation:  # lets the server refuse an agent left over from an older drive
            body["generation"] = generation
        resp = await self.api.post(f"/workflows/runs/{run_id}/steps/{step_id}/output", json=body)
        if not (resp.ok and isinstance(resp.body, dict)):
            return http_failure(resp)
        errors = [str(e) for e in resp.body.get("errors") or []]
        return {"ok": True, "validated": bool(resp.body.get("validated", True)) and not errors, "errors": errors}


class StreamRead:
    """What one bounded read of the event stream collected."""

    def __init__(self, limit: int):
        self.limit = limit
        self.events: list[Any] = []
        self.gaps: list[Any] = []
        self.absent = self.timed_out = False

    def add(self, kind: str, data: str) -> bool:
        """Take one frame; True when reading should stop."""
        try:
            payload = json.loads(data)
        except ValueError:
            payload = data
        if kind == "run_absent":
            self.absent = True
            return True
        (self.gaps if kind == "gap" else self.events).append(payload)
        return len(self.events) >= self.limit
