"""Running a workflow script as its own process: a constructed (not inherited)
environment, stdout and stderr drained concurrently into bounded tails, the last
`CAO_WORKFLOW_OUTPUT:` line taken as the run's output, and a stop that escalates
from SIGTERM to SIGKILL for the whole process group.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

SENTINEL = b"CAO_WORKFLOW_OUTPUT:"
TAIL_BYTES = 256 * 1024
# A sentinel line longer than this is not an output a human could read back anyway.
MAX_SENTINEL_BYTES = 1024 * 1024
STOP_GRACE_S = 5.0
# After the script exits, how long children it left behind may keep its pipes open.
PIPE_LINGER_S = 5.0


@dataclass
class ScriptOutcome:
    returncode: int | None
    stdout_tail: str
    stderr_tail: str
    has_output: bool = False
    output: Any = None
    warnings: list[str] = field(default_factory=list)


def script_env(*, run_id: str, generation: int, base_url: str, inputs_json: str,
               resume: bool) -> dict[str, str]:
    """Exactly what a script gets: its identity, the server address, its inputs, and
    PATH/HOME. Nothing else of the server's environment leaks into it."""
    env = {
        "CAO_WORKFLOW_RUN_ID": run_id,
        "CAO_WORKFLOW_GENERATION": str(generation),
        "CAO_API_BASE_URL": base_url,
        "CAO_WORKFLOW_INPUTS": inputs_json,
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/"),
    }
    if resume:
        env["CAO_WORKFLOW_RESUME"] = "1"
    return env


class _Tail:
    """The last TAIL_BYTES of a stream, plus the last sentinel line seen in it."""

    def __init__(self, scan_sentinel: bool):
        self.buf = bytearray()
        self.partial = bytearray()
        self.sentinel: bytes | None = None
        self.sentinel_too_long = False
        self.scan = scan_sentinel

    def feed(self, chunk: bytes) -> None:
        self.buf += chunk
        if len(self.buf) > TAIL_BYTES:
            del self.buf[:len(self.buf) - TAIL_BYTES]
        if not self.scan:
            return
        self.partial += chunk
        *lines, rest = self.partial.split(b"\n")
        for line in lines:
            self._line(line)
        self.partial = bytearray(rest)
        if len(self.partial) > MAX_SENTINEL_BYTES + len(SENTINEL):
            # Not a line we could use; keep only enough to recognise the next one.
            self.sentinel_too_long = self.sentinel_too_long or self.partial.startswith(SENTINEL)
            self.partial = bytearray()

    def _line(self, line: bytes) -> None:
        line = line.rstrip(b"\r")
        if line.startswith(SENTINEL):
            self.sentinel = bytes(line[len(SENTINEL):])

    def close(self) -> None:
        if self.scan and self.partial:
            self._line(bytes(self.partial))

    def text(self) -> str:
        return self.buf.decode("utf-8", "replace")


class ScriptProcess:
    """One drive of a script. `start`, then `wait`; `stop` from anywhere.

    Plain threads read the pipes and wait for the exit: asyncio's subprocess `wait()`
    also waits for the pipes to close, which a child the script left behind can delay
    forever; here the exit is seen the moment it happens.
    """

    def __init__(self, path: Path, env: dict[str, str], cwd: Path | None = None):
        self.path, self.env, self.cwd = path, env, cwd
        self.proc: subprocess.Popen | None = None
        self._stdout = _Tail(scan_sentinel=True)
        self._stderr = _Tail(scan_sentinel=False)
        self._readers: list[threading.Thread] = []
        self._exited = asyncio.Event()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        # Own process group: a stop reaches the script's children too.
        self.proc = subprocess.Popen(
            [sys.executable, str(self.path)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=self.env, cwd=str(self.cwd) if self.cwd else None,
            start_new_session=True)
        for stream, tail in ((self.proc.stdout, self._stdout), (self.proc.stderr, self._stderr)):
            reader = threading.Thread(target=_drain, args=(stream, tail), daemon=True,
                                      name=f"cao-script-{self.proc.pid}")
            reader.start()
            self._readers.append(reader)
        proc = self.proc

        def wait_exit() -> None:
            proc.wait()
            loop.call_soon_threadsafe(self._exited.set)

        threading.Thread(target=wait_exit, daemon=True, name=f"cao-script-wait-{proc.pid}").start()

    async def wait(self, timeout: float | None) -> tuple[ScriptOutcome, bool]:
        """Wait for the process to end (stopping it after `timeout`); returns the outcome
        and whether it timed out."""
        assert self.proc is not None
        timed_out = False
        try:
            await asyncio.wait_for(self._exited.wait(), timeout)
        except asyncio.TimeoutError:
            timed_out = True
            await self.stop()
        if not await self._pipes_closed(PIPE_LINGER_S):
            # The script is gone but something it started still holds its stdout or
            # stderr open; the run must not hang on it. End the whole process group.
            _signal_group(self.proc.pid, signal.SIGKILL)
            await self._pipes_closed(PIPE_LINGER_S)
            self._stderr.feed(b"\n[cao] processes the script left behind were killed\n")
        return self._outcome(), timed_out

    async def _pipes_closed(self, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for reader in self._readers:
            await asyncio.to_thread(reader.join, max(0.0, deadline - loop.time()))
        return not any(r.is_alive() for r in self._readers)

    async def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it after the grace period."""
        if self.proc is None or self._exited.is_set():
            return
        _signal_group(self.proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(self._exited.wait(), STOP_GRACE_S)
        except asyncio.TimeoutError:
            _signal_group(self.proc.pid, signal.SIGKILL)
            await self._exited.wait()

    def _outcome(self) -> ScriptOutcome:
        assert self.proc is not None
        out = ScriptOutcome(self.proc.returncode, self._stdout.text(), self._stderr.text())
        if self._stdout.sentinel_too_long:
            out.warnings.append(f"an output line over {MAX_SENTINEL_BYTES} bytes was ignored")
        if self._stdout.sentinel is not None:
            try:
                out.output, out.has_output = json.loads(self._stdout.sentinel.decode("utf-8")), True
            except (UnicodeDecodeError, ValueError):
                out.warnings.append("malformed sentinel payload: the last CAO_WORKFLOW_OUTPUT: line "
                                    "is not JSON; the run has no output")
        return out


def _drain(stream: IO[bytes], tail: _Tail) -> None:
    while chunk := stream.read1(65536):
        tail.feed(chunk)
    tail.close()
    stream.close()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:  # the group leader is gone and the id reused: only the pid
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def kill_orphan(pid: int, run_id: str) -> bool:
    """After a server crash: end a script left from the lost drive, if `pid` still is it
    (checked by its environment, so a reused pid is never hit)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    if f"CAO_WORKFLOW_RUN_ID={run_id}".encode() not in environ.split(b"\0"):
        return False
    _signal_group(pid, signal.SIGKILL)
    return True
