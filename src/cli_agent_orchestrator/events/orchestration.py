"""Sessions, handoffs and assigns: who started which worker, and how it ended."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Event


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
