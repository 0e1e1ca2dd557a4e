"""A workflow run's timeline: every fact journaled before it is published."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from ..workflows.records import Decision, EventRecord, RunKind, StepErrorKind, Tier
from .base import Event

# --- workflow runs ----------------------------------------------------------------------
# The facts of a workflow run's timeline. The timeline (`workflows/timeline.py`) journals
# each one as a row (`journal_type`, step id, generation, `data()`) and only then publishes
# it, with the row's `seq` and `at`, on `workflow.{run_id}.event`. Where the YAML driver
# records other details than a script's step calls for the same journal type, it has a
# `Yaml…` event of its own, so that every type's data has one fixed shape.

# Every workflow event's own fields; the rest of its fields are its timeline `data`.
_TIMELINE_FIELDS = frozenset({"run_id", "generation", "step_id", "seq", "at"})


@dataclass(frozen=True, kw_only=True)
class WorkflowEvent(Event):
    """A fact of one workflow run, journaled in its timeline before it is published."""

    journal_type: ClassVar[str]
    ends_drive: ClassVar[bool] = False  # followers of a timeline stop after such an event
    run_id: str
    generation: int | None
    step_id: str | None = None
    seq: int = 0  # the timeline row's; set once the event is journaled
    at: str = ""

    @property
    def topic(self) -> str:
        return f"workflow.{self.run_id}.event"

    def data(self) -> dict[str, Any]:
        """What the timeline row holds besides the run, step and generation."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _TIMELINE_FIELDS}

    def timeline_entry(self) -> EventRecord:
        return EventRecord(
            self.seq, self.run_id, self.journal_type, self.step_id, self.generation, self.data(), self.at
        )


@dataclass(frozen=True, kw_only=True)
class StepEvent(WorkflowEvent):
    step_id: str


@dataclass(frozen=True, kw_only=True)
class RunStarted(WorkflowEvent):
    journal_type: ClassVar[str] = "run.started"
    workflow_name: str
    tier: Tier
    inputs: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class RunResumed(WorkflowEvent):
    journal_type: ClassVar[str] = "run.resumed"
    decisions: dict[str, Decision]


@dataclass(frozen=True, kw_only=True)
class RunCompleted(WorkflowEvent):
    """A script run's drive ended well."""

    journal_type: ClassVar[str] = "run.completed"
    ends_drive: ClassVar[bool] = True
    kind: None = None  # always none; there so that the row reads like run.failed's
    halts: list[dict[str, str]]
    warnings: list[str]


@dataclass(frozen=True, kw_only=True)
class RunFailed(WorkflowEvent):
    """A script run's drive ended badly, or cao-server failed driving a run of either tier."""

    journal_type: ClassVar[str] = "run.failed"
    ends_drive: ClassVar[bool] = True
    kind: RunKind
    halts: list[dict[str, str]]
    warnings: list[str]


@dataclass(frozen=True, kw_only=True)
class YamlRunCompleted(WorkflowEvent):
    journal_type: ClassVar[str] = "run.completed"
    ends_drive: ClassVar[bool] = True
    kind: None = None
    failed_step: None = None


@dataclass(frozen=True, kw_only=True)
class YamlRunFailed(WorkflowEvent):
    journal_type: ClassVar[str] = "run.failed"
    ends_drive: ClassVar[bool] = True
    kind: RunKind
    failed_step: str | None  # the step whose failure (on_failure: halt) ended the run


@dataclass(frozen=True, kw_only=True)
class RunCancelled(WorkflowEvent):
    journal_type: ClassVar[str] = "run.cancelled"
    ends_drive: ClassVar[bool] = True


@dataclass(frozen=True, kw_only=True)
class RunInterrupted(WorkflowEvent):
    """Found at start-up: cao-server stopped while the run was being driven."""

    journal_type: ClassVar[str] = "run.interrupted"
    ends_drive: ClassVar[bool] = True
    message: str


@dataclass(frozen=True, kw_only=True)
class StepStarted(StepEvent):
    """A script's step call passed the gate and an attempt was claimed."""

    journal_type: ClassVar[str] = "step.started"
    attempt: int
    reason: str  # why the gate let it run
    policy: str | None


@dataclass(frozen=True, kw_only=True)
class YamlStepStarted(StepEvent):
    """The YAML driver reached a step; its attempts follow."""

    journal_type: ClassVar[str] = "step.started"


@dataclass(frozen=True, kw_only=True)
class StepAttemptStarted(StepEvent):
    journal_type: ClassVar[str] = "step.attempt.started"
    attempt: int


@dataclass(frozen=True, kw_only=True)
class StepAttemptFailed(StepEvent):
    """A YAML step's attempt failed; another follows while retries remain."""

    journal_type: ClassVar[str] = "step.attempt.failed"
    attempt: int
    error: str


@dataclass(frozen=True, kw_only=True)
class TerminalCreated(StepEvent):
    """The worker of a step's attempt exists (its id is journaled)."""

    journal_type: ClassVar[str] = "terminal.created"
    terminal_id: str


@dataclass(frozen=True, kw_only=True)
class StepCompleted(StepEvent):
    journal_type: ClassVar[str] = "step.completed"
    terminal_id: str
    truncated: bool  # the stored reply was cut at its cap


@dataclass(frozen=True, kw_only=True)
class YamlStepCompleted(StepEvent):
    journal_type: ClassVar[str] = "step.completed"
    attempts: int


@dataclass(frozen=True, kw_only=True)
class StepFailed(StepEvent):
    journal_type: ClassVar[str] = "step.failed"
    error_kind: StepErrorKind
    error: str


@dataclass(frozen=True, kw_only=True)
class YamlStepFailed(StepEvent):
    """A YAML step failed its last attempt."""

    journal_type: ClassVar[str] = "step.failed"
    error: str
    on_failure: str


@dataclass(frozen=True, kw_only=True)
class YamlTemplateFailed(StepEvent):
    """A YAML step's prompt template could not be rendered; nothing ran."""

    journal_type: ClassVar[str] = "step.failed"
    error: str


@dataclass(frozen=True, kw_only=True)
class StepReplayed(StepEvent):
    """The gate answered a step call with the stored result; nothing ran."""

    journal_type: ClassVar[str] = "step.replayed"
    status: str
    decision: Decision | None  # the decision this replay used up


@dataclass(frozen=True, kw_only=True)
class StepHalted(StepEvent):
    journal_type: ClassVar[str] = "step.halted"
    rule: str
    message: str


@dataclass(frozen=True, kw_only=True)
class StepDiverged(StepEvent):
    journal_type: ClassVar[str] = "step.diverged"
    rule: str
    message: str


@dataclass(frozen=True, kw_only=True)
class StepSkipped(StepEvent):
    journal_type: ClassVar[str] = "step.skipped"
    reason: str


@dataclass(frozen=True, kw_only=True)
class StepOutputReceived(StepEvent):
    """A step's agent returned structured output (`workflow_return`)."""

    journal_type: ClassVar[str] = "step.output.received"
