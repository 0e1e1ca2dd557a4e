"""Every fact the event bus carries, frozen and in one place.

Topics follow seed 003: `terminal.{id}.output`, `terminal.{id}.status`, plus a few
lifecycle and inbox facts. Output events may be dropped under back-pressure;
everything else is `lossless` and is never dropped by the bus.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from .models import TerminalStatus
from .workflows.records import Decision, EventRecord, RunKind, StepErrorKind, Tier


@dataclass(frozen=True)
class Event:
    lossless: ClassVar[bool] = True

    @property
    def topic(self) -> str:  # pragma: no cover - every event overrides it
        raise NotImplementedError


@dataclass(frozen=True)
class TerminalOutput(Event):
    """Raw bytes a pane printed (escape sequences included)."""

    lossless: ClassVar[bool] = False
    terminal_id: str
    data: bytes

    @property
    def topic(self) -> str:
        return f"terminal.{self.terminal_id}.output"


@dataclass(frozen=True)
class StatusChanged(Event):
    terminal_id: str
    status: TerminalStatus
    previous: TerminalStatus
    source: str  # which signal decided it: "screen", "pane", "input", "hook:<name>", "title", "restart"
    reason: str = ""
    turn: int = 0  # input turns submitted so far; lets waiters tell turns apart

    @property
    def topic(self) -> str:
        return f"terminal.{self.terminal_id}.status"


@dataclass(frozen=True)
class TerminalSpawned(Event):
    terminal_id: str
    session_name: str
    caller_id: str | None = None  # the terminal that created this worker (handoff, assign)

    @property
    def topic(self) -> str:
        return f"terminal.{self.terminal_id}.spawned"


@dataclass(frozen=True)
class TerminalExited(Event):
    """The agent's process ended (the pane is dead) or its window vanished."""

    terminal_id: str
    exit_code: int | None = None
    window_gone: bool = False
    reason: str = ""  # why, when not the process's own end (e.g. its host stayed unreachable)

    @property
    def topic(self) -> str:
        return f"terminal.{self.terminal_id}.exited"


@dataclass(frozen=True)
class TerminalUnreachable(Event):
    """The agent's host cannot be reached: its status is unknown until the connection is back
    (then its screen is read afresh)."""

    terminal_id: str
    reason: str

    @property
    def topic(self) -> str:
        return f"terminal.{self.terminal_id}.unreachable"


@dataclass(frozen=True)
class ScreenSnapshot(Event):
    """The pane's visible screen as tmux holds it, placed in the output stream at
    the exact point it was taken (output before it is included, after it is not)."""

    terminal_id: str
    text: str  # capture-pane -p -e: rows with SGR escapes
    cursor_x: int
    cursor_y: int
    title: str | None = None  # the pane's title as tmux holds it (None: not asked)

    @property
    def topic(self) -> str:
        return f"terminal.{self.terminal_id}.snapshot"


@dataclass(frozen=True)
class ComposerChanged(Event):
    """The agent's composer (its input line) now holds unsubmitted text, or no longer does,
    or its text takes another number of rows, as the screen reads. A paste has been drawn
    once it holds text."""

    terminal_id: str
    has_text: bool
    rows: int = 0  # rows its text takes on screen, where the provider can tell (0: it cannot)

    @property
    def topic(self) -> str:
        return f"terminal.{self.terminal_id}.composer"


@dataclass(frozen=True)
class McpListed(Event):
    """The agent's CLI listed one of cao's MCP catalogues on cao's endpoint (`method`: tools/list,
    prompts/list, ...), and has the answer: once it has listed what its CLI lists at start, an
    agent whose profile gives it cao's tools becomes ready (mcp_server/endpoint.py)."""

    terminal_id: str
    method: str = "tools/list"

    @property
    def topic(self) -> str:
        return f"terminal.{self.terminal_id}.mcp"


@dataclass(frozen=True)
class TerminalResized(Event):
    """The pane changed size (a human attached with another terminal size)."""

    terminal_id: str
    width: int
    height: int

    @property
    def topic(self) -> str:
        return f"terminal.{self.terminal_id}.resized"


@dataclass(frozen=True)
class TerminalRemoved(Event):
    """The terminal is no longer cao's to drive: deleted (scrollback saved), or gone
    with its window or its whole tmux server (`reason` says which)."""

    terminal_id: str
    reason: str = ""

    @property
    def topic(self) -> str:
        return f"terminal.{self.terminal_id}.removed"


@dataclass(frozen=True)
class BackendLost(Event):
    """The terminal backend's server ended (e.g. the tmux server was killed): every
    agent it ran is gone. A new server starts with the next terminal."""

    backend: str
    reason: str
    host: str | None = None  # a host's tmux server: only that host's agents are gone

    @property
    def topic(self) -> str:
        return f"backend.{self.backend}.lost"


@dataclass(frozen=True)
class InputSubmitted(Event):
    """cao pasted input and pressed Enter: a new turn starts (unconfirmed)."""

    terminal_id: str
    turn: int

    @property
    def topic(self) -> str:
        return f"terminal.{self.terminal_id}.input"


@dataclass(frozen=True)
class HookReceived(Event):
    """A CLI's own hook event (via `cao-hook`). It goes through the bus so the status
    monitor sees it in order with the InputSubmitted that came before it."""

    terminal_id: str
    event: str
    payload: dict

    @property
    def topic(self) -> str:
        return f"terminal.{self.terminal_id}.hook"


@dataclass(frozen=True)
class InboxQueued(Event):
    message_id: int
    receiver_id: str
    sender_id: str

    @property
    def topic(self) -> str:
        return f"inbox.{self.receiver_id}.queued"


@dataclass(frozen=True)
class InboxDelivered(Event):
    message_id: int
    receiver_id: str
    sender_id: str

    @property
    def topic(self) -> str:
        return f"inbox.{self.receiver_id}.delivered"


@dataclass(frozen=True)
class InboxFailed(Event):
    message_id: int
    receiver_id: str
    sender_id: str
    reason: str = ""

    @property
    def topic(self) -> str:
        return f"inbox.{self.receiver_id}.failed"


@dataclass(frozen=True)
class SessionCreated(Event):
    """A new tmux session exists, holding its first terminal (`terminal_id`)."""

    session_name: str
    terminal_id: str

    @property
    def topic(self) -> str:
        return f"session.{self.session_name}.created"


@dataclass(frozen=True)
class SessionKilled(Event):
    """A session was deleted: its terminals first (each with its own TerminalRemoved),
    then its tmux session."""

    session_name: str
    terminal_ids: tuple[str, ...] = ()

    @property
    def topic(self) -> str:
        return f"session.{self.session_name}.killed"


@dataclass(frozen=True)
class HandoffStarted(Event):
    """One agent step began: an MCP `handoff`, `POST /terminals/run-step`, or a workflow
    step. `handoff_id` pairs it with its HandoffFinished."""

    handoff_id: str
    agent: str
    caller_id: str | None = None

    @property
    def topic(self) -> str:
        return f"handoff.{self.handoff_id}.started"


@dataclass(frozen=True)
class HandoffFinished(Event):
    """The step ended: `ok` with the worker's reply taken (and the worker torn down unless
    kept), or not, with the error the caller got."""

    handoff_id: str
    agent: str
    caller_id: str | None
    terminal_id: str | None
    ok: bool
    error: str = ""

    @property
    def topic(self) -> str:
        return f"handoff.{self.handoff_id}.finished"


@dataclass(frozen=True)
class HandoffOrphaned(Event):
    """A restart ended a handoff whose HandoffFinished never came: what waited for its answer
    died with the old cao-server, so its worker (`terminal_id`) was torn down like a normal
    teardown (scrollback saved) instead of being left running. `reason` says what was lost."""

    handoff_id: str
    agent: str
    caller_id: str | None
    terminal_id: str | None
    reason: str

    @property
    def topic(self) -> str:
        return f"handoff.{self.handoff_id}.orphaned"


@dataclass(frozen=True)
class AssignStarted(Event):
    """An assigned worker exists and its task waits for it to become ready."""

    terminal_id: str
    caller_id: str | None
    agent: str

    @property
    def topic(self) -> str:
        return f"assign.{self.terminal_id}.started"


@dataclass(frozen=True)
class AssignFinished(Event):
    """The assigned task was typed into its worker (`ok`), or the worker could not start
    and was removed. The worker's own work goes on; its status events tell the rest."""

    terminal_id: str
    caller_id: str | None
    agent: str
    ok: bool
    error: str = ""

    @property
    def topic(self) -> str:
        return f"assign.{self.terminal_id}.finished"


@dataclass(frozen=True)
class ConsumerFailed(Event):
    """A consumer raised while handling an event; recorded, never swallowed."""

    consumer: str
    topic_of_event: str
    error: str
    extra: dict = field(default_factory=dict)

    @property
    def topic(self) -> str:
        return "bus.consumer_failed"


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
