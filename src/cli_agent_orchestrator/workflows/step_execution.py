"""The journaled execution of one step attempt, the same for both tiers: the worker's
terminal id is journaled the moment it exists (so a cancel or a restart can find it),
the worker gets the run's identity in its environment, and a successful attempt settles
`completed` with its result envelope (unless its caller settles it: a YAML step with an
output_schema is done only once its output was checked). A cancelled or superseded drive
gets no worker.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import WorkflowConflict
from ..events import TerminalCreated
from ..services.orchestration import OrchestrationService, StepRequest, StepResult
from ..store import Store
from ..store.journal import stamp
from .drives import RunRegistry
from .records import StepState
from .timeline import Timeline

RUN_ID_VAR, GENERATION_VAR, STEP_ID_VAR = "CAO_WORKFLOW_RUN_ID", "CAO_WORKFLOW_GENERATION", "CAO_WORKFLOW_STEP_ID"
IDENTITY_VARS = (RUN_ID_VAR, GENERATION_VAR, STEP_ID_VAR)
# A stored reply beyond this is kept truncated, and the step then counts as lossy.
MAX_ENVELOPE_BYTES = 1024 * 1024


def make_envelope(terminal_id: str | None, last_message: str, status: str) -> dict[str, Any]:
    """The stored result of an attempt, as the gate reads it back on a resume."""
    data = last_message.encode("utf-8")
    truncated = len(data) > MAX_ENVELOPE_BYTES
    if truncated:
        last_message = data[:MAX_ENVELOPE_BYTES].decode("utf-8", "ignore")
    return {"last_message": last_message, "status": status, "terminal_id": terminal_id, "truncated": truncated}


@dataclass(frozen=True)
class ExecutedStep:
    result: StepResult
    envelope: dict[str, Any]  # as journaled (the reply possibly truncated)


class StepExecution:
    def __init__(self, store: Store, registry: RunRegistry, timeline: Timeline, orchestration: OrchestrationService):
        self.store, self.registry, self.timeline = store, registry, timeline
        self.orchestration = orchestration

    async def execute(
        self, run_id: str, step_id: str, generation: int, request: StepRequest, *, settle: bool = True
    ) -> ExecutedStep:
        """Run one attempt of a step its caller has already journaled as `running`.
        A failure raises the orchestration's CaoError and settles nothing: a script's step
        fails at once, a YAML attempt may be retried, and each tier journals that itself.
        With `settle=False` the result envelope is journaled but the step stays `running`."""
        journal = self.store.journal

        async def on_terminal(terminal_id: str) -> None:
            await self.store.run(lambda: journal.update_step(run_id, step_id, terminal_id=terminal_id))
            await self.timeline.record(
                TerminalCreated(run_id=run_id, generation=generation, step_id=step_id, terminal_id=terminal_id)
            )
            if not self.registry.is_current(run_id, generation):
                raise WorkflowConflict(
                    f"run '{run_id}' was cancelled or superseded while step '{step_id}' was starting",
                    "run_not_active",
                    run_id=run_id,
                    step_id=step_id,
                )

        env = {RUN_ID_VAR: run_id, GENERATION_VAR: str(generation), STEP_ID_VAR: step_id}
        result = await self.orchestration.run_step(replace(request, env=env, on_terminal=on_terminal, journaled=True))
        envelope = make_envelope(result.terminal_id, result.last_message, result.status)
        await self.store.run(
            lambda: journal.update_step(
                run_id,
                step_id,
                envelope=envelope,
                terminal_id=result.terminal_id,
                **({"state": StepState.COMPLETED, "finished_at": stamp()} if settle else {}),
            )
        )
        return ExecutedStep(result, envelope)
