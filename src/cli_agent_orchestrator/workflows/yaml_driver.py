"""The YAML tier's driver: a sequential spec run inside the server, step by step on the
same journaled step execution as scripts, with retries and on_failure. A resume keeps
the steps that completed (and their outputs) and re-drives the rest. A step with an
output_schema is done only once its output was checked: missing or invalid output gets
one reprompt on a fresh terminal, and still-bad output ends it `completed_unvalidated`.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from ..errors import CaoError
from ..events import (
    StepAttemptFailed,
    StepAttemptStarted,
    StepOutputReceived,
    StepSkipped,
    YamlRunCompleted,
    YamlRunFailed,
    YamlStepCompleted,
    YamlStepFailed,
    YamlStepStarted,
    YamlTemplateFailed,
)
from ..services.orchestration import StepRequest
from ..store import Store
from ..store.journal import stamp
from . import output_schema, yaml_spec
from .drives import Drive
from .output_events import StepReprompted, YamlStepUnvalidated
from .output_schema import Violation
from .records import RunKind, RunState, StepErrorKind, StepRecord, StepState
from .step_execution import ExecutedStep, StepExecution
from .timeline import Timeline
from .yaml_steps import YamlStep
from .yaml_templates import render


class YamlDriver:
    def __init__(self, store: Store, timeline: Timeline, steps: StepExecution):
        self.store, self.timeline, self.steps = store, timeline, steps
        self.journal = store.journal

    async def drive(self, drive: Drive) -> None:
        run = await self.store.run(self.journal.get_run, drive.run_id)
        assert run is not None  # a run is journaled before it is driven
        spec = yaml_spec.parse_spec(run.source)
        inputs = json.loads(run.inputs_json)
        rows = {s.step_id: s for s in await self.store.run(self.journal.list_steps, drive.run_id)}
        outputs: dict[str, Any] = {}
        failed_step = None
        for step in spec.steps:
            row = rows.get(step.id)
            if row and row.state.is_done:
                outputs[step.id] = _step_output(row)
                continue
            if failed_step is not None:  # an earlier step failed with on_failure: halt
                await self._set(drive.run_id, step.id, state=StepState.SKIPPED)
                await self.timeline.record(
                    StepSkipped(
                        run_id=drive.run_id,
                        generation=drive.generation,
                        step_id=step.id,
                        reason=f"step '{failed_step}' failed",
                    )
                )
                continue
            ok = await self._run_step(drive, step, inputs, outputs, row)
            if not ok and step.on_failure == "halt":
                failed_step = step.id
        await self._finish(drive, failed_step, outputs)

    async def _run_step(
        self, drive: Drive, step: YamlStep, inputs: dict, outputs: dict, row: StepRecord | None
    ) -> bool:
        run_id, generation = drive.run_id, drive.generation
        try:
            prompt = render(step.prompt, inputs, outputs)
        except CaoError as exc:
            await self._set(
                run_id,
                step.id,
                state=StepState.FAILED,
                error=str(exc),
                error_kind=StepErrorKind.TEMPLATE,
                finished_at=stamp(),
            )
            await self.timeline.record(
                YamlTemplateFailed(run_id=run_id, generation=generation, step_id=step.id, error=str(exc))
            )
            return False
        if step.output_schema is not None:
            prompt += output_schema.instructions(step.output_schema)
        await self.timeline.record(YamlStepStarted(run_id=run_id, generation=generation, step_id=step.id))
        attempts = row.attempts if row else 0
        error = ""
        for _ in range(step.retries + 1):
            attempts += 1
            await self._set(
                run_id,
                step.id,
                state=StepState.RUNNING,
                attempts=attempts,
                generation=generation,
                started_at=stamp(),
                finished_at=None,
                error=None,
                error_kind=None,
                output=None,
            )
            await self.store.run(lambda: self.journal.update_run(run_id, current_step_id=step.id))
            await self.timeline.record(
                StepAttemptStarted(run_id=run_id, generation=generation, step_id=step.id, attempt=attempts)
            )
            request = StepRequest(
                provider=step.provider,
                agent=step.agent,
                prompt=prompt,
                timeout=step.timeout or 600.0,
                model=step.model,
                engine=step.engine,
                host=step.host,
            )
            try:
                executed = await self.steps.execute(
                    run_id, step.id, generation, request, settle=step.output_schema is None
                )
            except CaoError as exc:
                error = str(exc)
                await self.timeline.record(
                    StepAttemptFailed(
                        run_id=run_id, generation=generation, step_id=step.id, attempt=attempts, error=error[:1000]
                    )
                )
                continue
            if step.output_schema is not None:
                outputs[step.id] = await self._check_output(drive, step, request, executed, attempts)
                return True
            current = await self.store.run(self.journal.get_step, run_id, step.id)
            structured = current.output if current else None  # from workflow_return, if any
            outputs[step.id] = structured if structured is not None else executed.result.last_message
            if structured is not None:
                await self.timeline.record(StepOutputReceived(run_id=run_id, generation=generation, step_id=step.id))
            await self.timeline.record(
                YamlStepCompleted(run_id=run_id, generation=generation, step_id=step.id, attempts=attempts)
            )
            return True
        await self._set(
            run_id,
            step.id,
            state=StepState.FAILED,
            error=error[:4000],
            error_kind=StepErrorKind.ERROR,
            finished_at=stamp(),
        )
        await self.timeline.record(
            YamlStepFailed(
                run_id=run_id, generation=generation, step_id=step.id, error=error[:1000], on_failure=step.on_failure
            )
        )
        return False

    async def _check_output(
        self, drive: Drive, step: YamlStep, request: StepRequest, executed: ExecutedStep, attempts: int
    ) -> Any:
        """Settle a step that declares an output_schema, and answer the output later steps
        see. Missing or invalid output is reprompted once; output that still fails keeps the
        step's result (nothing is lost) with a typed error naming the first failing path."""
        run_id, generation = drive.run_id, drive.generation
        output, found = await self._read_output(drive, step, executed)
        reprompted = bool(found)
        if found:
            await self.timeline.record(
                StepReprompted(
                    run_id=run_id,
                    generation=generation,
                    step_id=step.id,
                    attempt=attempts,
                    errors=[v.as_json() for v in found],
                )
            )
            await self._set(run_id, step.id, output=None)  # the reprompt's output, not this one, is read next
            retry = replace(request, prompt=output_schema.correction(request.prompt, found, output))
            try:
                executed = await self.steps.execute(run_id, step.id, generation, retry, settle=False)
                output, found = await self._read_output(drive, step, executed)
            except CaoError as exc:  # the first answer stays the step's result
                await self._set(run_id, step.id, output=output)
                found = [Violation("$", f"the reprompt failed: {str(exc)[:500]}")]
        envelope = {**executed.envelope, "reprompted": reprompted}
        if not found:
            await self._set(
                run_id, step.id, state=StepState.COMPLETED, output=output, envelope=envelope, finished_at=stamp()
            )
            await self.timeline.record(
                YamlStepCompleted(run_id=run_id, generation=generation, step_id=step.id, attempts=attempts)
            )
            return output
        first = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        error = f"output does not match the step's output_schema after one reprompt: {first}{more}"
        await self._set(
            run_id,
            step.id,
            state=StepState.COMPLETED_UNVALIDATED,
            output=output,
            envelope=envelope,
            error=error,
            error_kind=StepErrorKind.OUTPUT_INVALID,
            finished_at=stamp(),
        )
        await self.timeline.record(
            YamlStepUnvalidated(
                run_id=run_id,
                generation=generation,
                step_id=step.id,
                attempts=attempts,
                error=error,
                path=first.path,
                errors=[v.as_json() for v in found],
            )
        )
        return output if output is not None else executed.result.last_message

    async def _read_output(
        self, drive: Drive, step: YamlStep, executed: ExecutedStep
    ) -> tuple[dict[str, Any] | None, list[Violation]]:
        """The attempt's structured output (workflow_return first, else a JSON object ending
        the reply) and how it fails the step's schema (empty: it matches)."""
        assert step.output_schema is not None
        current = await self.store.run(self.journal.get_step, drive.run_id, step.id)
        output = current.output if current and isinstance(current.output, dict) else None
        if output is None:
            output = output_schema.object_in_reply(executed.result.last_message)
            if output is None:
                return None, [Violation("$", output_schema.NO_OUTPUT)]
            await self._set(drive.run_id, step.id, output=output)
            await self.timeline.record(
                StepOutputReceived(run_id=drive.run_id, generation=drive.generation, step_id=step.id)
            )
        # A worker thread: a big output against a big schema must not stall the event loop.
        return output, await asyncio.to_thread(output_schema.violations, output, step.output_schema)

    async def _set(self, run_id: str, step_id: str, **values: Any) -> None:
        await self.store.run(lambda: self.journal.update_step(run_id, step_id, **values))

    async def _finish(self, drive: Drive, failed_step: str | None, outputs: dict) -> None:
        run = await self.store.run(self.journal.get_run, drive.run_id)
        if run is None or run.state != RunState.RUNNING or run.generation != drive.generation:
            return  # cancelled meanwhile
        state, kind = (RunState.FAILED, RunKind.ERROR) if failed_step else (RunState.COMPLETED, None)
        output = json.dumps(outputs, separators=(",", ":"), ensure_ascii=False)
        steps = await self.store.run(self.journal.list_steps, drive.run_id)
        warnings = list(run.warnings)
        for row in steps:  # a resume keeps such a step, and its warning once
            note = f"step '{row.step_id}' is completed_unvalidated: {row.error}"
            if row.state == StepState.COMPLETED_UNVALIDATED and row.error and note not in warnings:
                warnings.append(note)
        await self.store.run(
            lambda: self.journal.update_run(
                drive.run_id, state=state, kind=kind, output_json=output, warnings=warnings, finished_at=stamp()
            )
        )
        if failed_step:
            await self.timeline.record(
                YamlRunFailed(
                    run_id=drive.run_id, generation=drive.generation, kind=RunKind.ERROR, failed_step=failed_step
                )
            )
        else:
            await self.timeline.record(YamlRunCompleted(run_id=drive.run_id, generation=drive.generation))


def _step_output(row: StepRecord) -> Any:
    if row.output is not None:
        return row.output
    envelope = row.envelope if isinstance(row.envelope, dict) else {}
    return envelope.get("last_message", "")
