"""Log writer: appends each terminal's raw output to `logs/terminal/<id>.log` (0600).

Writes are batched: output is buffered per terminal and flushed shortly after
the first byte of a batch (or at once past a size cap), so a burst of output
costs a handful of disk writes instead of one per event.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ..events import Event, TerminalOutput
from ..private_files import append_private, private_dir
from ..tasks import TaskGroup

FLUSH_DELAY_S = 0.2
FLUSH_BYTES = 256 * 1024


class LogWriter:
    def __init__(self, directory: Path, tasks: TaskGroup):
        self.directory = directory
        self.tasks = tasks
        self._pending: dict[str, bytearray] = {}
        self._timer: asyncio.TimerHandle | None = None

    def path_for(self, terminal_id: str) -> Path:
        return self.directory / f"{terminal_id}.log"

    def on_output(self, event: Event) -> None:
        assert isinstance(event, TerminalOutput)
        buf = self._pending.setdefault(event.terminal_id, bytearray())
        buf += event.data
        if len(buf) >= FLUSH_BYTES:
            self._flush_soon(0)
        elif self._timer is None:
            self._flush_soon(FLUSH_DELAY_S)

    def _flush_soon(self, delay: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(delay, lambda: self.tasks.spawn(self.flush(), "log-flush"))

    async def flush(self) -> None:
        self._timer = None
        batch, self._pending = self._pending, {}
        if batch:
            await asyncio.get_running_loop().run_in_executor(None, self._write, batch)

    def _write(self, batch: dict[str, bytearray]) -> None:
        private_dir(self.directory)
        for terminal_id, data in batch.items():
            append_private(self.path_for(terminal_id), bytes(data))
