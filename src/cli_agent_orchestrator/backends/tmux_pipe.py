"""The pipe-pane output source (seed 003's original design), the fallback to the
control-mode client: `CAO_OUTPUT_SOURCE=pipe-pane`.

Each watched pane gets `tmux pipe-pane -O -t <pane> 'exec cat >> <fifo>'` into a
named FIFO under `<cao home>/fifos/<terminal_id>.fifo`, read by one thread per
terminal (`FifoReader`, tmux_fifo.py) that publishes `TerminalOutput` on the bus
(`bus.publish` is thread-safe).

What this source does differently from the control client, and why:

* Pane death. cao sets `remain-on-exit`, so a dead pane and its pipe stay open
  (and tmux refuses `pipe-pane` on a dead pane, so a `pane-died` hook cannot close
  it either): the FIFO does not end when the agent exits. The reader therefore
  watches the pane's process itself (a pidfd on Linux, a cheap liveness poll
  elsewhere: tmux_pane_watch.py); when it ends it waits for tmux to mark the pane
  dead and reads `#{pane_dead_status}` with a tmux client process. The FIFO does
  end when the window is destroyed; then the window is reported gone.
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
import os
import time
from collections.abc import Callable
from pathlib import Path

from ..bus import EventBus
from .tmux_commands import pipe_command
from .tmux_fifo import FifoReader, fresh_fifo
from .tmux_panes import PaneMap
from .tmux_process import BlockingTmux

JOIN_TIMEOUT_S = 3.0


class PipePaneSource:
    """The output side of ControlClient (start/stop/alive/watch/unwatch/
    request_snapshot), over pipe-pane and FIFOs. It offers no `command`.

    `on_lost(reason)` is called (on the loop) when a window vanishes and the tmux server
    turns out to be gone with it."""

    def __init__(
        self,
        tmux_argv: list[str],
        fifo_dir: Path,
        bus: EventBus,
        panes: PaneMap,
        on_lost: Callable[[str], None] | None = None,
    ):
        self.tmux = BlockingTmux(tmux_argv)
        self.fifo_dir = fifo_dir
        self.bus = bus
        self.panes = panes
        self.on_lost = on_lost
        self._readers: dict[str, FifoReader] = {}
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
        reader = FifoReader(
            self.tmux,
            self.bus,
            terminal_id,
            pane_id,
            self.fifo_path(terminal_id),
            piped,
            on_window_gone=self.window_gone,
        )
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


def _join_all(readers: list[FifoReader], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for reader in readers:
        reader.thread.join(max(0.0, deadline - time.monotonic()))
