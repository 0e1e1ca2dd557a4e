"""The YAML tier's driver: a sequential spec run inside the server, step by step on the
same journaled step execution as scripts, with retries and on_failure. A resume keeps
the steps that completed (and their outputs) and re-drives the rest.
"""

from __future__ import annotations

import json
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
from . import yaml_spec
from .drives import Drive
from .records import RunKind, RunState, StepErrorKind, StepRecord, StepState
from .step_execution import StepExecution
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
                executed = await self.steps.execute(run_id, step.id, generation, request)
            except CaoError as exc:
                error = str(exc)
                await self.timeline.record(
                    StepAttemptFailed(
                        run_id=run_id, generation=generation, step_id=step.id, attempt=attempts, error=error[:1000]
                    )
                )
                continue
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

    async def _set(self, run_id: str, step_id: str, **values: Any) -> None:
        await self.store.run(lambda: self.journal.update_step(run_id, step_id, **values))

    async def _finish(self, drive: Drive, failed_step: str | None, outputs: dict) -> None:
        run = await self.store.run(self.journal.get_run, drive.run_id)
        if run is None or run.state != RunState.RUNNING or run.generation != drive.generation:
            return  # cancelled meanwhile
        state, kind = (RunState.FAILED, RunKind.ERROR) if failed_step else (RunState.COMPLETED, None)
        output = json.dumps(outputs, separators=(",", ":"), ensure_ascii=False)
        await self.store.run(
            lambda: self.journal.update_run(
                drive.run_id, state=state, kind=kind, output_json=output, finished_at=stamp()
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
