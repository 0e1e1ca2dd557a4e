"""tmux on another host, over one SSH connection (ssh_link.py): the second adapter of the
terminal backend. It is the tmux adapter with its client processes run on the host, so the
control-mode reader, the command framing and every escape are the same code.

What the host gets besides tmux: its own cao home (`$HOME/.cao-host/<socket>`) holding the
server's token (0600) and each terminal's files, and a reverse forward from its
127.0.0.1:<port> to cao-server, through which its `cao-hook`, `cao-mcp-server` and workflow
scripts reach the server. The port is kept in that home (`api-port`) and asked for again on
every reconnect, so agents started before a drop find the server at the same address.

A lost connection is not a dead tmux server: the host's agents are reported unreachable
(`TerminalUnreachable`, status `unknown` with the reason), and the backend reconnects with
backoff; once back, every window is re-adopted as after a server restart (dead ones
reported, live ones re-read). Agents of a host unreachable for longer than `dead_after_s`
are reported gone.
"""

from __future__ import annotations

import asyncio
import io
import logging
import posixpath
import re
import shlex
import tarfile
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from ..bus import EventBus
from ..errors import BackendError, HostUnreachable
from ..events import BackendLost, TerminalExited, TerminalUnreachable
from .base import HostPlace
from .ssh_link import LinkDown, SshLink
from .tmux import TmuxBackend
from .tmux_control import ControlClient

log = logging.getLogger(__name__)

# Delays between reconnection attempts; the last one repeats.
RECONNECT_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0)
HOME_DIR_NAME = ".cao-host"
_HOME = re.compile(r"\A/[^\x00-\x1f]{0,1000}\Z")
_SAFE_REL = re.compile(r"\A(?!\.\.?(/|\Z))[A-Za-z0-9._-]{1,128}(/(?!\.\.?(/|\Z))[A-Za-z0-9._-]{1,128}){0,8}\Z")


class RemoteTmuxBackend(TmuxBackend):
    def __init__(
        self,
        host: str,
        link: SshLink,
        socket_name: str,
        bus: EventBus,
        api_socket: str,
        token: Callable[[], str],
        dead_after_s: float,
        spawn: Callable[[Coroutine[Any, Any, Any], str], Any] | None = None,
    ):
        super().__init__(socket_name, bus, spawn=spawn)
        self.host = host
        self.name = f"tmux@{host}"
        self.link = link
        # cao-server's Unix socket for hosts, where the forward leads: requests that come
        # through it are admitted by the token alone.
        self.api_socket = api_socket
        self.token = token
        self.dead_after_s = dead_after_s
        self.place: HostPlace | None = None
        self.down_since: float | None = None
        # Terminals found in the store at a restart while the host was unreachable: their
        # window ids, adopted once the connection is made.
        self.pending: dict[str, str] = {}

    # --- tmux clients run on the host ---------------------------------------------------
    def client_argv(self, *args: str) -> list[str]:
        # -u: an ssh session often has no UTF-8 locale, and tmux then turns the tabs of our
        # list formats (and any non-ASCII) into '_' for that client.
        return self.link.argv(["tmux", "-u", "-L", self.socket_name, *args])

    def attach_command(self, session_name: str) -> list[str]:
        """A human's own ssh connection (their config and keys), with a terminal."""
        line = shlex.join(["tmux", "-L", self.socket_name, "attach-session", "-t", f"={session_name}"])
        return ["ssh", "-t", *self.link.destination, line]

    async def server_running(self) -> bool:
        if not self.link.alive:
            return False
        return await super().server_running()

    # --- connecting ------------------------------------------------------------------------
    async def start(self) -> None:
        if self.down_since is not None and self._recovery is not None and not self._recovery.done():
            raise HostUnreachable(self.down_reason or f"host {self.host} is unreachable")  # reconnecting
        await super().start()

    async def _connect(self) -> None:
        try:
            fresh = not self.link.alive
            await self.link.open()
            if fresh or self.place is None:  # a new connection has no forward yet
                self.place = await self._prepare_host()
        except LinkDown as exc:
            self.down_reason = f"host {self.host} unreachable: {exc}"
            log.warning("%s", self.down_reason)
            raise HostUnreachable(self.down_reason) from None
        await super()._connect()
        self.down_since = None

    async def _prepare_host(self) -> HostPlace:
        """The host's cao home, the token in it, and the reverse forward (same port as before)."""
        probe = await self.link.run(
            [
                "sh",
                "-c",
                'printf "%s\\n" "$HOME"; cat "$HOME/' + HOME_DIR_NAME + '/$1/api-port" 2>/dev/null || true',
                "sh",
                self.socket_name,
            ]
        )
        lines = probe.stdout.decode("utf-8", "replace").splitlines()
        if not probe.ok or not lines or not _HOME.match(lines[0]):
            raise LinkDown(f"cannot read the home directory on the host: {probe.stderr.strip()[:200]}")
        home = lines[0].rstrip("/") or "/"
        cao_home = posixpath.join(home, HOME_DIR_NAME, self.socket_name)
        wanted = int(lines[1]) if len(lines) > 1 and lines[1].isdigit() and 0 < int(lines[1]) < 65536 else 0
        try:
            port = await self.link.forward(wanted, self.api_socket)
        except LinkDown:
            if not wanted:
                raise
            log.warning("host %s: port %d is taken; agents started before now lose contact", self.host, wanted)
            port = await self.link.forward(0, self.api_socket)
        files = {"auth-token": (self.token() + "\n").encode(), "api-port": f"{port}\n".encode()}
        await self._put(cao_home, files)
        return HostPlace(home, cao_home, port)

    async def put_files(
        self, rel_dir: str, files: Mapping[str, bytes], executable: frozenset[str] = frozenset()
    ) -> str:
        """Write files under the host's cao home (0600, 0700 for `executable`); their directory."""
        await self.start()
        assert self.place is not None
        if not _SAFE_REL.match(rel_dir):
            raise BackendError(f"not a directory cao makes: {rel_dir!r}")
        where = posixpath.join(self.place.cao_home, rel_dir)
        await self._put(where, files, executable)
        return where

    async def remove_files(self, rel_dir: str) -> None:
        if self.place is None or not self.link.alive or not _SAFE_REL.match(rel_dir):
            return
        await self.link.run(["rm", "-rf", "--", posixpath.join(self.place.cao_home, rel_dir)], timeout=10)

    async def _put(self, directory: str, files: Mapping[str, bytes], executable: frozenset[str] = frozenset()) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in files.items():
                if not _SAFE_REL.match(name):
                    raise BackendError(f"not a file name cao makes: {name!r}")
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o700 if name in executable else 0o600, int(time.time())
                tar.addfile(info, io.BytesIO(data))
        script = 'umask 077 && mkdir -p -- "$1" && chmod 700 -- "$1" && exec tar -x -f - -C "$1"'
        result = await self.link.run(["sh", "-c", script, "sh", directory], input_bytes=buf.getvalue())
        if not result.ok:
            raise BackendError(f"cannot write files on host {self.host}: {result.stderr.strip()[:300]}")

    async def is_dir(self, path: str) -> bool:
        await self.start()
        return (await self.link.run(["test", "-d", path], timeout=10)).ok

    async def stop(self) -> None:
        await super().stop()
        await self.link.close()

    def health(self) -> dict:
        if self.down_reason is not None:
            return {"status": "down", "reason": self.down_reason}
        return {"status": "ok" if self.link.alive else "idle"}

    # --- losing and regaining the host -------------------------------------------------------
    async def _recover(self, reason: str) -> None:
        """The connection (or the host's tmux) went away. Agents turn unreachable, the link is
        re-made with backoff, and the windows are re-adopted; past `dead_after_s`, they are gone."""
        async with self._started:
            lost = self._source
            if lost is not None:
                await lost.stop()
                self._source = None
            link_gone = not await self.link.check()
            if not link_gone and await self.server_running():
                # Only the control client ended: tmux and the connection live. Reconnect at once.
                try:
                    await super()._connect()
                    await self._reconcile()
                    return
                except (BackendError, ConnectionError, OSError) as exc:
                    reason = f"{reason}; reconnecting failed: {exc}"
            if self.link.alive and not await self.server_running():
                await self._tmux_server_gone(reason)
                return
            why = self.link.last_error() if link_gone else reason
            self.down_reason = f"host {self.host} unreachable: {why}"
            self.down_since = time.monotonic()
            await self.link.close()
            for terminal_id in list(self.panes.pane_of_terminal):
                self.bus.publish(TerminalUnreachable(terminal_id, self.down_reason))
            log.warning("%s; reconnecting", self.down_reason)
        self._recovery = self.spawn(self._reconnect_loop(), f"host-reconnect:{self.host}")

    def adopt_later(self, terminal_id: str, window_id: str, reason: str) -> None:
        """A terminal of this host, found at a restart that could not reach it: re-adopted
        when the connection is made (the reconnect loop runs from now on)."""
        self.pending[terminal_id] = window_id
        self.bus.publish(TerminalUnreachable(terminal_id, reason))
        if self.down_since is None:
            self.down_since = time.monotonic()
            self.down_reason = reason
        if self._recovery is None or self._recovery.done():
            self._recovery = self.spawn(self._reconnect_loop(), f"host-reconnect:{self.host}")

    async def _adopt_pending(self) -> None:
        pending, self.pending = self.pending, {}
        if not pending:
            return
        windows = {w.window_id: w for w in await self.list_windows()}
        for terminal_id, window_id in pending.items():
            info = windows.get(window_id)
            if info is None:
                why = f"its window on host {self.host} is gone"
                self.bus.publish(TerminalExited(terminal_id, window_gone=True, reason=why))
                continue
            self.source.watch(info.pane_id, terminal_id, window_id)
            if info.dead and self.panes.report_dead_once(terminal_id):
                self.bus.publish(TerminalExited(terminal_id, exit_code=info.exit_code))
            else:
                self.request_snapshot(terminal_id)

    async def _reconnect_loop(self) -> None:
        attempt = 0
        while not self._stopping:
            await asyncio.sleep(RECONNECT_DELAYS_S[min(attempt, len(RECONNECT_DELAYS_S) - 1)])
            attempt += 1
            async with self._started:
                try:
                    await self._connect()
                except (BackendError, ConnectionError, OSError) as exc:
                    self.down_reason = f"host {self.host} unreachable: {exc}"
                    if self._declare_dead_if_late():
                        return
                    continue
                log.warning("host %s reconnected after %d attempt(s)", self.host, attempt)
                self.down_reason = None
                await self._reconcile()
            await self._adopt_pending()
            return

    def _declare_dead_if_late(self) -> bool:
        """Past `dead_after_s` unreachable: the host's agents are gone (the next agent placed
        there connects afresh). True when declared."""
        if self.down_since is None or time.monotonic() - self.down_since < self.dead_after_s:
            return False
        why = f"host {self.host} unreachable for more than {self.dead_after_s:g}s ({self.down_reason})"
        gone = list(self.panes.pane_of_terminal)
        for terminal_id in gone:
            self.panes.remove(terminal_id)
        log.error("%s; %d agent(s) gone", why, len(gone))
        self.bus.publish(BackendLost(self.name, why, host=self.host))
        return True

    async def _tmux_server_gone(self, reason: str) -> None:
        why = f"the tmux server on host {self.host} ended: {reason}"
        self.down_reason = why
        watched = list(self.panes.pane_of_terminal)
        for terminal_id in watched:
            self.panes.remove(terminal_id)
        log.error("%s; %d agent(s) gone", why, len(watched))
        self.bus.publish(BackendLost(self.name, why, host=self.host))

    @property
    def source(self) -> ControlClient:
        src = self._source
        if not isinstance(src, ControlClient):
            raise HostUnreachable(self.down_reason or f"host {self.host} is not connected")
        return src
