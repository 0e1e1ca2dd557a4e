"""The timeline facts of a YAML step's output_schema check: the one reprompt, and a step
that ended without output matching its schema. Journaled and published like every other
workflow event (`timeline.py`); their fields are the timeline row's `data`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..events.workflow import StepEvent
from .records import StepErrorKind, StepState


@dataclass(frozen=True, kw_only=True)
class StepReprompted(StepEvent):
    """The step's output was missing or failed its schema: the agent is asked once more,
    on a fresh terminal, with the problems found."""

    journal_type: ClassVar[str] = "step.reprompted"
    attempt: int
    errors: list[dict[str, str]]  # [{path, message}]


@dataclass(frozen=True, kw_only=True)
class YamlStepUnvalidated(StepEvent):
    """The step ended, but even the reprompt gave no output matching its schema: its state
    is completed_unvalidated and its typed error names the first failing path."""

    journal_type: ClassVar[str] = "step.completed"
    attempts: int
    state: StepState = StepState.COMPLETED_UNVALIDATED
    error_kind: StepErrorKind = StepErrorKind.OUTPUT_INVALID
    error: str
    path: str
    errors: list[dict[str, str]]
