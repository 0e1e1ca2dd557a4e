"""A scheduled flow's runs: started, and how they finished."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Event


# --- scheduled flows ---------------------------------------------------------------------
# Published after the run's record is committed (flows/runner.py); the record itself is
# `GET /flows/{name}/runs`.
@dataclass(frozen=True)
class FlowRunStarted(Event):
    """A flow fired (due time, missed due time at start-up, or `cao flow run`) and its run
    was recorded; a run that cannot start at all (the flow is still busy) is finished at once."""

    flow_name: str
    run_id: int
    trigger: str  # schedule | missed | manual

    @property
    def topic(self) -> str:
        return f"flow.{self.flow_name}.started"


@dataclass(frozen=True)
class FlowRunFinished(Event):
    """A flow run reached its final state: completed (the agent replied), skipped (the gate
    said no, or the previous run is still busy), failed or interrupted; `reason` says why."""

    flow_name: str
    run_id: int
    state: str
    reason: str | None = None
    terminal_id: str | None = None

    @property
    def topic(self) -> str:
        return f"flow.{self.flow_name}.finished"
