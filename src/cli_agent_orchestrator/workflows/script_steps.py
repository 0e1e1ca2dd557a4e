"""One step call of a workflow script (`POST /terminals/run-step` with identity env_vars):
the generation fence, the resume gate's verdict, then replay, halt, diverge, or claim the
step in the journal *before* anything runs and execute it. Only the drive holding the
run's current generation can run steps, and each step key once per drive.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

from ..errors import CaoError, NotFound, Unprocessable, WaitTimeout, WorkflowConflict
from ..events import StepCompleted, StepDiverged, StepFailed, StepHalted, StepReplayed, StepStarted
from ..services.orchestration import StepRequest
from ..store import Store
from ..store.journal import stamp
from . import resume_gate
from .drives import Drive, RunRegistry
from .records import Halt, RunState, StepErrorKind, StepRecord, StepState
from .step_execution import GENERATION_VAR, IDENTITY_VARS, RUN_ID_VAR, STEP_ID_VAR, StepExecution, make_envelope
from .timeline import Timeline

ID_RE = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")


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
        raise Unprocessable(
            f"env_vars accepts only {', '.join(IDENTITY_VARS)}; unexpected: " + ", ".join(k[:64] for k in unknown)
        )
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


def step_answer(
    terminal_id: str | None, last_message: str, status: str, replayed: bool, step_id: str
) -> dict[str, Any]:
    return {
        "terminal_id": terminal_id,
        "last_message": last_message,
        "status": status,
        "replayed": replayed,
        "step_id": step_id,
    }


class ScriptStepGate:
    def __init__(self, store: Store, registry: RunRegistry, timeline: Timeline, steps: StepExecution):
        self.store, self.registry, self.timeline, self.steps = store, registry, timeline, steps

    async def run(self, ident: StepIdentity, req: StepRequest, policy: str | None) -> dict[str, Any]:
        journal = self.store.journal
        call_fp = resume_gate.fingerprint(
            resume_gate.execution_fields(
                provider=req.provider,
                agent=req.agent,
                prompt=req.prompt,
                model=req.model,
                allowed_tools=req.allowed_tools,
                working_directory=req.working_directory,
            )
        )
        run_id, step_id = ident.run_id, ident.step_id
        async with self.registry.lock(run_id):
            run, step, decision = await self.store.run(journal.gate_inputs, run_id, step_id)
            if run is None:
                raise NotFound(f"unknown workflow run {run_id!r}")
            generation = run.generation
            if str(generation) != ident.generation:
                raise WorkflowConflict(
                    f"run '{run_id}': stale call fenced off: the call carried generation "
                    f"'{ident.generation}' but the run's current generation is '{generation}'",
                    "stale_generation",
                    run_id=run_id,
                    step_id=step_id,
                )
            drive = self.registry.drives.get(run_id)
            if run.state != RunState.RUNNING or drive is None or drive.generation != generation:
                raise WorkflowConflict(
                    f"run '{run_id}' is {run.state} and not being driven; no step can run in it now",
                    "run_not_active",
                    run_id=run_id,
                    step_id=step_id,
                )
            if step_id in drive.keys:
                raise WorkflowConflict(
                    f"run '{run_id}': step key '{step_id}' was already used in this drive; "
                    "every step call needs its own key (pass a distinct step_id)",
                    "duplicate_step_id",
                    run_id=run_id,
                    step_id=step_id,
                )
            drive.keys.add(step_id)
            verdict = resume_gate.decide(step, call_fp, policy, decision)

            if verdict.outcome in ("halt", "diverged"):
                await self._halt(run_id, step_id, generation, verdict, drive)
            if verdict.outcome == "replay":
                assert step is not None  # the gate replays only a step on record
                return await self._replay(run_id, step_id, generation, step, verdict)
            await self.store.run(
                lambda: journal.claim_step(
                    run_id,
                    step_id,
                    generation=generation,
                    fingerprint=call_fp,
                    scheme=resume_gate.FINGERPRINT_SCHEME,
                    policy=policy,
                    consumes=verdict.consumes,
                )
            )
            attempt = (step.attempts if step else 0) + 1
            await self.timeline.record(
                StepStarted(
                    run_id=run_id,
                    generation=generation,
                    step_id=step_id,
                    attempt=attempt,
                    reason=verdict.reason,
                    policy=policy,
                )
            )
        # The execution runs as its own task: if the script's connection drops (it was
        # killed), the step still settles in the journal and a resume can replay it.
        task = self.registry.start(self._execute(run_id, step_id, generation, req), f"workflow-step-{run_id}-{step_id}")
        self.registry.track(run_id, task)
        return await asyncio.shield(task)

    async def _halt(
        self, run_id: str, step_id: str, generation: int, verdict: resume_gate.Verdict, drive: Drive
    ) -> None:
        diverged = verdict.outcome == "diverged"
        rule = verdict.rule
        assert rule is not None  # every halt and divergence names its rule
        message = f"step '{step_id}' [{rule}]: run '{run_id}' step '{step_id}': {verdict.reason}"
        await self.store.run(self.store.journal.record_halt, run_id, step_id, rule, message)
        drive.halts.append(Halt(step_id, rule, message))
        drive.diverged = drive.diverged or diverged
        event = StepDiverged if diverged else StepHalted
        await self.timeline.record(
            event(run_id=run_id, generation=generation, step_id=step_id, rule=rule, message=message)
        )
        if diverged:
            raise WorkflowConflict(message, "diverged", step_id=step_id, run_id=run_id)
        raise WorkflowConflict(message, "decision_required", step_id=step_id, run_id=run_id, rule=rule)

    async def _replay(
        self, run_id: str, step_id: str, generation: int, step: StepRecord, verdict: resume_gate.Verdict
    ) -> dict[str, Any]:
        journal = self.store.journal
        if verdict.consumes or step.halt_rule:

            def clear_halt() -> None:
                journal.consume_decision(run_id, step_id)
                journal.update_step(run_id, step_id, halt_rule=None, halt_message=None)

            await self.store.run(clear_halt)
        envelope = step.envelope
        await self.timeline.record(
            StepReplayed(
                run_id=run_id,
                generation=generation,
                step_id=step_id,
                status=envelope["status"],
                decision=verdict.consumes,
            )
        )
        return step_answer(envelope.get("terminal_id"), envelope["last_message"], envelope["status"], True, step_id)

    async def _execute(self, run_id: str, step_id: str, generation: int, req: StepRequest) -> dict[str, Any]:
        try:
            executed = await self.steps.execute(run_id, step_id, generation, req)
        except CaoError as exc:
            kind = (
                StepErrorKind.CANCELLED
                if not self.registry.is_current(run_id, generation)
                else StepErrorKind.TIMEOUT
                if isinstance(exc, WaitTimeout)
                else StepErrorKind.ERROR
            )
            envelope = make_envelope(getattr(exc, "terminal_id", None), "", "failed")
            error = str(exc)
            await self.store.run(
                lambda: self.store.journal.update_step(
                    run_id,
                    step_id,
                    state=StepState.FAILED,
                    envelope=envelope,
                    error=error[:4000],
                    error_kind=kind,
                    finished_at=stamp(),
                )
            )
            await self.timeline.record(
                StepFailed(run_id=run_id, generation=generation, step_id=step_id, error_kind=kind, error=error[:1000])
            )
            raise
        result = executed.result
        await self.timeline.record(
            StepCompleted(
                run_id=run_id,
                generation=generation,
                step_id=step_id,
                terminal_id=result.terminal_id,
                truncated=executed.envelope["truncated"],
            )
        )
        answer = step_answer(result.terminal_id, result.last_message, result.status, False, step_id)
        answer["elapsed"] = round(result.elapsed, 3)
        return answer
