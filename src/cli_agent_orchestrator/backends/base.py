"""The terminal backend interface: a handful of async methods.

tmux is one adapter (backends/tmux.py); a remote host or another multiplexer
can be another. The backend also owns the *output source*: it publishes each
terminal's output and death on the event bus, keyed by terminal id.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class WindowRef:
    window_id: str  # stable id of the window (tmux `@N`)
    pane_id: str  # the window's single pane (tmux `%N`)


@dataclass(frozen=True)
class WindowInfo:
    session_name: str
    window_id: str
    pane_id: str
    window_name: str
    dead: bool
    exit_code: int | None
    width: int
    height: int


class TerminalBackend(Protocol):
    name: str

    async def start(self) -> None:
        """Connect the output source (idempotent)."""

    async def stop(self) -> None: ...

    async def create_window(self, terminal_id: str, session_name: str, window_name: str,
                            working_directory: str, command: str, new_session: bool,
                            watch: bool = True) -> WindowRef:
        """Start `command` (a shell line) in a new window; with `watch`, publish its
        output from the first byte."""

    async def watch(self, terminal_id: str, window_id: str) -> WindowRef | None:
        """Re-attach the output source to an existing window (after a restart)."""

    async def unwatch(self, terminal_id: str) -> None: ...

    def request_snapshot(self, terminal_id: str) -> bool:
        """Have the output source publish a ScreenSnapshot of the pane, in stream order."""

    async def paste(self, window_id: str, text: str) -> None:
        """Insert text as one bracketed paste (the caller has neutralised controls)."""

    async def send_keys(self, window_id: str, keys: list[str]) -> None: ...

    async def capture(self, window_id: str, *, history: bool = False, escapes: bool = False) -> str: ...

    async def current_path(self, window_id: str) -> str | None: ...

    async def kill_window(self, window_id: str) -> None: ...

    async def kill_session(self, session_name: str) -> None: ...

    async def list_windows(self) -> list[WindowInfo]: ...

    async def session_exists(self, session_name: str) -> bool: ...

    async def list_sessions(self) -> list[tuple[str, bool]]:
        """(name, a human is attached) for every session of this backend."""

    def attach_command(self, session_name: str) -> list[str]:
        """The argv a human runs to watch a session."""
