"""The hook channel: how the CLIs' command hooks reach cao-server without starting Python.

A hook runs the terminal's bash script (providers/common.py): its JSON payload goes to
`<tmp>/<terminal id>/hook-<pid>.json`, then one record of fewer than PIPE_BUF bytes to the
FIFO `<tmp>/hooks.fifo`, so records of concurrent hooks never interleave. One reader takes
them in the order they were written. Invariant: a record changes something only if it carries
its terminal's hook secret, and then it goes the way of POST /terminals/{id}/hooks (the secret
check, then HookReceived on the bus; the status monitor alone decides what it means); only then
is the hook acked (a line on `<tmp>/<terminal id>/hook-ack`), so the CLI goes on after its event
is applied, as it would after a synchronous HTTP hook.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import stat
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Protocol

from ...bus import EventBus
from ...errors import CaoError
from ...events import HookReceived
from ...private_files import write_private
from ...providers.common import HOOK_ACK_NAME, HOOK_FIFO_NAME, HOOK_RECORD_TAG, HOOK_SERVER_PID_NAME

log = logging.getLogger(__name__)

MAX_PAYLOAD = 256 * 1024  # as cao-hook: a longer payload is cut, and then read as text
MAX_RECORD = 512  # records are ~80 bytes; a longer line is not ours
STALE_PAYLOAD_S = 10.0  # at start: payloads this old were written while no server read the FIFO
_RECORD = re.compile(
    rb"%s ([a-f0-9]{8}) ([A-Za-z0-9_-]{0,128}) ([A-Za-z0-9_.:-]{1,64}) ([0-9]{1,10})" % HOOK_RECORD_TAG.encode()
)


class SecretCheck(Protocol):
    async def check_hook_secret(self, terminal_id: str, secret: str | None) -> None: ...


class Spawn(Protocol):
    def __call__(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task | None: ...


def read_payload(path: Path) -> dict:
    """The hook's JSON payload from its file, which is removed; {} when there is none. Only a
    plain file is read (a FIFO or a link put there instead must not hold the server)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return {}
    try:
        raw = os.read(fd, MAX_PAYLOAD) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        raw = b""
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    text = raw.decode("utf-8", errors="replace")
    try:
        value = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        value = {"text": text[:4096]}
    return value if isinstance(value, dict) else {"value": value}


class CliHookChannel:
    """Reads the hook FIFO of one cao home while the server runs."""

    def __init__(self, tmp_dir: Path, terminals: SecretCheck, bus: EventBus, spawn: Spawn):
        self.tmp_dir = tmp_dir
        self.path = tmp_dir / HOOK_FIFO_NAME
        self.pid_file = tmp_dir / HOOK_SERVER_PID_NAME
        self.terminals = terminals
        self.bus = bus
        self.spawn = spawn
        self._fd: int | None = None
        self._pending = b""
        self._records: asyncio.Queue[bytes] = asyncio.Queue()
        self._worker: asyncio.Task | None = None

    async def start(self) -> None:
        """Create the FIFO (or take over the one a previous server left, where surviving agents'
        hooks write) and read it. Opened read-write: it never reports end-of-file when the last
        hook closes it, and the open does not wait for a writer."""
        try:
            if not stat.S_ISFIFO(os.lstat(self.path).st_mode):
                self.path.unlink()
                os.mkfifo(self.path, 0o600)
        except FileNotFoundError:
            os.mkfifo(self.path, 0o600)
        os.chmod(self.path, 0o600)
        self._fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
        self._sweep_stale_payloads()
        self._worker = self.spawn(self._deliver_records(), "hook-channel")
        asyncio.get_running_loop().add_reader(self._fd, self._on_readable)
        write_private(self.pid_file, f"{os.getpid()}\n")  # hooks wait for acks only while it names a live process

    async def stop(self) -> None:
        """Stop reading. The FIFO stays: hooks of surviving agents write into it while no server
        runs (each record is dropped when its hook exits) and the next server reads it again."""
        try:
            if self.pid_file.read_text().strip() == str(os.getpid()):  # not a newer server's
                self.pid_file.unlink()
        except OSError:
            pass
        if self._fd is not None:
            asyncio.get_running_loop().remove_reader(self._fd)
            os.close(self._fd)
            self._fd = None
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
            self._worker = None

    def _sweep_stale_payloads(self) -> None:
        """Payloads whose records went nowhere (written while no server read the FIFO)."""
        cutoff = time.time() - STALE_PAYLOAD_S
        for path in self.tmp_dir.glob("*/hook-*.json"):
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
            except OSError:
                continue

    def _on_readable(self) -> None:
        assert self._fd is not None
        try:
            data = os.read(self._fd, 65536)
        except (BlockingIOError, InterruptedError):
            return
        lines = (self._pending + data).split(b"\n")
        self._pending = lines.pop()
        if len(self._pending) > MAX_RECORD:
            log.warning("hook channel: dropped %d bytes without a record end", len(self._pending))
            self._pending = b""
        for line in lines:
            self._records.put_nowait(line)

    async def _deliver_records(self) -> None:
        while True:
            line = await self._records.get()
            try:
                await self.deliver(line)
            except Exception as exc:  # noqa: BLE001 - one bad record must not stop the channel
                log.exception("hook channel: record failed")
                self.bus.record_failure("hook-channel", "record", exc)

    async def deliver(self, line: bytes) -> bool:
        """One record: checked against its terminal's secret, then published. True if taken."""
        match = _RECORD.fullmatch(line)
        if match is None:
            log.warning("hook channel: refused a malformed record (%d bytes)", len(line))
            return False
        terminal_id, secret, event, pid = (part.decode() for part in match.groups())
        try:
            await self.terminals.check_hook_secret(terminal_id, secret)
        except CaoError as refused:
            log.warning("hook channel: %s", refused)
            return False
        payload = read_payload(self.tmp_dir / terminal_id / f"hook-{pid}.json")
        self.bus.publish(HookReceived(terminal_id, event, payload))
        ack(self.tmp_dir / terminal_id / HOOK_ACK_NAME)
        return True


def ack(path: Path) -> None:
    """Release the hook waiting on the terminal's ack FIFO; nothing if none waits (it gave up)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:  # ENXIO: no hook is reading; ENOENT: the terminal's directory is gone
        return
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, b"\n")
    except OSError:
        pass
    finally:
        os.close(fd)
