"""The terminal backend the services use: this machine's tmux, plus one remote adapter per
registered host that has agents, behind the one interface.

A window on a host is named `<host>/@N` (a local one stays `@N`), so every method that takes
a window id finds its backend without being told; only `create_window` is told where. A host's
backend is made on first use (`connect(host)` supplies it) and kept; sessions exist on every
tmux server that holds one of their windows.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable

from ..errors import BackendError
from .base import HostPlace, WindowInfo, WindowRef
from .remote_tmux import RemoteTmuxBackend
from .tmux import TmuxBackend

log = logging.getLogger(__name__)

_QUALIFIED = re.compile(r"\A([a-z0-9][a-z0-9-]{0,31})/(@[0-9]+)\Z")

# host name → its backend (None: no such host registered)
Connector = Callable[[str], Awaitable[RemoteTmuxBackend | None]]


def split_window(window_id: str) -> tuple[str | None, str]:
    """(host or None, the tmux window id there)."""
    match = _QUALIFIED.match(window_id or "")
    return (match[1], match[2]) if match else (None, window_id)


def on_host(host: str | None, window_id: str) -> str:
    return f"{host}/{window_id}" if host else window_id


class PlacedBackend:
    def __init__(self, local: TmuxBackend, connect: Connector | None = None):
        self.local = local
        self.name = local.name
        self.remotes: dict[str, RemoteTmuxBackend] = {}
        self._connect = connect
        self._made = asyncio.Lock()

    # --- which backend -------------------------------------------------------------------------
    async def remote(self, host: str) -> RemoteTmuxBackend:
        found = self.remotes.get(host)
        if found is not None:
            return found
        async with self._made:
            if host not in self.remotes:
                made = await self._connect(host) if self._connect is not None else None
                if made is None:
                    raise BackendError(f"unknown host {host!r}")
                self.remotes[host] = made
        return self.remotes[host]

    async def _of(self, window_id: str) -> tuple[TmuxBackend, str]:
        host, bare = split_window(window_id)
        return (await self.remote(host) if host else self.local), bare

    def _all(self) -> list[TmuxBackend]:
        return [self.local, *self.remotes.values()]

    def _live_remotes(self) -> list[RemoteTmuxBackend]:
        return [r for r in self.remotes.values() if r.down_reason is None and r.link.alive]

    async def place(self, host: str) -> HostPlace:
        """Connect to `host` (if not yet) and say where its agents find cao."""
        backend = await self.remote(host)
        await backend.start()
        assert backend.place is not None
        return backend.place

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        await self.local.start()

    async def stop(self) -> None:
        for backend in self._all():
            await backend.stop()

    def health(self) -> dict:
        health = self.local.health()
        if self.remotes:
            health = {**health, "hosts": {name: r.health() for name, r in sorted(self.remotes.items())}}
        return health

    async def probe(self, deadline_s: float) -> dict:
        """health(), with this machine's tmux asked now to answer within `deadline_s`."""
        return {**self.health(), **await self.local.probe(deadline_s)}

    def host_health(self, host: str) -> dict | None:
        """A host's connection (None: never connected by this server)."""
        backend = self.remotes.get(host)
        return backend.health() if backend is not None else None

    async def disconnect(self, host: str) -> None:
        """Forget a host (it was removed): its connection ends."""
        backend = self.remotes.pop(host, None)
        if backend is not None:
            await backend.stop()

    # --- windows -----------------------------------------------------------------------------
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
        backend = await self.remote(host) if host else self.local
        # A session spans hosts: its first window on a tmux server starts it there.
        fresh = new_session or not await backend.session_exists(session_name)
        ref = await backend.create_window(
            terminal_id, session_name, window_name, working_directory, command, fresh, watch, tag
        )
        return WindowRef(on_host(host, ref.window_id), ref.pane_id)

    async def watch(self, terminal_id: str, window_id: str) -> WindowRef | None:
        host, bare = split_window(window_id)
        backend = await self.remote(host) if host else self.local
        ref = await backend.watch(terminal_id, bare)
        return WindowRef(on_host(host, ref.window_id), ref.pane_id) if ref else None

    async def unwatch(self, terminal_id: str) -> None:
        for backend in self._all():
            if terminal_id in backend.panes.pane_of_terminal:
                await backend.unwatch(terminal_id)
                return
        await self.local.unwatch(terminal_id)

    def request_snapshot(self, terminal_id: str) -> bool:
        for backend in self._all():
            if terminal_id in backend.panes.pane_of_terminal:
                return backend.request_snapshot(terminal_id)
        return False

    async def paste(self, window_id: str, text: str) -> None:
        backend, bare = await self._of(window_id)
        await backend.paste(bare, text)

    async def send_keys(self, window_id: str, keys: list[str]) -> None:
        backend, bare = await self._of(window_id)
        await backend.send_keys(bare, keys)

    async def send_bytes(self, window_id: str, data: bytes) -> None:
        backend, bare = await self._of(window_id)
        await backend.send_bytes(bare, data)

    async def resize(self, window_id: str, cols: int, rows: int) -> None:
        backend, bare = await self._of(window_id)
        await backend.resize(bare, cols, rows)

    async def capture(
        self,
        window_id: str,
        *,
        history: bool = False,
        escapes: bool = False,
        start: int | None = None,
        end: int | None = None,
    ) -> str:
        backend, bare = await self._of(window_id)
        return await backend.capture(bare, history=history, escapes=escapes, start=start, end=end)

    async def position(self, window_id: str) -> tuple[int, int] | None:
        backend, bare = await self._of(window_id)
        return await backend.position(bare)

    async def current_path(self, window_id: str) -> str | None:
        backend, bare = await self._of(window_id)
        return await backend.current_path(bare)

    async def respawn(self, window_id: str, working_directory: str, command: str) -> None:
        backend, bare = await self._of(window_id)
        await backend.respawn(bare, working_directory, command)

    async def kill_window(self, window_id: str) -> None:
        backend, bare = await self._of(window_id)
        await backend.kill_window(bare)

    async def kill_session(self, session_name: str) -> None:
        await self.local.kill_session(session_name)
        for backend in self._live_remotes():
            await backend.kill_session(session_name)

    async def list_windows(self) -> list[WindowInfo]:
        """Every window of this machine and of every connected host (a host that is down has
        none to show now; its agents are unreachable, not gone)."""
        windows = await self.local.list_windows()
        for name, backend in list(self.remotes.items()):
            if not backend.link.alive:
                continue
            for info in await backend.list_windows():
                windows.append(
                    WindowInfo(
                        info.session_name,
                        on_host(name, info.window_id),
                        info.pane_id,
                        info.window_name,
                        info.dead,
                        info.exit_code,
                        info.width,
                        info.height,
                        info.tag,
                    )
                )
        return windows

    async def session_exists(self, session_name: str) -> bool:
        if await self.local.session_exists(session_name):
            return True
        for backend in self._live_remotes():
            if await backend.session_exists(session_name):
                return True
        return False

    async def list_sessions(self) -> list[tuple[str, bool]]:
        seen: dict[str, bool] = dict(await self.local.list_sessions())
        for backend in self._live_remotes():
            for name, attached in await backend.list_sessions():
                seen[name] = seen.get(name, False) or attached
        return list(seen.items())

    def attach_command(self, session_name: str, host: str | None = None) -> list[str]:
        if host is not None and host in self.remotes:
            return self.remotes[host].attach_command(session_name)
        return self.local.attach_command(session_name)

    async def reach(self, host: str) -> str | None:
        """Connect to `host` now; None when connected, else why not (at a restart)."""
        try:
            await self.place(host)
        except BackendError as exc:
            return str(exc)
        return None

    def adopt_later(self, host: str, terminal_id: str, window_id: str, reason: str) -> bool:
        """Adopt a terminal of an unreachable host when its connection comes (False: no such host)."""
        backend = self.remotes.get(host)
        if backend is None:
            return False
        backend.adopt_later(terminal_id, split_window(window_id)[1], reason)
        return True

    # --- files on a host ---------------------------------------------------------------------
    async def put_files(self, host: str, rel_dir: str, files: dict[str, bytes], executable: frozenset[str]) -> str:
        return await (await self.remote(host)).put_files(rel_dir, files, executable)

    async def remove_files(self, host: str, rel_dir: str) -> None:
        backend = self.remotes.get(host)
        if backend is not None:
            await backend.remove_files(rel_dir)

    async def is_dir(self, host: str, path: str) -> bool:
        return await (await self.remote(host)).is_dir(path)
