"""POST /terminals/run-step: one agent step in one call (create, wait ready, task, wait done,
reply, tear down): what MCP `handoff` and workflow steps use (core contract §3.5)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from ..errors import InvalidInput, Unprocessable
from ..services.orchestration import StepRequest
from ..services.terminals.engines import terminal_engine
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


@router.post("/terminals/run-step", responses={**CREATES, **answers(409), **refused(SPAWN_REFUSALS)})
async def run_step(request: Request, body: RunStepBody) -> dict:
    fields = body.model_dump(exclude={"env_vars", "recovery"})
    if body.use_worktree and body.reuse_terminal_id is not None:
        raise InvalidInput(
            "use_worktree and reuse_terminal_id cannot be combined: the reused terminal has its directory"
        )
    if body.host is not None and body.reuse_terminal_id is not None:
        raise InvalidInput("host and reuse_terminal_id cannot be combined: the reused terminal runs where it runs")
    if body.env_vars is None:
        result = await rt(request).orchestration.run_step(StepRequest(**fields))
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
    if body.reuse_terminal_id is not None:
        raise Unprocessable(
            "env_vars and reuse_terminal_id cannot be combined: a workflow step "
            "always runs in a fresh terminal of its own"
        )
    identity = parse_identity(body.env_vars)
    return await rt(request).step_gate.run(identity, StepRequest(**fields), body.recovery)
