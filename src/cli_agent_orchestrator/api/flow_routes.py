"""HTTP routes for scheduled flows: add (a flow file on the server's machine, or fields that
become `<cao home>/flows/<name>.flow.md`), list, get, enable, disable, remove, run now, and
each flow's runs. Bad input (a name, a cron expression, a profile, a gate script) is a 400
with the reason; an unknown flow is a 404.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, status
from pydantic import BaseModel, ConfigDict, Field

from ..errors import InvalidInput
from ..flows.service import FlowService
from .errors import EVERY_ROUTE, answers
from .limits import StrictJsonRoute
from .schemas import FLOW_NAME, HOST_DESCRIPTION, MAX_NAME, MAX_PATH, PROFILE_NAME, given, refused, stated

router = APIRouter(prefix="/flows", tags=["flows"], route_class=StrictJsonRoute, responses=EVERY_ROUTE)

FlowName = Annotated[str, Path(max_length=64, json_schema_extra=FLOW_NAME)]
READS = answers(404, 422, 503)
MAX_PROMPT = 256 * 1024


def service(request: Request) -> FlowService:
    return request.app.state.runtime.flows


class FlowOut(BaseModel):
    """A flow as added, and its schedule: times are ISO 8601 in the flow's time zone."""

    name: str
    file_path: str
    schedule: str
    timezone: str
    timezone_source: str = Field(description="flow (its `timezone`) or server (the server's local zone)")
    agent_profile: str
    provider: str | None
    script: str | None
    engine: str | None
    host: str | None = Field(None, description="the registered host its agent runs on; null: the placement policy")
    timeout: float
    description: str
    prompt_template: str
    enabled: bool
    last_run: str | None
    next_run: str | None
    session_name: str
    running_run_id: int | None
    missed_runs: str = Field(description="once: a due time missed while the server was down runs once at start-up")
    error: str | None = Field(description="why the flow cannot be scheduled now, if it cannot")


class FlowRunOut(BaseModel):
    """One run: state running, completed, skipped, failed or interrupted; `reason` says why
    it was skipped or failed; `reply` is the agent's answer."""

    id: int
    flow_name: str
    trigger: str
    state: str
    started_at: str
    due_at: str | None
    finished_at: str | None
    execute: bool | None
    gate_output: dict[str, Any] | None
    reason: str | None
    session_name: str | None
    terminal_id: str | None
    prompt: str | None
    reply: str | None


class RunAnswer(BaseModel):
    executed: bool = Field(description="the agent gets the prompt (false: skipped, or failed before it)")
    run: FlowRunOut


_FLOW_FIELDS = (
    "name",
    "schedule",
    "agent_profile",
    "provider",
    "prompt_template",
    "script",
    "timezone",
    "engine",
    "host",
    "timeout",
    "description",
)


class AddBody(BaseModel):
    """Either `path` (a flow file on the server's machine, what `cao flow add FILE` sends) or
    the fields of a flow (`name`, `schedule`, `agent_profile`, `prompt_template`, ...)."""

    # add_flow's rule, stated: `path` and nothing else, or the flow's fields with at least these four.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "oneOf": [
                {"allOf": given("path"), "not": {"anyOf": given(*_FLOW_FIELDS)}},
                {
                    "allOf": given("name", "schedule", "agent_profile", "prompt_template"),
                    "not": {"anyOf": given("path")},
                },
            ]
        },
    )
    path: str | None = Field(None, min_length=1, max_length=MAX_PATH)
    name: str | None = Field(None, max_length=64, json_schema_extra=FLOW_NAME)
    schedule: str | None = Field(None, max_length=200, json_schema_extra=stated(minLength=1))
    agent_profile: str | None = Field(None, max_length=MAX_NAME, json_schema_extra=PROFILE_NAME)
    provider: str | None = Field(None, max_length=MAX_NAME)
    prompt_template: str | None = Field(None, max_length=MAX_PROMPT)
    script: str | None = Field(None, max_length=MAX_PATH, description="gate script; relative to the flows directory")
    timezone: str | None = Field(None, max_length=64)
    engine: str | None = Field(None, max_length=16)
    host: str | None = Field(None, max_length=MAX_NAME, description=HOST_DESCRIPTION)  # checked by parse_flow: 400
    timeout: float | None = Field(None, gt=0, le=86400)
    description: str | None = Field(None, max_length=4096)


@router.get("", responses=answers(503))
async def list_flows(request: Request) -> list[FlowOut]:
    """Every flow, the next due first."""
    return [FlowOut(**f) for f in await service(request).list()]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={
        **answers(422, 503),
        **refused(
            "a schedule that is not a 5-field cron expression; a time zone, profile, provider, gate script or "
            "host that does not exist; a flow file that is not there or does not parse"
        ),
    },
)
async def add_flow(request: Request, body: AddBody) -> FlowOut:
    """Add a flow (or replace the one of that name; its runs stay). It is enabled."""
    svc = service(request)
    fields = body.model_dump(exclude={"path", "prompt_template"})
    if body.path is not None:
        given = sorted(k for k, v in fields.items() if v is not None)
        if given or body.prompt_template is not None:
            raise InvalidInput(f"give either `path` or the flow's fields, not both (also given: {', '.join(given)})")
        return FlowOut(**await svc.add_file(body.path))
    if body.prompt_template is None:
        raise InvalidInput("give `path` (a flow file), or `name`, `schedule`, `agent_profile` and `prompt_template`")
    return FlowOut(**await svc.add_fields(fields, body.prompt_template))


@router.get("/{name}", responses=READS)
async def get_flow(request: Request, name: FlowName) -> FlowOut:
    return FlowOut(**await service(request).get(name))


@router.delete("/{name}", responses=READS)
async def remove_flow(request: Request, name: FlowName) -> dict:
    """Remove the flow and its runs (its file stays; a run in progress goes on)."""
    await service(request).remove(name)
    return {"success": True}


@router.post("/{name}/enable", responses=READS)
async def enable_flow(request: Request, name: FlowName) -> dict:
    """Due times from now on run again (none that passed while it was disabled)."""
    await service(request).set_enabled(name, True)
    return {"success": True}


@router.post("/{name}/disable", responses=READS)
async def disable_flow(request: Request, name: FlowName) -> dict:
    await service(request).set_enabled(name, False)
    return {"success": True}


@router.post("/{name}/run", responses=READS)
async def run_flow(request: Request, name: FlowName, wait: bool = False) -> RunAnswer:
    """Fire the flow now, enabled or not. Answers when the gate has decided (the run goes on
    in the background), or with `wait=true` when the run has ended. A flow still running is
    not started twice: that answer is a skipped run."""
    run = await service(request).run_now(name, wait)
    executed = run.prompt is not None and run.state != "skipped"
    return RunAnswer(executed=executed, run=FlowRunOut(**run.as_json()))


@router.get("/{name}/runs", responses=READS)
async def flow_runs(
    request: Request, name: FlowName, limit: Annotated[int, Query(ge=1, le=200)] = 20
) -> list[FlowRunOut]:
    """The flow's runs, newest first."""
    return [FlowRunOut(**r) for r in await service(request).runs(name, limit)]
