"""One step call of a workflow script (`POST /terminals/run-step` with identity
env_vars): the generation fence, the resume gate, and the journaled execution.

Order per call: fence (unknown run, stale generation, run not being driven, key
already used in this drive) → gate verdict → replay, halt, diverge, or claim the
step in the journal *before* anything runs, execute, and settle the result.
"""
from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, replace
from typing import Any

from ..errors import CaoError, NotFound, Unprocessable, WaitTimeout, WorkflowConflict
from ..store import Store
from ..store.journal import stamp
from ..workflows import gate
from .orchestration import OrchestrationService, StepRequest
from .workflow_state import RunRegistry, Timeline

log = logging.getLogger(__name__)

RUN_ID_VAR, GENERATION_VAR, STEP_ID_VAR = "CAO_WORKFLOW_RUN_ID", "CAO_WORKFLOW_GENERATION", "CAO_WORKFLOW_STEP_ID"
IDENTITY_VARS = (RUN_ID_VAR, GENERATION_VAR, STEP_ID_VAR)
ID_RE = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")
# A stored reply beyond this is kept truncated, and the step then counts as lossy.
MAX_ENVELOPE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class StepIdentity:
    run_id: str
    generation: str
    step_id: str


def parse_identity(env_vars: dict[str, object]) -> StepIdentity:
    """Check the identity env_vars. Messages name variables, never their values."""
    bad = sorted(k for k, v in env_vars.items() if not isinstance(v, str))
    if bad:
        raise Unprocessable("env_vars values must be strings: " + ", ".join(k[:64] for k in bad))
    unknown = sorted(k for k in env_vars if k not in IDENTITY_VARS)
    if unknown:
        raise Unprocessable(f"env_vars accepts only {', '.join(IDENTITY_VARS)}; unexpected: "
                            + ", ".join(k[:64] for k in unknown))
    missing = [k for k in IDENTITY_VARS if not env_vars.get(k)]
    if missing:
        raise Unprocessable(f"env_vars is missing {', '.join(missing)}")
    if not ID_RE.fullmatch(str(env_vars[RUN_ID_VAR])):
        raise Unprocessable(f"{RUN_ID_VAR} must be 1-64 of [A-Za-z0-9_-]")
    if not ID_RE.fullmatch(str(env_vars[STEP_ID_VAR])):
        raise Unprocessable(f"{STEP_ID_VAR} must be 1-64 of [A-Za-z0-9_-] (no ':' or spaces)")
    generation = str(env_vars[GENERATION_VAR])
    if not re.fullmatch(r"[0-9]{1,12}", generation):  # ASCII digits: str.isdigit() also takes "²"
        raise Unprocessable(f"{GENERATION_VAR} must be a positive integer")
    return StepIdentity(str(env_vars[RUN_ID_VAR]), str(env_vars[GENERATION_VAR]), str(env_vars[STEP_ID_VAR]))


def step_answer(terminal_id: str | None, last_message: str, status: str, replayed: bool,
                step_id: str) -> dict[str, Any]:
    return {"terminal_id": terminal_id, "last_message": last_message, "status": status,
            "replayed": replayed, "step_id": step_id}


def make_envelope(terminal_id: str | None, last_message: str, status: str) -> dict[str, Any]:
    data = last_message.encode("utf-8")
    truncated = len(data) > MAX_ENVELOPE_BYTES
    if truncated:
        last_message = data[:MAX_ENVELOPE_BYTES].decode("utf-8", "ignore")
    return {"last_message": last_message, "status": status, "terminal_id": terminal_id,
            "truncated": truncated}


class StepGate:
    def __init__(self, store: Store, registry: RunRegistry, timeline: Timeline,
                 orchestration: OrchestrationService):
        self.store, self.registry, self.timeline = store, registry, timeline
        self.orchestration = orchestration

    async def run(self, ident: StepIdentity, req: StepRequest, policy: str | None) -> dict[str, Any]:
        journal = self.store.journal
        call_fp = gate.fingerprint(gate.execution_fields(
            provider=req.provider, agent=req.agent, prompt=req.prompt, model=req.model,
            allowed_tools=req.allowed_tools, working_directory=req.working_directory))
        run_id, step_id = ident.run_id, ident.step_id
        async with self.registry.lock(run_id):
            run, step, decision = await self.store.run(journal.gate_inputs, run_id, step_id)
            if run is None:
                raise NotFound(f"unknown workflow run {run_id!r}")
            generation = run["generation"]
            if str(generation) != ident.generation:
                raise WorkflowConflict(
                    f"run '{run_id}': stale call fenced off: the call carried generation "
                    f"'{ident.generation}' but the run's current generation is '{generation}'",
                    "stale_generation", run_id=run_id, step_id=step_id)
            drive = self.registry.drives.get(run_id)
            if run["state"] != "running" or drive is None or drive.generation != generation:
                raise WorkflowConflict(f"run '{run_id}' is {run['state']} and not being driven; "
                                       "no step can run in it now", "run_not_active",
                                       run_id=run_id, step_id=step_id)
            if step_id in drive.keys:
                raise WorkflowConflict(
                    f"run '{run_id}': step key '{step_id}' was already used in this drive; "
                    "every step call needs its own key (pass a distinct step_id)",
                    "duplicate_step_id", run_id=run_id, step_id=step_id)
            drive.keys.add(step_id)
            record = None if step is None else gate.StepRecord(
                step["state"], step["fingerprint"], step["fingerprint_scheme"], step["policy"],
                step["envelope"], step["error_kind"])
            verdict = gate.decide(record, call_fp, policy, decision)

            if verdict.outcome in ("halt", "diverged"):
                await self._halt(run_id, step_id, generation, verdict, drive)
            if verdict.outcome == "replay":
                return await self._replay(run_id, step_id, generation, step, verdict)
            await self.store.run(lambda: journal.claim_step(
                run_id, step_id, generation=generation, fingerprint=call_fp,
                scheme=gate.FINGERPRINT_SCHEME, policy=policy, consumes=verdict.consumes))
            attempt = (step["attempts"] if step else 0) + 1
            await self.timeline.record(run_id, "step.started", step_id, generation, attempt=attempt,
                                       reason=verdict.reason, policy=policy)
        # The execution runs as its own task: if the script's connection drops (it was
        # killed), the step still settles in the journal and a resume can replay it.
        task = asyncio.ensure_future(self._execute(run_id, step_id, generation, req))
        self.registry.track(run_id, task)
        return await asyncio.shield(task)

    async def _halt(self, run_id: str, step_id: str, generation: int, verdict: gate.Verdict,
                    drive: Any) -> None:
        kind = "diverged" if verdict.outcome == "diverged" else "decision_required"
        message = f"step '{step_id}' [{verdict.rule}]: run '{run_id}' step '{step_id}': {verdict.reason}"
        await self.store.run(self.store.journal.record_halt, run_id, step_id, verdict.rule, message)
        drive.halts.append({"step_id": step_id, "rule": verdict.rule, "message": message})
        drive.diverged = drive.diverged or kind == "diverged"
        await self.timeline.record(run_id, "step.diverged" if kind == "diverged" else "step.halted",
                                   step_id, generation, rule=verdict.rule, message=message)
        fields: dict[str, Any] = {"step_id": step_id, "run_id": run_id}
        if kind == "decision_required":
            fields["rule"] = verdict.rule
        raise WorkflowConflict(message, kind, **fields)

    async def _replay(self, run_id: str, step_id: str, generation: int, step: dict,
                      verdict: gate.Verdict) -> dict[str, Any]:
        journal = self.store.journal
        if verdict.consumes or step.get("halt_rule"):
            await self.store.run(lambda: (journal.consume_decision(run_id, step_id),
                                          journal.update_step(run_id, step_id, halt_rule=None,
                                                              halt_message=None)))
        envelope = step["envelope"]
        await self.timeline.record(run_id, "step.replayed", step_id, generation, status=envelope["status"],
                                   decision=verdict.consumes)
        return step_answer(envelope.get("terminal_id"), envelope["last_message"], envelope["status"],
                           True, step_id)

    async def _execute(self, run_id: str, step_id: str, generation: int, req: StepRequest) -> dict[str, Any]:
        journal = self.store.journal

        async def on_terminal(terminal_id: str) -> None:
            await self.store.run(lambda: journal.update_step(run_id, step_id, terminal_id=terminal_id))
            await self.timeline.record(run_id, "terminal.created", step_id, generation, terminal_id=terminal_id)
            drive = self.registry.drives.get(run_id)
            if drive is None or drive.cancelled or drive.generation != generation:
                raise WorkflowConflict(f"run '{run_id}' was cancelled or superseded while step "
                                       f"'{step_id}' was starting", "run_not_active",
                                       run_id=run_id, step_id=step_id)

        env = {RUN_ID_VAR: run_id, GENERATION_VAR: str(generation), STEP_ID_VAR: step_id}
        try:
            result = await self.orchestration.run_step(replace(req, env=env, on_terminal=on_terminal))
        except CaoError as exc:
            drive = self.registry.drives.get(run_id)
            cancelled = drive is None or drive.cancelled or drive.generation != generation
            kind = "cancelled" if cancelled else "timeout" if isinstance(exc, WaitTimeout) else "error"
            terminal_id = getattr(exc, "terminal_id", None)
            envelope, error = make_envelope(terminal_id, "", "failed"), str(exc)
            await self.store.run(lambda: journal.update_step(
                run_id, step_id, state="failed", envelope=envelope, error=error[:4000], error_kind=kind,
                finished_at=stamp()))
            await self.timeline.record(run_id, "step.failed", step_id, generation, error_kind=kind,
                                       error=error[:1000])
            raise
        envelope = make_envelope(result.terminal_id, result.last_message, result.status)
        await self.store.run(lambda: journal.update_step(
            run_id, step_id, state="completed", envelope=envelope, terminal_id=result.terminal_id,
            finished_at=stamp()))
        await self.timeline.record(run_id, "step.completed", step_id, generation,
                                   terminal_id=result.terminal_id, truncated=envelope["truncated"])
        answer = step_answer(result.terminal_id, result.last_message, result.status, False, step_id)
        answer["elapsed"] = round(result.elapsed, 3)
        return answer

