"""POST /terminals/run-step: one agent step in one call (create, wait ready, task, wait done,
reply, tear down): what MCP `handoff` and workflow steps use (core contract §3.5)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ..errors import InvalidInput, Unprocessable
from ..services.handoff_results import step_of
from ..services.orchestration import StepRequest, StepResult
from ..services.terminals.engines import terminal_engine
from ..services.terminals.labels import checked_description
from ..workflows.script_steps import parse_identity
from ..workflows.step_execution import GENERATION_VAR, IDENTITY_VARS, RUN_ID_VAR, STEP_ID_VAR
from .errors import EVERY_ROUTE, answers
from .limits import StrictJsonRoute
from .routes import (
    CREATES,
    SPAWN_REFUSALS,
    rt,
)
from .schemas import (
    DESCRIPTION,
    HOST_DESCRIPTION,
    HOST_PATTERN,
    MAX_NAME,
    MAX_PATH,
    MAX_TEXT,
    MODEL_NAME,
    NEW_SESSION_NAME,
    PROFILE_NAME,
    WORKFLOW_NAME,
    WorktreeOut,
    given,
    refused,
    stated,
)

router = APIRouter(route_class=StrictJsonRoute, responses=EVERY_ROUTE)

# --- one agent step (MCP handoff, workflow steps) --------------------------------------
_STEP_ID = {"type": "string", "pattern": WORKFLOW_NAME["pattern"]}
STEP_IDENTITY = stated(
    required=list(IDENTITY_VARS),
    additionalProperties=False,
    properties={
        RUN_ID_VAR: _STEP_ID,
        GENERATION_VAR: {"type": "string", "pattern": "^[0-9]{1,12}$"},
        STEP_ID_VAR: _STEP_ID,
    },
)


class RunStepBody(BaseModel):
    """One agent step. With `env_vars` (a workflow step's identity) the call goes through
    the workflow journal and the resume gate; without, it simply runs."""

    # run_step's rules, stated: what a reused terminal cannot be combined with.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "not": {
                "anyOf": [
                    {"allOf": given("env_vars", "reuse_terminal_id")},
                    {"allOf": given("host", "reuse_terminal_id")},
                    {
                        "allOf": [
                            {"required": ["use_worktree"], "properties": {"use_worktree": {"const": True}}},
                            *given("reuse_terminal_id"),
                        ]
                    },
                ]
            }
        },
    )
    provider: str | None = Field(None, max_length=MAX_NAME)
    agent: str = Field(..., min_length=1, max_length=64, json_schema_extra=PROFILE_NAME)
    prompt: str = Field(..., min_length=1, max_length=MAX_TEXT)
    session_name: str | None = Field(None, max_length=MAX_NAME, json_schema_extra=NEW_SESSION_NAME)
    teardown: bool = True
    timeout: float = Field(600.0, gt=0, le=86400, allow_inf_nan=False)
    working_directory: str | None = Field(None, max_length=MAX_PATH)
    caller_id: str | None = Field(None, pattern=r"^[a-f0-9]{8}$")
    allowed_tools: list[Annotated[str, Field(max_length=MAX_PATH)]] | None = Field(None, max_length=256)
    model: str | None = Field(None, max_length=MAX_NAME, json_schema_extra=MODEL_NAME)
    # Checked by parse_identity (422), values never echoed.
    env_vars: dict[str, object] | None = Field(None, json_schema_extra=STEP_IDENTITY)
    recovery: Literal["idempotent", "reconcile", "manual"] | None = None
    reuse_terminal_id: str | None = Field(None, pattern=r"^[a-f0-9]{8}$")
    use_worktree: bool = False
    engine: str | None = Field(None, max_length=MAX_NAME)  # checked by the spawner: 400, not 422
    host: str | None = Field(None, pattern=HOST_PATTERN, description=HOST_DESCRIPTION)
    description: str | None = Field(None, json_schema_extra=DESCRIPTION)  # the worker's (a 422 when too long)
    # A durable handoff: the step runs as a job of cao-server; the call waits this long for it, then
    # answers 202 `{status: "pending", job_id}` and the work goes on (GET /handoff-results/{job_id}).
    wait: float | None = Field(None, ge=0, le=3700, allow_inf_nan=False)  # a whole 3600 s job and its teardown


def step_answer(result: StepResult) -> dict:
    """What a step answers: the worker's reply and where it ran."""
    return {
        "terminal_id": result.terminal_id,
        "last_message": result.last_message,
        "status": result.status,
        "replayed": False,
        "elapsed": round(result.elapsed, 3),
        "provider": result.provider,
        "engine": terminal_engine(result.provider) if result.provider else None,
        "worktree": WorktreeOut.of(result.worktree).model_dump() if result.worktree else None,
        "host": result.host,
    }


def job_answer(outcome: dict) -> dict | JSONResponse:
    """A durable handoff's call: its step's own answer (or error) once the job has one, else 202
    `{status: "pending", job_id, state, terminal_id}`."""
    job_id = outcome["job_id"]
    answer = outcome.get("answer")
    if answer is None:
        return JSONResponse(
            {**outcome, "status": "pending" if outcome["status"] == "pending" else outcome["status"]}, 202
        )
    if answer.get("step") is not None:
        return {**step_answer(step_of(answer["step"])), "job_id": job_id}
    return JSONResponse({**answer["body"], "job_id": job_id}, answer["http_status"])


class JobPending(BaseModel):
    """A durable handoff still at work when its call's `wait` ran out."""

    status: str = Field(description="pending (or the job's state when it ended without an answer)")
    job_id: str
    state: str | None = None
    terminal_id: str | None = None


PENDING: dict[int | str, dict[str, Any]] = {
    202: {"model": JobPending, "description": "With `wait`: the job is still at work; read it later"}
}


@router.post(
    "/terminals/run-step",
    response_model=None,
    responses={
        200: {"description": "The step's answer"},
        **PENDING,
        **CREATES,
        **answers(409),
        **refused(SPAWN_REFUSALS),
    },
)
async def run_step(request: Request, body: RunStepBody) -> dict | JSONResponse:
    fields = body.model_dump(exclude={"env_vars", "recovery"})
    fields["description"] = checked_description(body.description)  # before any record of the step
    if body.use_worktree and body.reuse_terminal_id is not None:
        raise InvalidInput(
            "use_worktree and reuse_terminal_id cannot be combined: the reused terminal has its directory"
        )
    if body.host is not None and body.reuse_terminal_id is not None:
        raise InvalidInput("host and reuse_terminal_id cannot be combined: the reused terminal runs where it runs")
    wait = fields.pop("wait")
    if body.env_vars is None and wait is not None and body.reuse_terminal_id is None:
        results = rt(request).handoff_results
        job_id = results.start(StepRequest(**fields))
        return job_answer(await results.result(job_id, None, wait))
    if body.env_vars is None:
        return step_answer(await rt(request).orchestration.run_step(StepRequest(**fields)))
    if body.reuse_terminal_id is not None:
        raise Unprocessable(
            "env_vars and reuse_terminal_id cannot be combined: a workflow step "
            "always runs in a fresh terminal of its own"
        )
    identity = parse_identity(body.env_vars)
    return await rt(request).step_gate.run(identity, StepRequest(**fields), body.recovery)
