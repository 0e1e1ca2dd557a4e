"""The terminal backend interface: a handful of async methods for terminal I/O, and, apart,
host placement (agents on other hosts).

tmux is one adapter (backends/tmux.py); a remote host or another multiplexer
can be another. The backend also owns the *output source*: it publishes each
terminal's output and death on the event bus, keyed by terminal id. PlacedBackend
(placed.py) is both: the local tmux and every host's, and the placement of agents on hosts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class HostPlace:
    """What an agent on a host needs to know about it: its cao home there, and the port on
    the host's loopback where cao-server answers (a reverse forward)."""

    home: str  # the remote user's home, absolute
    cao_home: str
    api_port: int


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
    tag: str = ""  # set by create_window(tag=…), e.g. to find a restored window again


class TerminalBackend(Protocol):
    name: str

    async def start(self) -> None:
        """Connect the output source (idempotent); starts a new server after a lost one."""

    async def stop(self) -> None: ...

    def health(self) -> dict:
        """`{"status": "ok"}`, or `{"status": "down", "reason": …}` after the server was lost
        (the backend then publishes BackendLost)."""

    async def probe(self, deadline_s: float) -> dict:
        """`health()`, with this machine's server asked now to answer within `deadline_s`
        (`{"status": "not answering", "reason": …}` when it does not: stopped or overloaded)."""

    async def create_window(
        self,
        terminal_id: str,
        session_name: str,
        window_name: str,
        working_directory: str,
        command: str,
        new_session: bool,
        watch: bool = True,
        tag: str | None = None,
        host: str | None = None,
    ) -> WindowRef:
        """Start `command` (a shell line of cao's own making) in a new window, on this machine
        or on the registered `host`; with `watch`, publish its output from the first byte.
        Names and the directory are taken literally, never as backend syntax. A failed
        creation leaves nothing behind."""

    async def watch(self, terminal_id: str, window_id: str) -> WindowRef | None:
        """Re-attach the output source to an existing window (after a restart)."""

    async def unwatch(self, terminal_id: str) -> None: ...

    def request_snapshot(self, terminal_id: str) -> bool:
        """Have the output source publish a ScreenSnapshot of the pane, in stream order."""

    async def paste(self, window_id: str, text: str) -> None:
        """Insert text as one bracketed paste (the caller has neutralised controls).
        Raises AgentExited, decided atomically, when the pane's process is gone."""

    async def send_keys(self, window_id: str, keys: list[str]) -> None:
        """Press named keys; raises AgentExited like `paste`."""

    async def send_bytes(self, window_id: str, data: bytes) -> None:
        """Write bytes as typed by a terminal (a person at the web terminal): keys, escape
        sequences and all, never interpreted by the backend; raises AgentExited like `paste`."""

    async def resize(self, window_id: str, cols: int, rows: int) -> None:
        """Give the window this size (the agent's program is told, as by a resized terminal)."""

    async def capture(
        self,
        window_id: str,
        *,
        history: bool = False,
        escapes: bool = False,
        start: int | None = None,
        end: int | None = None,
    ) -> str: ...

    async def position(self, window_id: str) -> tuple[int, int] | None:
        """(history size, cursor row): the absolute line where typed text lands next."""

    async def current_path(self, window_id: str) -> str | None: ...

    async def respawn(self, window_id: str, working_directory: str, command: str) -> None:
        """Replace the window's program with `command` (a shell line of cao's own making), in
        the same pane, still watched; its history is cleared. For a start that failed."""

    async def kill_window(self, window_id: str) -> None: ...

    async def kill_session(self, session_name: str) -> None: ...

    async def list_windows(self) -> list[WindowInfo]: ...

    async def session_exists(self, session_name: str) -> bool: ...

    async def list_sessions(self) -> list[tuple[str, bool]]:
        """(name, a human is attached) for every session of this backend."""

    def attach_command(self, session_name: str, host: str | None = None) -> list[str]:
        """The argv a human runs to watch a session (its windows on `host`)."""


class HostPlacement(Protocol):
    """Agents on other hosts (placed.py): where a host's agents find their cao home and
    cao-server, the files cao stages there, and reaching it."""

    async def place(self, host: str) -> HostPlace:
        """Connect to `host` if not yet; where its agents find their cao home and cao-server."""

    async def put_files(self, host: str, rel_dir: str, files: dict[str, bytes], executable: frozenset[str]) -> str:
        """Write files (0600; 0700 for `executable`) in a directory of the host's cao home; its path."""

    async def remove_files(self, host: str, rel_dir: str) -> None: ...

    async def reach(self, host: str) -> str | None:
        """Connect to `host` now; None when connected, else why not."""

    def adopt_later(self, host: str, terminal_id: str, window_id: str, reason: str) -> bool:
        """Watch a terminal of an unreachable host once it is reached (False: no such host)."""

    async def is_dir(self, host: str, path: str) -> bool: ...
