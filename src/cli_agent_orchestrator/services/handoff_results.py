"""Durable handoffs: a handoff runs as a job of cao-server, not inside its caller's call. The call
waits for it a while (its `wait`), then answers `pending` with the job's id, and the work goes on;
`GET /handoff-results/{job_id}` (MCP `get_handoff_result`, `cao agent result`) gives its result
once it has one.

Invariants: a job's result is kept in the store (handoffs.result) as soon as it exists, and is
handed out exactly once — to the waiting call, a later read, or, when nobody asks for it within
`unclaimed_s` (CAO_HANDOFF_UNCLAIMED_SECONDS, 60), the caller's inbox. Only the job's caller (or
the user) may read or cancel it. A result not read within RESULT_TTL_S of the job's end has
expired. After a restart of
cao-server, a job whose worker survived is adopted again (its result is still delivered);
handoffs.py tears down the rest.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from ..bus import EventBus
from ..errors import CaoError, Forbidden, NotFound
from ..models import TerminalStatus, Worktree
from ..store import Store
from ..store.handoffs import OPEN_STATES, HandoffRecord, HandoffTables
from .inbox import SYSTEM_SENDER, InboxService
from .orchestration import OrchestrationService, StepRequest, StepResult
from .status.monitor import StatusMonitor
from .waiting import TerminalVanished, wait_for

log = logging.getLogger(__name__)

RESULT_TTL_S = 24 * 3600.0  # an unread result expires this long after its job ended
MAX_WAIT_S = 3700.0


class HandoffResults:
    def __init__(
        self,
        store: Store,
        tables: HandoffTables,
        orchestration: OrchestrationService,
        inbox: InboxService,
        bus: EventBus,
        monitor: StatusMonitor,
        spawn: Callable[[Coroutine[Any, Any, Any], str], object],
        unclaimed_s: float = 60.0,  # a finished job nobody has asked about goes to its caller's inbox after this
    ):
        self.store, self.tables, self.orchestration = store, tables, orchestration
        self.unclaimed_s = unclaimed_s
        self.inbox, self.bus, self.monitor, self.spawn = inbox, bus, monitor, spawn
        self._finished: dict[str, asyncio.Event] = {}  # jobs of this process, set once they have a result
        self._waiting: dict[str, int] = {}  # how many calls wait for each job right now
        # Results of jobs that ended before their record existed (refused at once: a bad profile).
        self._unrecorded: dict[str, tuple[str | None, dict[str, Any]]] = {}

    # --- starting and reading ------------------------------------------------------------
    def start(self, req: StepRequest) -> str:
        """Start the handoff as a job; its id. Its answer, once kept, is `{"http_status": 200,
        "step": <StepResult fields>}` or `{"http_status": N, "body": {"detail": ...}}`."""
        job_id = req.job_id = uuid.uuid4().hex[:12]
        self._finished[job_id] = asyncio.Event()
        self.spawn(self._run(job_id, req), f"handoff-job:{job_id}")
        return job_id

    async def result(self, job_id: str, reader: str | None, wait: float) -> dict[str, Any]:
        """The job's answer if it has one and nobody has had it (then nobody else will), else
        its state: `{status: pending|delivered|...}`. `reader`: the calling terminal, None for
        the user. Waits up to `wait` seconds for an answer."""
        record = await self._readable(job_id, reader)
        if job_id not in self._unrecorded and (
            record is None or (record.result is None and record.state in OPEN_STATES)
        ):
            event = self._finished.get(job_id)
            if event is not None:
                self._waiting[job_id] = self._waiting.get(job_id, 0) + 1
                try:
                    async with asyncio.timeout(max(0.0, min(wait, MAX_WAIT_S))):
                        await event.wait()
                except TimeoutError:
                    pass
                finally:
                    left = self._waiting.get(job_id, 1) - 1
                    if left > 0:
                        self._waiting[job_id] = left
                    else:
                        self._waiting.pop(job_id, None)
            record = await self._readable(job_id, reader)
        if job_id in self._unrecorded:
            caller, answer = self._unrecorded[job_id]
            if reader is None or reader == caller:
                del self._unrecorded[job_id]
                return {"status": "failed", "job_id": job_id, "answer": answer}
        if record is None:
            return {"status": "pending", "job_id": job_id, "state": "starting", "terminal_id": None}
        if record.result is not None and record.delivered_at is None:
            if await self.store.run(self.tables.deliver, job_id):
                return {"status": record.state.value, "job_id": job_id, "answer": json.loads(record.result)}
            record = await self._readable(job_id, reader)
            assert record is not None
        if record.delivered_at is not None:
            return {"status": "delivered", "job_id": job_id, "delivered_at": record.delivered_at}
        if record.state in OPEN_STATES:
            return {
                "status": "pending",
                "job_id": job_id,
                "state": record.state.value,
                "terminal_id": record.terminal_id,
            }
        # Ended without an answer kept (cancelled, or a job of an earlier cao-server).
        return {"status": record.state.value, "job_id": job_id, "error": record.error}

    async def cancel(self, job_id: str, reader: str | None) -> dict[str, Any]:
        """Stop a running job: its worker is removed and the job ends `failed`."""
        record = await self._readable(job_id, reader)
        if record is None or record.state not in OPEN_STATES:
            return {"cancelled": False, "job_id": job_id, "reason": "the handoff has already ended"}
        if record.terminal_id:
            try:
                await self.orchestration.terminals.delete(record.terminal_id)
            except CaoError as exc:
                log.warning("cancel of handoff %s: %s", job_id, exc)
        await self.orchestration.jobs.close(job_id, "cancelled by its caller")
        return {"cancelled": True, "job_id": job_id}

    async def _readable(self, job_id: str, reader: str | None) -> HandoffRecord | None:
        record = await self.store.run(self.tables.get, job_id)
        if record is None:
            if job_id in self._unrecorded or job_id in self._finished:
                return None  # refused before its record existed, or about to have one
            raise NotFound(f"no handoff job {job_id!r} (unknown, or its result expired)")
        if reader is not None and record.caller_id != reader:
            raise Forbidden(f"handoff job {job_id} belongs to another caller")
        if record.finished_at and record.delivered_at is None and _age_s(record.finished_at) > RESULT_TTL_S:
            raise NotFound(f"no handoff job {job_id!r} (unknown, or its result expired)")
        return record

    # --- running ---------------------------------------------------------------------------
    async def _run(self, job_id: str, req: StepRequest) -> None:
        try:
            answer: dict[str, Any] = {"http_status": 200, "step": step_fields(await self.orchestration.run_step(req))}
        except CaoError as exc:
            answer = {"http_status": exc.http_status, "body": {"detail": exc.detail()}}
        except Exception as exc:  # noqa: BLE001 - the job must end with an answer whatever happened
            log.exception("handoff job %s failed", job_id)
            answer = {"http_status": 500, "body": {"detail": f"internal error: {type(exc).__name__}"}}
        await self._keep(job_id, req.caller_id, answer)

    async def _keep(self, job_id: str, caller_id: str | None, answer: dict[str, Any]) -> None:
        if not await self.store.run(self.tables.set_result, job_id, json.dumps(answer)):
            if await self.store.run(self.tables.get, job_id) is None:
                self._unrecorded[job_id] = (caller_id, answer)
        event = self._finished.pop(job_id, None)
        if event is not None:
            event.set()
        if caller_id and not self._waiting.get(job_id):
            self.spawn(self._unclaimed(job_id, caller_id), f"handoff-unclaimed:{job_id}")

    async def _unclaimed(self, job_id: str, caller_id: str) -> None:
        """Nobody asked for the result: after `unclaimed_s` it goes to the caller's inbox."""
        await asyncio.sleep(self.unclaimed_s)  # a grace period for get_handoff_result, not a sync
        record = await self.store.run(self.tables.get, job_id)
        if record is None or record.result is None or record.delivered_at is not None:
            return
        if not await self.store.run(self.tables.deliver, job_id):
            return
        answer = json.loads(record.result)
        step, body = answer.get("step"), answer.get("body") or {}
        note = (
            f"[cao] Result of handoff job {job_id} ({record.agent}):\n{step['last_message']}"
            if step
            else f"[cao] Handoff job {job_id} ({record.agent}) ended without a reply: {body.get('detail')}"
        )
        try:
            await self.inbox.post(caller_id, SYSTEM_SENDER, note)
        except CaoError as exc:
            log.warning("could not deliver handoff job %s to %s: %s", job_id, caller_id, exc)

    # --- after a restart -------------------------------------------------------------------
    async def adopt(self, record: HandoffRecord) -> None:
        """A job whose worker survived a restart: wait for its answer and keep it, as the job
        would have (the call that waited for it died with the previous server)."""
        tid = record.terminal_id
        assert tid is not None
        self._finished[record.job_id] = asyncio.Event()  # readers wait on it; _keep sets it
        remaining = max(1.0, (_parse(record.deadline) - datetime.now(UTC)).total_seconds())

        def done(status: TerminalStatus, _turn: int, settled: bool) -> bool:
            return settled and status in (TerminalStatus.COMPLETED, TerminalStatus.ERROR)

        try:
            status = await wait_for(self.bus, self.monitor, tid, done, remaining)
            if status == TerminalStatus.COMPLETED:
                reply = await self.orchestration.terminals.output(tid, "last")
                term = await self.orchestration.terminals.get(tid)
                result = StepResult(tid, reply, "completed", 0.0, term.provider, term.worktree, term.host)
                answer = {"http_status": 200, "step": step_fields(result)}
                error = None
            else:
                reason = "did not finish before its deadline" if status is None else "reached error"
                error = f"worker {tid} {reason}"
                answer = {"http_status": 502, "body": {"detail": error}}
        except (TerminalVanished, CaoError) as exc:
            error = f"worker {tid} was lost: {exc}"
            answer = {"http_status": 502, "body": {"detail": error}}
        await self.orchestration.jobs.close(record.job_id, error)
        try:
            await self.orchestration.terminals.delete(tid)
        except CaoError:
            pass  # already gone
        await self._keep(record.job_id, record.caller_id, answer)


def step_fields(result: StepResult) -> dict[str, Any]:
    return {**asdict(result), "worktree": asdict(result.worktree) if result.worktree else None}


def step_of(fields: dict[str, Any]) -> StepResult:
    worktree = fields.get("worktree")
    return StepResult(**{**fields, "worktree": Worktree(**worktree) if worktree else None})


def _parse(stamp: str) -> datetime:
    parsed = datetime.fromisoformat(stamp)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _age_s(stamp: str) -> float:
    return (datetime.now(UTC) - _parse(stamp)).total_seconds()
