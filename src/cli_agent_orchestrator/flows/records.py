"""The typed records of the flow feature: a stored flow (its definition as added, whether it
is enabled, when it last fired and is due next) and one run of it.

A run's `state`: running → completed | skipped | failed | interrupted. `trigger` says what
started it: schedule (a due time), missed (a due time that passed while cao-server was down,
run once at start-up) or manual (`cao flow run`). `reason` says why a run was skipped or failed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal


@dataclass(frozen=True)
class FlowSpec:
    name: str
    schedule: str
    timezone: str | None  # as the file says; None = the server's local zone
    agent_profile: str
    provider: str | None  # None = the profile's provider, else the server's default
    script: str | None  # absolute path of the gate script
    engine: str | None
    timeout: float
    prompt_template: str
    file_path: str
    description: str = ""
    host: str | None = None  # None = the placement policy (a profile's `host` first)


RunState = Literal["running", "completed", "skipped", "failed", "interrupted"]
Trigger = Literal["schedule", "missed", "manual"]
FINAL_STATES: frozenset[str] = frozenset({"completed", "skipped", "failed", "interrupted"})
MISSED_RUN_RULE = "once"  # a flow due while cao-server was down runs once at start-up
MISSED_RUN_TEXT = (
    "a due time missed while cao-server was down runs once at start-up (never more than once), "
    "then the flow keeps its schedule"
)


@dataclass(frozen=True)
class FlowRecord:
    spec: FlowSpec
    enabled: bool
    last_run: datetime | None  # UTC
    next_run: datetime | None  # UTC; None while disabled or unschedulable
    added_at: str


@dataclass(frozen=True)
class FlowRun:
    id: int
    flow_name: str
    trigger: Trigger
    state: RunState
    started_at: str
    due_at: str | None = None  # the due time it was started for (schedule, missed)
    finished_at: str | None = None
    execute: bool | None = None  # the gate's decision; None = no gate ran
    gate_output: dict[str, Any] | None = None
    reason: str | None = None
    session_name: str | None = None
    terminal_id: str | None = None
    prompt: str | None = None  # the prompt as sent, placeholders filled
    reply: str | None = None  # the agent's answer

    def as_json(self) -> dict[str, Any]:
        return asdict(self)
