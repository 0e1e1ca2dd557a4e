"""Durable handoffs' results: `GET /handoff-results/{job_id}` gives a job's answer once (then
`delivered`), or its state; `POST /handoff-results/{job_id}/cancel` stops it. `caller_id` is who
asks: the MCP tools pass the proven calling agent, and a job answers only its own caller (the
user, asking without `caller_id`, may read any). services/handoff_results.py holds the rules."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request

from ..services.handoff_results import step_of
from .errors import EVERY_ROUTE, answers
from .limits import StrictJsonRoute
from .routes import rt
from .step_routes import step_answer

router = APIRouter(route_class=StrictJsonRoute, responses=EVERY_ROUTE)

JobId = Annotated[str, Path(pattern=r"^[a-f0-9]{12}$", description="A handoff job's id (12 lowercase hex)")]
CallerId = Annotated[
    str | None, Query(pattern=r"^[a-f0-9]{8}$", description="The asking terminal: only the job's caller may read it")
]
Wait = Annotated[float, Query(ge=0, le=3600, allow_inf_nan=False, description="Seconds to wait for an answer")]


@router.get("/handoff-results/{job_id}", response_model=None, responses=answers(404, 422))
async def handoff_result(request: Request, job_id: JobId, caller_id: CallerId = None, wait: Wait = 0) -> dict[str, Any]:
    """`{status, job_id, …}`: with the answer (`result` or `error`, once), or the job's state
    (`pending`, `delivered`, `failed`…)."""
    outcome = await rt(request).handoff_results.result(job_id, caller_id, wait)
    answer = outcome.pop("answer", None)
    if answer is None:
        return outcome
    if answer.get("step") is not None:
        return {**outcome, "status": "completed", "result": step_answer(step_of(answer["step"]))}
    return {**outcome, "status": "failed", "http_status": answer["http_status"], "error": answer["body"].get("detail")}


@router.post("/handoff-results/{job_id}/cancel", responses=answers(404, 422))
async def cancel_handoff(request: Request, job_id: JobId, caller_id: CallerId = None) -> dict[str, Any]:
    """Stop a running job: its worker is removed, the job ends `failed`."""
    return await rt(request).handoff_results.cancel(job_id, caller_id)
