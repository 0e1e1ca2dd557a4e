"""A terminal's facts: its output and screen, its status, its input, its process, its MCP
listings, and the backend under it. `TerminalOutput` may be dropped under back-pressure; the
rest never are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..models import TerminalStatus
from .base import Event


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
    """cao is giving an agent input (a paste, or a dialog's keys): a new turn starts
    (unconfirmed). `enter_follows`: a paste, whose Enter comes later (EnterPressed)."""

    terminal_id: str
    turn: int
    enter_follows: bool = False

    @property
    def topic(self) -> str:
        return f"terminal.{self.terminal_id}.input"


@dataclass(frozen=True)
class EnterPressed(Event):
    """cao pressed the first Enter after a turn's paste. Before it, nothing on the screen can be
    that turn's doing (a CLI still redrawing its start-up screen is not an answer)."""

    terminal_id: str
    turn: int

    @property
    def topic(self) -> str:
        return f"terminal.{self.terminal_id}.enter"


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
