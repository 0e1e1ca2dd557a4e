"""One piped terminal's FIFO and the thread that reads it: FIFO bytes → TerminalOutput,
snapshots on request, a closed pipe re-piped, the pane's end → TerminalExited once.
(`bus.publish` is thread-safe.)
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import select
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..bus import EventBus
from ..events import ScreenSnapshot, TerminalExited, TerminalOutput
from .tmux_commands import SNAPSHOT_FORMAT, cursor_and_title, pipe_command
from .tmux_pane_watch import STATE_FORMAT, PaneState, ProcessWatch, pane_state, parse_state, zombie_exit_code
from .tmux_process import BlockingTmux

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
REPIPE_LIMIT = 3  # reconnects per REPIPE_WINDOW_S before the reader gives up
REPIPE_WINDOW_S = 10.0
THREAD_NAME = "cao-fifo"  # also the OS thread name (Linux), visible in /proc and `top -H`


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


class FifoReader:
    """One terminal: FIFO bytes → TerminalOutput, end of the pane → TerminalExited."""

    def __init__(
        self,
        tmux: BlockingTmux,
        bus: EventBus,
        terminal_id: str,
        pane_id: str,
        path: Path,
        piped: bool,
        on_window_gone: Callable[[], None] | None = None,
    ):
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
        self._process = ProcessWatch(self._poll)
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

    def _pipe(self) -> PaneState | None:
        """(Re)start the pipe; with it, in the same tmux command, read the pane's state
        and publish a snapshot. tmux runs a command list without reading any pane in
        between, so this snapshot sits exactly where the FIFO's stream begins.

        Without -o, any existing pipe (e.g. a cat left by a killed cao-server) is
        replaced; -O sends the pane's output to the command's stdin."""
        ok, out = self.tmux(
            "display-message",
            "-p",
            "-t",
            self.pane_id,
            STATE_FORMAT,
            ";",
            "pipe-pane",
            "-O",
            "-t",
            self.pane_id,
            pipe_command(self.path),
            ";",
            *self._snapshot_args(),
        )
        if not ok:  # the pane is gone or dead (tmux refuses to pipe a dead pane)
            log.debug("pipe-pane %s failed: %s", self.pane_id, out.strip())
            self._piped_ok = False
            return pane_state(self.tmux, self.pane_id)
        self._piped_ok = True
        state, _, snapshot = out.partition("\n")
        self._publish_snapshot(snapshot)
        return parse_state(state)

    def _begin(self) -> bool:
        pane = pane_state(self.tmux, self.pane_id) if self.piped else self._pipe()
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
        if not self._process.start(pane.pid):
            self._on_process_exit()
        return True

    def _loop(self) -> None:
        while not self._stopping:
            ready = {fd for fd, _ in self._poll.poll(self._process.poll_timeout_ms())}
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
            if self._process.ended(ready):
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
        pane = pane_state(self.tmux, self.pane_id)
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
            log.error("pipe of %s (%s) keeps closing; its output is no longer read", self.terminal_id, self.pane_id)
            return False
        log.warning("pipe of %s (%s) was closed; reconnecting", self.terminal_id, self.pane_id)
        self._open_fifo()  # a fresh open: the hang-up of the old one would persist
        self._pipe()
        return True

    def _on_process_exit(self) -> None:
        """The pane's process ended: wait for tmux to mark the pane dead (reading the
        last output meanwhile), then report it with its exit status."""
        self._process.close()
        deadline = time.monotonic() + DEATH_SETTLE_S
        while not self._stopping and not self._exited:
            pane = pane_state(self.tmux, self.pane_id)
            if pane is None:
                self._publish_exit(None, window_gone=True)
                return
            if pane.settled or time.monotonic() >= deadline:
                self._drain(SETTLE_STEP_S)
                self._publish_exit(pane.code if pane.settled else zombie_exit_code(pane.pid))
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

    def _snapshot_args(self) -> list[str]:
        return [
            "display-message",
            "-p",
            "-t",
            self.pane_id,
            SNAPSHOT_FORMAT,
            ";",
            "capture-pane",
            "-p",
            "-e",
            "-t",
            self.pane_id,
        ]

    def _snapshot(self) -> None:
        ok, out = self.tmux(*self._snapshot_args())
        if ok:
            self._publish_snapshot(out)

    def _publish_snapshot(self, out: str) -> None:
        """`out`: the cursor line, then the captured rows (each ending in a newline)."""
        cursor, _, text = out.partition("\n")
        x, y, title = cursor_and_title(cursor)
        self.bus.publish(ScreenSnapshot(self.terminal_id, text[:-1] if text.endswith("\n") else text, x, y, title))

    def _cleanup(self) -> None:
        if self._stopping and self._close_pipe and not self._exited:
            self.tmux("pipe-pane", "-t", self.pane_id)  # no command: closes the pipe; cat ends
        own_inode = None
        if self._fd >= 0:
            own_inode = os.fstat(self._fd).st_ino
            os.close(self._fd)
        self._process.close()
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
