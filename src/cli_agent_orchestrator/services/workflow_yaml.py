"""The YAML tier's driver: a sequential spec run inside the server, step by step on the
same run-step substrate as scripts, with retries and on_failure. A resume keeps the
steps that completed (and their outputs) and re-drives the rest.
"""
from __future__ import annotations

import json
import logging
from typing import Any

from ..errors import CaoError
from ..store import Store
from ..store.journal import stamp
from ..workflows import yaml_spec
from .orchestration import OrchestrationService, StepRequest
from .workflow_state import Drive, Timeline
from .workflow_steps import GENERATION_VAR, RUN_ID_VAR, STEP_ID_VAR, make_envelope

log = logging.getLogger(__name__)
DONE_STATES = ("completed", "completed_unvalidated")


class YamlDriver:
    def __init__(self, store: Store, timeline: Timeline, orchestration: OrchestrationService):
        self.store, self.timeline, self.orchestration = store, timeline, orchestration
        self.journal = store.journal

    async def drive(self, drive: Drive) -> None:
        run = await self.store.run(self.journal.get_run, drive.run_id)
        spec = yaml_spec.parse_spec(run["source"])
        inputs = json.loads(run["inputs_json"])
        rows = {s["step_id"]: s for s in await self.store.run(self.journal.list_steps, drive.run_id)}
        outputs: dict[str, Any] = {}
        failed_step = None
        for position, step in enumerate(spec.steps):
            row = rows.get(step.id)
            if row and row["state"] in DONE_STATES:
                outputs[step.id] = _step_output(row)
                continue
            if failed_step is not None:  # an earlier step failed with on_failure: halt
                await self._set(drive.run_id, step.id, state="skipped")
                await self.timeline.record(drive.run_id, "step.skipped", step.id, drive.generation,
                                           reason=f"step '{failed_step}' failed")
                continue
            ok = await self._run_step(drive, step, inputs, outputs, row)
            if not ok and step.on_failure == "halt":
                failed_step = step.id
        await self._finish(drive, failed_step, outputs, spec)

    async def _run_step(self, drive: Drive, step: yaml_spec.YamlStep, inputs: dict, outputs: dict,
                        row: dict | None) -> bool:
        run_id, generation = drive.run_id, drive.generation
        try:
            prompt = yaml_spec.render(step.prompt, inputs, outputs)
        except CaoError as exc:
            await self._set(run_id, step.id, state="failed", error=str(exc), error_kind="template",
                            finished_at=stamp())
            await self.timeline.record(run_id, "step.failed", step.id, generation, error=str(exc))
            return False
        await self.timeline.record(run_id, "step.started", step.id, generation)
        attempts = row["attempts"] if row else 0
        error = ""
        for _ in range(step.retries + 1):
            attempts += 1
            await self._set(run_id, step.id, state="running", attempts=attempts, generation=generation,
                            started_at=stamp(), finished_at=None, error=None, error_kind=None, output=None)
            await self.store.run(lambda: self.journal.update_run(run_id, current_step_id=step.id))
            await self.timeline.record(run_id, "step.attempt.started", step.id, generation, attempt=attempts)

            async def on_terminal(terminal_id: str, step_id: str = step.id) -> None:
                await self._set(run_id, step_id, terminal_id=terminal_id)
                await self.timeline.record(run_id, "terminal.created", step_id, generation,
                                           terminal_id=terminal_id)

            env = {RUN_ID_VAR: run_id, GENERATION_VAR: str(generation), STEP_ID_VAR: step.id}
            request = StepRequest(provider=step.provider, agent=step.agent, prompt=prompt,
                                  timeout=step.timeout or 600.0, model=step.model, env=env,
                                  on_terminal=on_terminal)
            try:
                result = await self.orchestration.run_step(request)
            except CaoError as exc:
                error = str(exc)
                await self.timeline.record(run_id, "step.attempt.failed", step.id, generation,
                                           attempt=attempts, error=error[:1000])
                continue
            current = await self.store.run(self.journal.get_step, run_id, step.id)
            structured = current["output"] if current else None  # from workflow_return, if any
            envelope = make_envelope(result.terminal_id, result.last_message, result.status)
            await self._set(run_id, step.id, state="completed", envelope=envelope, finished_at=stamp(),
                            terminal_id=result.terminal_id)
            outputs[step.id] = structured if structured is not None else result.last_message
            if structured is not None:
                await self.timeline.record(run_id, "step.output.received", step.id, generation)
            await self.timeline.record(run_id, "step.completed", step.id, generation, attempts=attempts)
            return True
        await self._set(run_id, step.id, state="failed", error=error[:4000], error_kind="error",
                        finished_at=stamp())
        await self.timeline.record(run_id, "step.failed", step.id, generation, error=error[:1000],
                                   on_failure=step.on_failure)
        return False

    async def _set(self, run_id: str, step_id: str, **values: Any) -> None:
        await self.store.run(lambda: self.journal.update_step(run_id, step_id, **values))

    async def _finish(self, drive: Drive, failed_step: str | None, outputs: dict,
                      spec: yaml_spec.YamlSpec) -> None:
        run = await self.store.run(self.journal.get_run, drive.run_id)
        if run["state"] != "running" or run["generation"] != drive.generation:
            return  # cancelled meanwhile
        state, kind = ("failed", "error") if failed_step else ("completed", None)
        output = json.dumps(outputs, separators=(",", ":"), ensure_ascii=False)
        await self.store.run(lambda: self.journal.update_run(
            drive.run_id, state=state, kind=kind, output_json=output, finished_at=stamp()))
        await self.timeline.record(drive.run_id, f"run.{state}", None, drive.generation, kind=kind,
                                   failed_step=failed_step)


def _step_output(row: dict) -> Any:
    if row["output"] is not None:
        return row["output"]
    envelope = row["envelope"] if isinstance(row["envelope"], dict) else {}
    return envelope.get("last_message", "")
