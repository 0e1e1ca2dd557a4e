"""HTTP routes for workflows: specs in the workflow directory, runs (blocking and
submitted), resume with decisions, cancel, results, and the event timeline (a batch
or a Server-Sent Events follow driven by the bus).

`/workflows/runs…` routes are declared before `/workflows/{name}` so that a spec can
never shadow them.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Path, Query, Request, Response, status
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from ..errors import InvalidInput, NotFound
from ..events import WorkflowEvent
from ..workflows.inputs import MAX_INPUTS_BYTES, inputs_size
from ..workflows.records import Decision, EventRecord, RunState
from ..workflows.service import WorkflowService
from ..workflows.specs import check_name
from .errors import EVERY_ROUTE, answers
from .events_stream import SSE_CONTENT
from .limits import StrictJsonRoute
from .schemas import MAX_PATH, WORKFLOW_NAME, refused, stated

router = APIRouter(prefix="/workflows", tags=["workflows"], route_class=StrictJsonRoute, responses=EVERY_ROUTE)

# Run ids, step ids and spec names follow one rule (a 400 with the reason, as this API always did).
RunId = Annotated[str, Path(max_length=64, json_schema_extra=WORKFLOW_NAME)]
SpecName = Annotated[str, Path(max_length=64, json_schema_extra=WORKFLOW_NAME)]
StepId = Annotated[str, Path(max_length=64, json_schema_extra=WORKFLOW_NAME)]
# A spec's name, or a path (with a `/`, or a file name with its suffix) of a file in the workflow directory.
NAME_OR_PATH = stated(pattern=r"^(?:[A-Za-z0-9_-]{1,64}|.*/.*|.*\.(?:py|yaml|yml))$")
# Error statuses by what a route does (400, 401, 403 and 413 come with every route; 503 with every
# route that uses the database, i.e. all but the spec catalogue's).
READS_RUN = answers(404, 422, 503)
STARTS_RUN = {
    **answers(404, 409, 422, 501, 503),
    **refused("a path outside the workflow directory or not a .py/.yaml/.yml file, inputs the workflow does not take"),
}
CHANGES_RUN = answers(404, 409, 422, 503)
SSE_OR_JSON: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "A batch of events (JSON), or with `stream=true` / "
        "`Accept: text/event-stream` a Server-Sent Events follow",
        "content": SSE_CONTENT,
    }
}
KEEPALIVE_S = 15.0
EVENTS_PAGE = 500
MAX_SEQ = 2**63 - 1  # SQLite's largest INTEGER: a larger `after_seq` cannot even be compared
BLOCKING_WAIT_S = 8820.0


def service(request: Request) -> WorkflowService:
    return request.app.state.runtime.workflows


class RunBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name_or_path: str = Field(..., min_length=1, max_length=MAX_PATH, json_schema_extra=NAME_OR_PATH)
    inputs: dict[str, Any] = Field(default_factory=dict)
    run_id: str | None = Field(None, max_length=64, json_schema_extra=WORKFLOW_NAME)


class ResumeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    decisions: dict[str, Literal["rerun", "skip"]] = Field(default_factory=dict)
    wait: bool = True


class ValidateBody(BaseModel):
    # The catalogue's rule, stated: a file (`path`), or text with its tier.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "anyOf": [
                {"required": ["path"], "properties": {"path": {"type": "string"}}},
                {
                    "required": ["source", "tier"],
                    "properties": {"source": {"type": "string"}, "tier": {"type": "string"}},
                },
            ]
        },
    )
    path: str | None = Field(None, max_length=MAX_PATH)
    source: str | None = Field(None, max_length=256 * 1024)
    tier: Literal["script", "yaml"] | None = None


class StepOutputBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    output: dict[str, Any]
    # JSON Schema 2020-12 to check `output` against (a script's step); a YAML step's own
    # output_schema wins. Not a schema → 400; a mismatch → 200 with validated: false.
    output_schema: dict[str, Any] | None = None
    # The step's CAO_WORKFLOW_GENERATION; when given, output from an older drive is refused.
    generation: str | None = Field(None, max_length=12, pattern=r"^[0-9]+$")


def _links(run_id: str) -> dict[str, str]:
    base = f"/workflows/runs/{run_id}"
    return {
        "self": base,
        "status": base,
        "result": f"{base}/result",
        "cancel": f"{base}/cancel",
        "resume": f"{base}/resume",
        "events": f"{base}/events",
        "wait": f"{base}/wait",
    }


def _check_inputs_size(inputs: dict[str, Any]) -> None:
    # A cheap guard before any parsing work, measured like the exact 32 KiB cap that
    # validate_inputs applies to the resolved inputs (paths made absolute, defaults added).
    if inputs_size(inputs) > MAX_INPUTS_BYTES * 2:
        raise InvalidInput(f"workflow inputs exceed {MAX_INPUTS_BYTES} bytes")


# --- specs that need no name --------------------------------------------------------------
@router.post(
    "/validate",
    responses={**answers(404, 422), **refused("a path outside the workflow directory or not a .py/.yaml/.yml file")},
)
async def validate(request: Request, body: ValidateBody) -> dict:
    """Lint a script or check a YAML spec: a file in the workflow directory (`path`) or
    text (`source` + `tier`). Answers 200 with status `fail` for an invalid spec."""
    return service(request).catalog.validate(body.path, body.source, body.tier)


@router.get("")
async def list_specs(request: Request) -> list[dict]:
    return service(request).catalog.list()


# --- runs -----------------------------------------------------------------------------------
@router.post("/runs", responses=STARTS_RUN)
async def run_blocking(request: Request, body: RunBody) -> dict:
    """Start a run and answer when it ends, with its output."""
    _check_inputs_size(body.inputs)
    svc = service(request)
    drive = await svc.runs.start(body.name_or_path, body.inputs, body.run_id)
    await svc.runs.wait_finished(drive.run_id, BLOCKING_WAIT_S)
    return await svc.views.result(drive.run_id)


@router.post("/runs:submit", status_code=status.HTTP_202_ACCEPTED, responses=STARTS_RUN)
async def run_submit(request: Request, body: RunBody) -> dict:
    """Start a run and answer at once; the run is journaled before this returns."""
    _check_inputs_size(body.inputs)
    drive = await service(request).runs.start(body.name_or_path, body.inputs, body.run_id)
    return {"run_id": drive.run_id, "state": "running", "links": _links(drive.run_id)}


@router.get("/runs", responses=answers(422, 503))
async def list_runs(
    request: Request,
    state: Annotated[
        str | None, Query(max_length=16, json_schema_extra=stated(enum=[s.value for s in RunState]))
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> list[dict]:
    return await service(request).views.list_runs(state, limit)


@router.get("/runs/{run_id}", responses=READS_RUN)
async def run_status(request: Request, run_id: RunId) -> dict:
    return await service(request).views.status(run_id)


@router.get("/runs/{run_id}/result", responses=READS_RUN)
async def run_result(request: Request, run_id: RunId) -> dict:
    return await service(request).views.result(run_id)


@router.get("/runs/{run_id}/wait", responses=READS_RUN)
async def run_wait(
    request: Request, run_id: RunId, timeout: Annotated[float, Query(ge=0, le=3600, allow_inf_nan=False)] = 60.0
) -> dict:
    """Long-poll: answers when the run's drive ends or after `timeout` seconds
    (`finished: false`); driven by the drive's end, not by polling."""
    svc = service(request)
    finished = await svc.runs.wait_finished(run_id, timeout)
    return {"finished": finished, **await svc.views.status(run_id)}


@router.get("/runs/{run_id}/compare", responses=READS_RUN)
async def run_compare(
    request: Request, run_id: RunId, against: Annotated[str, Query(max_length=64, json_schema_extra=WORKFLOW_NAME)]
) -> dict:
    """This run (the baseline) next to run `against`, step by step."""
    return await service(request).views.compare(run_id, against)


@router.get("/runs/{run_id}/diagnostics", responses=READS_RUN)
async def run_diagnostics(request: Request, run_id: RunId) -> dict:
    """Everything about one run worth attaching to a bug report (credential-like inputs masked)."""
    return await service(request).views.diagnostics(run_id)


@router.post("/runs/{run_id}/cancel", responses=CHANGES_RUN)
async def run_cancel(request: Request, run_id: RunId) -> dict:
    await service(request).runs.cancel(run_id)
    return {"success": True, "run_id": run_id}


@router.post("/runs/{run_id}/resume", responses={**CHANGES_RUN, 202: {"description": "Resumed (`wait: false`)"}})
async def run_resume(request: Request, run_id: RunId, body: ResumeBody | None = None) -> Response:
    """Re-drive a run from the top with a new generation; `decisions` grant one attempt
    each for halted steps. Blocks until the drive ends unless `wait` is false (202)."""
    body = body or ResumeBody()
    svc = service(request)
    drive = await svc.runs.resume(run_id, {step: Decision(d) for step, d in body.decisions.items()})
    if not body.wait:
        return JSONResponse(
            {"run_id": run_id, "state": "running", "generation": drive.generation, "links": _links(run_id)},
            status_code=status.HTTP_202_ACCEPTED,
        )
    await svc.runs.wait_finished(run_id, BLOCKING_WAIT_S)
    return JSONResponse(await svc.views.result(run_id))


@router.delete("/runs/{run_id}", status_code=status.HTTP_204_NO_CONTENT, responses=answers(409, 422, 503))
async def run_delete(request: Request, run_id: RunId) -> Response:
    await service(request).runs.delete_run(run_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/runs/{run_id}/steps/{step_id}/output",
    responses={
        **CHANGES_RUN,
        **refused("an output_schema that is not JSON Schema 2020-12, or an output over 1 MiB or not valid text"),
    },
)
async def step_output(request: Request, run_id: RunId, step_id: StepId, body: StepOutputBody) -> dict:
    """Structured output for a step (MCP `workflow_return` from the step's agent): kept, and
    answered with `{validated, errors, state}`; `errors` name the failing JSON paths."""
    return await service(request).runs.record_step_output(
        run_id, step_id, body.output, body.generation, body.output_schema
    )


@router.get("/runs/{run_id}/events", responses={**SSE_OR_JSON, **answers(422, 503)})
async def run_events(
    request: Request,
    run_id: RunId,
    after_seq: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    limit: Annotated[int, Query(ge=1, le=EVENTS_PAGE)] = EVENTS_PAGE,
    stream: bool = False,
    accept: Annotated[str | None, Header()] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> Response:
    """The run's timeline after `after_seq`: a batch, or (with `stream=true` or
    `Accept: text/event-stream`) a live follow that ends when the drive ends."""
    if last_event_id and re.fullmatch(r"[0-9]{1,18}", last_event_id):  # else ignored, as SSE allows
        after_seq = max(after_seq, int(last_event_id))
    views = service(request).views
    if not (stream or (accept or "").startswith("text/event-stream")):
        try:
            await views.get_run(run_id)
        except NotFound:
            return JSONResponse({"events": [], "gaps": [], "next_after_seq": after_seq, "run_absent": True})
        rows = await views.timeline(run_id, after_seq, limit)
        return JSONResponse(
            {"events": [r.as_json() for r in rows], "gaps": [], "next_after_seq": rows[-1].seq if rows else after_seq}
        )
    check_name(run_id, "run id")  # a malformed id is a 400 here too, not an absent run
    return StreamingResponse(
        _follow(request, run_id, after_seq),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _frame(entry: EventRecord) -> bytes:
    return f"event: {entry.type}\nid: {entry.seq}\ndata: {json.dumps(entry.as_json())}\n\n".encode()


async def _follow(request: Request, run_id: str, after_seq: int) -> AsyncIterator[bytes]:
    views, bus = service(request).views, request.app.state.runtime.bus
    # Subscribe before reading the backlog, so nothing falls between the two.
    sub = bus.open_stream(f"wf-sse:{id(request)}", f"workflow.{run_id}.event")
    try:
        try:
            await views.get_run(run_id)
        except (NotFound, InvalidInput):
            yield f"event: run_absent\ndata: {json.dumps({'run_id': run_id})}\n\n".encode()
            return
        last = after_seq
        while True:
            rows = await views.timeline(run_id, last, EVENTS_PAGE)
            for row in rows:
                yield _frame(row)
                last = row.seq
            if len(rows) < EVENTS_PAGE:
                break
        if not views.driving(run_id):
            return  # nothing is driving it: the timeline is complete
        while not await request.is_disconnected():
            event = await bus.next_event(sub, KEEPALIVE_S)
            if event is None:
                yield b": keepalive\n\n"
                if not views.driving(run_id):
                    return
                continue
            if not isinstance(event, WorkflowEvent) or event.seq <= last:
                continue
            yield _frame(event.timeline_entry())
            last = event.seq
            if event.ends_drive:
                return
    finally:
        bus.close_stream(sub)


# --- one spec by name (after the /runs routes) ------------------------------------------------
@router.get("/{name}", responses=answers(404, 409, 422))
async def get_spec(request: Request, name: SpecName) -> dict:
    return service(request).catalog.get(name)


@router.delete("/{name}", responses=answers(404, 409, 422))
async def delete_spec(request: Request, name: SpecName) -> dict:
    spec = service(request).catalog.delete(name)
    return {"success": True, "name": spec.name}
