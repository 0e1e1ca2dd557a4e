"""The pipe-pane output source (seed 003's original design), the fallback to the
control-mode client: `CAO_OUTPUT_SOURCE=pipe-pane`.

Each watched pane gets `tmux pipe-pane -O -t <pane> 'exec cat >> <fifo>'` into a
named FIFO under `<cao home>/fifos/<terminal_id>.fifo`, read by one thread per
terminal (`_FifoReader`) that publishes `TerminalOutput` on the bus
(`bus.publish` is thread-safe).

What this source does differently from the control client, and why:

* Pane death. cao sets `remain-on-exit`, so a dead pane and its pipe stay open
  (and tmux refuses `pipe-pane` on a dead pane, so a `pane-died` hook cannot close
  it either): the FIFO does not end when the agent exits. The reader therefore
  watches the pane's process itself (a pidfd on Linux, a cheap liveness poll
  elsewhere); when it ends it waits for tmux to mark the pane dead and reads
  `#{pane_dead_status}` with a tmux client process. The FIFO does end when the
  window is destroyed; then the window is reported gone.
* Requested snapshots are taken with tmux client processes after draining what
  the FIFO holds, so their place in the stream is best-effort: bytes still in
  flight between tmux and the FIFO may be applied on top of a snapshot that
  already shows them. (The snapshot published when a pipe is (re)started is
  exact: it is taken in the same tmux command.)
* Layout changes (a human attaching with another size) are not detected.
* No tmux commands travel over this source: the backend runs tmux client
  processes while it is active.
"""
from __future__ import annotations

import asyncio
import ctypes
import functools
import logging
import os
import select
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..bus import EventBus
from ..events import ScreenSnapshot, TerminalExited, TerminalOutput

if TYPE_CHECKING:
    from .tmux_control import PaneMap

log = logging.getLogger(__name__)

READ_SIZE = 64 * 1024
# Chunks already waiting in the FIFO are published as one event (fewer loop
# wake-ups during floods). There is deliberately no waiting window: it would merge
# the echo of pasted input with the reply to Enter a few ms later, and the status
# monitor needs to see the typed text on screen to tell a new turn from the last.
MAX_BATCH = 256 * 1024
# After the pane's process ends, how long to wait for tmux to reap it and know its
# exit status. tmux 3.3a occasionally leaves a dead pane's process unreaped for
# good (the control client then reports no code either): report without one.
DEATH_SETTLE_S = 1.0
SETTLE_STEP_S = 0.05
PID_POLL_S = 1.0  # only where pidfd_open is missing (not Linux)
REPIPE_LIMIT = 3  # reconnects per REPIPE_WINDOW_S before the reader gives up
REPIPE_WINDOW_S = 10.0
TMUX_TIMEOUT_S = 10.0
JOIN_TIMEOUT_S = 3.0
THREAD_NAME = "cao-fifo"  # also the OS thread name (Linux), visible in /proc and `top -H`


def pipe_command(fifo: Path) -> str:
    """The shell command tmux pipes the pane into. `exec` leaves one process (cat);
    `#` is doubled because tmux expands formats in pipe-pane's command."""
    return f"exec cat >> {shlex.quote(str(fifo))}".replace("#", "##")


def fresh_fifo(path: Path) -> None:
    """A new FIFO (0600) at `path`; a stale one may still be held by an old cat."""
    path.unlink(missing_ok=True)
    os.mkfifo(path, 0o600)


@functools.lru_cache(maxsize=1)
def _prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _name_os_thread(name: str) -> None:
    prctl = _prctl()
    if prctl is not None:
        prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


class _Tmux:
    """tmux client processes, run from reader threads (blocking is fine there)."""

    def __init__(self, argv: list[str]):
        self.argv = argv
        self.env = {k: v for k, v in os.environ.items() if k != "TMUX"}

    def __call__(self, *args: str) -> tuple[bool, str]:
        try:
            proc = subprocess.run([*self.argv, *args], env=self.env, capture_output=True,
                                  timeout=TMUX_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, str(exc)
        if proc.returncode != 0:
            return False, proc.stderr.decode("utf-8", "replace")
        return True, proc.stdout.decode("utf-8", "replace")


@dataclass(frozen=True)
class _PaneState:
    pid: int
    dead: bool
    code: int | None
    # tmux marks a pane dead when its pty closes, but knows the exit status (or
    # signal) only once it has reaped the process: wait for that before reporting.
    settled: bool


_STATE_FORMAT = "#{pane_pid}\t#{pane_dead}\t#{pane_dead_status}\t#{pane_dead_signal}"


def _parse_state(line: str) -> _PaneState | None:
    parts = line.split("\t")
    if len(parts) != 4 or not parts[0].isdigit():
        return None
    pid, dead, status, signal = parts
    return _PaneState(int(pid), dead == "1", int(status) if status.lstrip("-").isdigit() else None,
                      dead == "1" and (status != "" or signal != ""))


class _FifoReader:
    """One terminal: FIFO bytes → TerminalOutput, end of the pane → TerminalExited."""

    def __init__(self, tmux: _Tmux, bus: EventBus, terminal_id: str, pane_id: str, path: Path,
                 piped: bool, on_window_gone: Callable[[], None] | None = None):
        self.tmux = tmux
        self.on_window_gone = on_window_gone
        self.bus = bus
        self.terminal_id = terminal_id
        self.pane_id = pane_id
        self.path = path
        self.piped = piped  # the creating tmux command already started the pipe
        self.thread = threading.Thread(target=self._run, name=f"{THREAD_NAME}-{terminal_id}", daemon=True)
        # The loop side wakes the thread through this pipe; it owns and closes the
        # write end, so a late wake-up never hits a reused descriptor.
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._poll = select.poll()
        self._fd = -1
        self._pidfd = -1
        self._pid = 0  # watched by polling where pidfd is unavailable
        self._stopping = False
        self._close_pipe = True
        self._snapshot_wanted = False
        self._exited = False
        self._repipes: list[float] = []
        self._piped_ok = piped

    # --- loop side --------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def stop(self, close_pipe: bool) -> None:
        if self._stopping:
            return
        self._close_pipe = close_pipe
        self._stopping = True
        os.close(self._wake_w)  # the reader sees the hang-up and ends

    def request_snapshot(self) -> bool:
        if self._stopping or not self.thread.is_alive():
            return False
        self._snapshot_wanted = True
        try:
            os.write(self._wake_w, b"s")
        except BlockingIOError:
            pass  # the pipe is full of wake-ups already
        except OSError:
            return False
        return True

    # --- reader thread ------------------------------------------------------------
    def _run(self) -> None:
        _name_os_thread(THREAD_NAME)
        try:
            self._open_fifo()
            self._poll.register(self._wake_r, select.POLLIN)
            if self._begin():
                self._loop()
        except Exception:  # the reader must report, not die silently
            log.exception("fifo reader of %s failed", self.terminal_id)
        finally:
            self._cleanup()

    def _open_fifo(self) -> None:
        if self._fd >= 0:
            self._poll.unregister(self._fd)
            os.close(self._fd)
        if not self.path.exists():
            fresh_fifo(self.path)
        # O_NONBLOCK: opening never waits for a writer, and EOF (all writers gone)
        # is still seen, unlike with O_RDWR.
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self._poll.register(self._fd, select.POLLIN)

    def _pipe(self) -> _PaneState | None:
        """(Re)start the pipe; with it, in the same tmux command, read the pane's state
        and publish a snapshot. tmux runs a command list without reading any pane in
        between, so this snapshot sits exactly where the FIFO's stream begins.

        Without -o, any existing pipe (e.g. a cat left by a killed cao-server) is
        replaced; -O sends the pane's output to the command's stdin."""
        ok, out = self.tmux("display-message", "-p", "-t", self.pane_id, _STATE_FORMAT, ";",
                            "pipe-pane", "-O", "-t", self.pane_id, pipe_command(self.path), ";",
                            *self._snapshot_args())
        if not ok:  # the pane is gone or dead (tmux refuses to pipe a dead pane)
            log.debug("pipe-pane %s failed: %s", self.pane_id, out.strip())
            self._piped_ok = False
            return self._pane_state()
        self._piped_ok = True
        state, _, snapshot = out.partition("\n")
        self._publish_snapshot(snapshot)
        return _parse_state(state)

    def _begin(self) -> bool:
        pane = self._pane_state() if self.piped else self._pipe()
        if pane is None:
            if self.piped:
                self._publish_exit(None, window_gone=True)
            return False
        if pane.dead:
            # A pane found dead while adopting is reported by the adopter itself
            # (from list_windows); one that died right after creation is ours.
            if self.piped:
                self._on_process_exit()
            self._exited = True
            return True
        if not self.piped and not self._piped_ok:
            log.error("could not pipe pane %s of %s; its output is not read", self.pane_id, self.terminal_id)
        self._watch_process(pane.pid)
        return True

    def _watch_process(self, pid: int) -> None:
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            self._on_process_exit()
        except (AttributeError, OSError):
            self._pid = pid
        else:
            self._poll.register(self._pidfd, select.POLLIN)

    def _loop(self) -> None:
        while not self._stopping:
            timeout_ms = int(PID_POLL_S * 1000) if self._pid else None
            ready = {fd for fd, _ in self._poll.poll(timeout_ms)}
            if self._stopping:
                break
            if self._wake_r in ready:
                os.read(self._wake_r, 512)
            if self._fd in ready:
                data = self._read_batch()
                if data is None:
                    if not self._on_eof():
                        return
                elif data:
                    self.bus.publish(TerminalOutput(self.terminal_id, data))
            if self._snapshot_wanted:
                self._snapshot_wanted = False
                self._drain(0.0)
                self._snapshot()
            if self._pidfd >= 0 and self._pidfd in ready:
                self._on_process_exit()
            elif self._pid and not _pid_alive(self._pid):
                self._on_process_exit()

    def _read_batch(self) -> bytes | None:
        """Everything the FIFO holds now (up to MAX_BATCH); None at EOF (every writer gone)."""
        try:
            first = os.read(self._fd, READ_SIZE)
        except BlockingIOError:
            return b""
        if not first:
            return None
        chunks, size = [first], len(first)
        while size < MAX_BATCH and len(chunks[-1]) == READ_SIZE:  # a full read: maybe more
            try:
                more = os.read(self._fd, READ_SIZE)
            except BlockingIOError:
                break
            if not more:
                break  # EOF: the next poll sees the hang-up again
            chunks.append(more)
            size += len(more)
        return b"".join(chunks)

    def _drain(self, quiet_s: float) -> bool:
        """Publish what arrives until the FIFO is quiet for `quiet_s`; False at EOF."""
        while True:
            if not _poll_one(self._fd, quiet_s):
                return True
            data = self._read_batch()
            if data is None:
                return False
            if data:
                self.bus.publish(TerminalOutput(self.terminal_id, data))

    def _on_eof(self) -> bool:
        """Every writer closed the FIFO. Returns whether to go on reading."""
        pane = self._pane_state()
        if pane is None:
            self._publish_exit(None, window_gone=True)
            return False
        if pane.dead:
            self._on_process_exit()
            return False
        # The pane lives but our pipe was closed or replaced behind our back: reconnect
        # (a few times at most) and resync, since bytes were lost in between.
        now = time.monotonic()
        self._repipes = [t for t in self._repipes if now - t < REPIPE_WINDOW_S] + [now]
        if len(self._repipes) > REPIPE_LIMIT:
            log.error("pipe of %s (%s) keeps closing; its output is no longer read",
                      self.terminal_id, self.pane_id)
            return False
        log.warning("pipe of %s (%s) was closed; reconnecting", self.terminal_id, self.pane_id)
        self._open_fifo()  # a fresh open: the hang-up of the old one would persist
        self._pipe()
        return True

    def _on_process_exit(self) -> None:
        """The pane's process ended: wait for tmux to mark the pane dead (reading the
        last output meanwhile), then report it with its exit status."""
        if self._pidfd >= 0:
            self._poll.unregister(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        self._pid = 0
        deadline = time.monotonic() + DEATH_SETTLE_S
        while not self._stopping and not self._exited:
            pane = self._pane_state()
            if pane is None:
                self._publish_exit(None, window_gone=True)
                return
            if pane.settled or time.monotonic() >= deadline:
                self._drain(SETTLE_STEP_S)
                self._publish_exit(pane.code)
                return
            if not self._drain(SETTLE_STEP_S):
                self._pause(SETTLE_STEP_S)  # the FIFO is at EOF: wait without spinning

    def _pause(self, seconds: float) -> None:
        """Wait, but wake at once on stop (a pending snapshot request stays flagged)."""
        if _poll_one(self._wake_r, seconds) and not self._stopping:
            os.read(self._wake_r, 512)

    def _publish_exit(self, code: int | None, window_gone: bool = False) -> None:
        if not self._exited:
            self._exited = True
            self.bus.publish(TerminalExited(self.terminal_id, exit_code=code, window_gone=window_gone))
            if window_gone and self.on_window_gone is not None:
                self.on_window_gone()

    def _pane_state(self) -> _PaneState | None:
        """The pane as tmux sees it now, or None when it no longer exists."""
        ok, out = self.tmux("display-message", "-p", "-t", self.pane_id, _STATE_FORMAT)
        return _parse_state(out.rstrip("\n")) if ok else None

    def _snapshot_args(self) -> list[str]:
        return ["display-message", "-p", "-t", self.pane_id, "#{cursor_x} #{cursor_y}", ";",
                "capture-pane", "-p", "-e", "-t", self.pane_id]

    def _snapshot(self) -> None:
        ok, out = self.tmux(*self._snapshot_args())
        if ok:
            self._publish_snapshot(out)

    def _publish_snapshot(self, out: str) -> None:
        """`out`: the cursor line, then the captured rows (each ending in a newline)."""
        cursor, _, text = out.partition("\n")
        parts = cursor.split()
        x, y = (int(parts[0]), int(parts[1])) if len(parts) == 2 and all(p.isdigit() for p in parts) else (0, 0)
        self.bus.publish(ScreenSnapshot(self.terminal_id, text[:-1] if text.endswith("\n") else text, x, y))

    def _cleanup(self) -> None:
        if self._stopping and self._close_pipe and not self._exited:
            self.tmux("pipe-pane", "-t", self.pane_id)  # no command: closes the pipe; cat ends
        own_inode = None
        for fd in (self._fd, self._pidfd):
            if fd >= 0:
                if fd == self._fd:
                    own_inode = os.fstat(fd).st_ino
                os.close(fd)
        os.close(self._wake_r)
        # Remove the FIFO unless a newer reader of the same terminal already made its own.
        try:
            if own_inode is None or os.stat(self.path).st_ino == own_inode:
                self.path.unlink(missing_ok=True)
        except FileNotFoundError:
            pass


def _poll_one(fd: int, timeout_s: float) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(int(timeout_s * 1000)))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class PipePaneSource:
    """The output side of ControlClient (start/stop/alive/watch/unwatch/
    request_snapshot), over pipe-pane and FIFOs. It offers no `command`.

    `on_lost(reason)` is called (on the loop) when a window vanishes and the tmux server
    turns out to be gone with it."""

    def __init__(self, tmux_argv: list[str], fifo_dir: Path, bus: EventBus, panes: "PaneMap",
                 on_lost: Callable[[str], None] | None = None):
        self.tmux = _Tmux(tmux_argv)
        self.fifo_dir = fifo_dir
        self.bus = bus
        self.panes = panes
        self.on_lost = on_lost
        self._readers: dict[str, _FifoReader] = {}
        self._prepared: set[str] = set()  # FIFOs made for a window being created
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lost = False
        self.alive = False

    def window_gone(self) -> None:
        """From a reader thread: a window vanished. If the whole server went with it, say so."""
        ok, _ = self.tmux("list-sessions", "-F", "x")
        if ok or self._lost or self._loop is None or self.on_lost is None:
            return
        self._lost = True
        self.alive = False
        self._loop.call_soon_threadsafe(self.on_lost, "the tmux server is no longer running")

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.fifo_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.fifo_dir, 0o700)
        # FIFOs left by a killed server: nobody reads them; watch() makes new ones.
        for stale in self.fifo_dir.glob("*.fifo"):
            if stale.stem not in self._readers and stale.stem not in self._prepared:
                stale.unlink(missing_ok=True)
        self.alive = True

    async def stop(self) -> None:
        self.alive = False
        readers = list(self._readers.values())
        self._readers.clear()
        for reader in readers:
            reader.stop(close_pipe=True)
        await asyncio.to_thread(_join_all, readers, JOIN_TIMEOUT_S)

    def fifo_path(self, terminal_id: str) -> Path:
        return self.fifo_dir / f"{terminal_id}.fifo"

    def pipe_args(self, terminal_id: str, target: str) -> list[str]:
        """The pipe-pane command for the tmux command that creates the window, so
        the pane's first byte already goes to the FIFO (cat waits for our reader)."""
        path = self.fifo_path(terminal_id)
        fresh_fifo(path)
        self._prepared.add(terminal_id)
        return ["pipe-pane", "-O", "-t", target, pipe_command(path)]

    def watch(self, pane_id: str, terminal_id: str, window_id: str) -> None:
        old = self._readers.pop(terminal_id, None)
        if old is not None:
            old.stop(close_pipe=False)  # the new reader replaces the pipe itself
        piped = terminal_id in self._prepared
        self._prepared.discard(terminal_id)
        if not piped:
            fresh_fifo(self.fifo_path(terminal_id))
        reader = _FifoReader(self.tmux, self.bus, terminal_id, pane_id, self.fifo_path(terminal_id), piped,
                             on_window_gone=self.window_gone)
        self.panes.add(terminal_id, pane_id, window_id)
        self._readers[terminal_id] = reader
        reader.start()

    def unwatch(self, terminal_id: str) -> None:
        self.panes.remove(terminal_id)
        reader = self._readers.pop(terminal_id, None)
        if reader is not None:
            reader.stop(close_pipe=True)  # the reader removes its FIFO as it ends
        elif terminal_id in self._prepared:
            self._prepared.discard(terminal_id)
            self.fifo_path(terminal_id).unlink(missing_ok=True)

    def request_snapshot(self, terminal_id: str) -> bool:
        reader = self._readers.get(terminal_id)
        return self.alive and reader is not None and reader.request_snapshot()


def _join_all(readers: list[_FifoReader], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for reader in readers:
        reader.thread.join(max(0.0, deadline - time.monotonic()))
