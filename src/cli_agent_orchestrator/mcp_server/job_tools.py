"""Durable handoffs' tools: `get_handoff_result` and `cancel_handoff` (the calls behind a
`pending` handoff), a part of the agent tools (tools.py) kept in a module of its own."""

from __future__ import annotations

import re
from typing import Any

from ..clients.aio import CANCELLABLE, CaoApi

Result = dict[str, Any]
HANDOFF_HTTP_MARGIN = 60.0  # as tools.py's

JOB_ID_RE = re.compile(r"[a-f0-9]{12}")


def job_wait(timeout: int, wait: float) -> float:
    """How long a handoff's call waits for its job: `wait`, or, when that is not shorter than the
    handoff's own `timeout`, the whole job (its worker's start-up and teardown too)."""
    return float(wait) if wait < timeout else float(timeout) + HANDOFF_HTTP_MARGIN / 2


def pending(body: dict, agent_profile: str | None) -> Result:
    """A durable handoff still at work: how to get its result."""
    job_id = body.get("job_id")
    who = f" to {agent_profile}" if agent_profile else ""
    return {
        "success": True,
        "status": "pending",
        "job_id": job_id,
        "terminal_id": body.get("terminal_id"),
        "output": None,
        "message": f"The handoff{who} is still running (job {job_id}); the work goes on. Call "
        f"get_handoff_result('{job_id}') for its result (it waits for it a while), or "
        "cancel_handoff to stop it. Unread for a minute after it ends, the result comes to you as a message.",
    }


class HandoffJobTools:
    """Mixed into Tools: `api` and `_me` are its."""

    api: CaoApi

    def _me(self) -> tuple[str | None, str | None]:
        raise NotImplementedError

    async def get_handoff_result(self, job_id: str, wait: int = 30) -> Result:
        """A durable handoff's result (once), or its state."""

        def fail(text: str, status: str = "error") -> Result:
            return {"success": False, "status": status, "job_id": job_id, "message": text, "output": None}

        if not isinstance(job_id, str) or not JOB_ID_RE.fullmatch(job_id):
            return fail(f"invalid job_id {job_id!r}: expected 12 lowercase hex characters")
        if isinstance(wait, bool) or not isinstance(wait, int) or not 0 <= wait <= 3600:
            return fail(f"wait must be between 0 and 3600 seconds, got {wait!r}")
        me, error = self._me()
        if error:
            return fail(error)
        resp = await self.api.get(
            f"/handoff-results/{job_id}",
            params={"caller_id": me, "wait": wait},
            timeout=wait + HANDOFF_HTTP_MARGIN,
            headers={CANCELLABLE: "1"},
        )
        if not (resp.ok and isinstance(resp.body, dict)):
            return fail(resp.error or "unexpected answer from cao-server")
        state = resp.body.get("status")
        if state == "completed":
            step = resp.body["result"]
            return {
                "success": True,
                "status": "completed",
                "job_id": job_id,
                "message": f"Handoff job {job_id} finished (worker {step.get('terminal_id')})",
                "output": step.get("last_message"),
                "terminal_id": step.get("terminal_id"),
            }
        if state == "pending":
            return pending(resp.body, None)
        if state == "delivered":
            return fail(
                f"the result of handoff job {job_id} was already delivered ({resp.body.get('delivered_at')})", state
            )
        return fail(f"handoff job {job_id} ended without a reply: {resp.body.get('error')}", str(state))

    async def cancel_handoff(self, job_id: str) -> Result:
        if not isinstance(job_id, str) or not JOB_ID_RE.fullmatch(job_id):
            return {"success": False, "message": f"invalid job_id {job_id!r}: expected 12 lowercase hex characters"}
        me, error = self._me()
        if error:
            return {"success": False, "message": error}
        resp = await self.api.post(f"/handoff-results/{job_id}/cancel", params={"caller_id": me})
        if not (resp.ok and isinstance(resp.body, dict)):
            return {"success": False, "message": resp.error or "unexpected answer from cao-server"}
        done = bool(resp.body.get("cancelled"))
        return {
            "success": done,
            "job_id": job_id,
            "message": f"Handoff job {job_id} cancelled: its worker was removed"
            if done
            else f"Handoff job {job_id} not cancelled: {resp.body.get('reason')}",
        }
