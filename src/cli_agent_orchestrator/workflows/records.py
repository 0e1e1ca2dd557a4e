"""The workflow journal's records: a run, a step, a halt and a timeline entry as typed,
frozen values, and the enums of their states. Pure domain values (no I/O, like
`models.py`); the store reads and writes them. StrEnums, so stored and JSON values stay
the plain strings they always were.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Tier(StrEnum):
    SCRIPT = "script"  # a Python program driving steps over HTTP
    YAML = "yaml"  # a declarative sequence the server drives itself


class RunState(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class RunKind(StrEnum):
    """Why a run ended other than completed."""

    ERROR = "error"
    TIMEOUT = "timeout"
    HALTED = "halted"
    DIVERGED = "diverged"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"  # cao-server stopped while the run was being driven


class StepState(StrEnum):
    PENDING = "pending"  # a YAML step not reached yet
    RUNNING = "running"  # an attempt was dispatched and has not settled
    COMPLETED = "completed"
    # Done, but its output still failed the step's output_schema after the one reprompt:
    # the step's error (kind output_invalid) names the failing path.
    COMPLETED_UNVALIDATED = "completed_unvalidated"
    FAILED = "failed"
    SKIPPED = "skipped"  # a YAML step after one that failed with on_failure: halt

    @property
    def is_done(self) -> bool:
        """A result exists that a later step (or a resume) can use."""
        return self in (StepState.COMPLETED, StepState.COMPLETED_UNVALIDATED)


class StepErrorKind(StrEnum):
    ERROR = "error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"  # the drive was cancelled or superseded mid-step
    INTERRUPTED = "interrupted"
    TEMPLATE = "template"  # a YAML prompt template could not be rendered
    OUTPUT_INVALID = "output_invalid"  # no output matching the step's output_schema, even after a reprompt


class Decision(StrEnum):
    """A human's grant for one halted step, valid for one drive."""

    RERUN = "rerun"
    SKIP = "skip"


@dataclass(frozen=True)
class Halt:
    """A step halted or diverged in a drive; kept until the step is resolved."""

    step_id: str
    rule: str
    message: str

    def as_json(self) -> dict[str, str]:
        return {"step_id": self.step_id, "rule": self.rule, "message": self.message}


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    workflow_name: str
    tier: Tier
    state: RunState
    kind: RunKind | None
    generation: int  # the drive allowed to run steps; bumped to fence off every older one
    source: str  # the frozen snapshot a resume runs
    source_path: str
    content_hash: str
    inputs_json: str
    output_json: str | None  # JSON text of the run's output; None = none emitted
    warnings: tuple[str, ...]
    halts: tuple[Halt, ...]  # of the last drive
    current_step_id: str | None
    driver_pid: int | None  # the script's process while a drive runs
    drives: int
    started_at: str
    finished_at: str | None


@dataclass(frozen=True)
class RunFence:
    """What the step fence reads of a run for every step call."""

    run_id: str
    generation: int
    state: RunState


@dataclass(frozen=True)
class StepRecord:
    """What the journal holds for one step key."""

    run_id: str
    step_id: str
    state: StepState
    position: int = 0  # order of first appearance
    attempts: int = 0
    policy: str | None = None  # recovery declared by the attempt on record; None = undeclared
    fingerprint: str | None = None
    fingerprint_scheme: str | None = None
    # As stored, not parsed: the gate itself judges whether it is readable (a halt rule
    # exists for a missing or damaged one). {last_message, status, terminal_id, truncated}
    envelope: Any = None
    output: Any = None  # structured output (workflow_return), if any
    error: str | None = None
    error_kind: StepErrorKind | None = None
    terminal_id: str | None = None
    generation: int | None = None
    halt_rule: str | None = None
    halt_message: str | None = None
    started_at: str | None = None
    finished_at: str | None = None

    @property
    def halt(self) -> dict[str, str | None] | None:
        return {"rule": self.halt_rule, "message": self.halt_message} if self.halt_rule else None

    @property
    def reply(self) -> Any:
        """The step's answer as views show it: its structured output, else its reply text."""
        if self.output is not None:
            return self.output
        return self.envelope.get("last_message") if isinstance(self.envelope, dict) else None


@dataclass(frozen=True)
class EventRecord:
    """One entry of a run's timeline (`GET /workflows/runs/{id}/events`)."""

    seq: int
    run_id: str
    type: str
    step_id: str | None
    generation: int | None
    data: dict[str, Any]
    at: str

    def as_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "run_id": self.run_id,
            "type": self.type,
            "step_id": self.step_id,
            "generation": self.generation,
            "data": self.data,
            "at": self.at,
        }
