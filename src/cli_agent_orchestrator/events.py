"""Every fact the event bus carries, frozen and in one place.

Topics follow seed 003: `terminal.{id}.output`, `terminal.{id}.status`, plus a few
lifecycle and inbox facts. Output events may be dropped under back-pressure;
everything else is `lossless` and is never dropped by the bus.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .models import TerminalStatus


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
    source: str  # which signal decided it: "screen", "pane", "input", "hook:<name>", "restart"
    reason: str = ""
    turn: int = 0  # input turns submitted so far; lets waiters tell turns apart

    @property
    def topic(self) -> str:
        return f"terminal.{self.terminal_id}.status"


@dataclass(frozen=True)
class TerminalSpawned(Event):
    terminal_id: str
    session_name: str

    @property
    def topic(self) -> str:
        return f"terminal.{self.terminal_id}.spawned"


@dataclass(frozen=True)
class TerminalExited(Event):
    """The agent's process ended (the pane is dead) or its window vanished."""

    terminal_id: str
    exit_code: int | None = None
    window_gone: bool = False

    @property
    def topic(self) -> str:
        return f"terminal.{self.terminal_id}.exited"


@dataclass(frozen=True)
class ScreenSnapshot(Event):
    """The pane's visible screen as tmux holds it, placed in the output stream at
    the exact point it was taken (output before it is included, after it is not)."""

    terminal_id: str
    text: str  # capture-pane -p -e: rows with SGR escapes
    cursor_x: int
    cursor_y: int

    @property
    def topic(self) -> str:
        return f"terminal.{self.terminal_id}.snapshot"


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
class ConsumerFailed(Event):
    """A consumer raised while handling an event; recorded, never swallowed."""

    consumer: str
    topic_of_event: str
    error: str
    extra: dict = field(default_factory=dict)

    @property
    def topic(self) -> str:
        return "bus.consumer_failed"


@dataclass(frozen=True)
class WorkflowEventRecorded(Event):
    """A row appended to a workflow run's timeline (already committed to the journal)."""

    run_id: str
    seq: int
    type: str
    step_id: str | None
    generation: int | None
    data: dict
    at: str

    @property
    def topic(self) -> str:
        return f"workflow.{self.run_id}.event"
