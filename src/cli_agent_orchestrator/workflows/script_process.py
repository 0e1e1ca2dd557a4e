"""Running a workflow script as its own process: a constructed (not inherited)
environment, stdout and stderr drained concurrently into bounded tails, the last
`CAO_WORKFLOW_OUTPUT:` line taken as the run's output, and a stop that escalates
from SIGTERM to SIGKILL for everything the script started. The script runs as a process
tree (process_tree.py): what it leaves behind ends with it, and all of it with cao-server.
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..process_tree import kill_tree, popen_tree, signal_tree

SENTINEL = b"CAO_WORKFLOW_OUTPUT:"
TAIL_BYTES = 256 * 1024
# A sentinel line longer than this is not an output a human could read back anyway.
MAX_SENTINEL_BYTES = 1024 * 1024
STOP_GRACE_S = 5.0
# After the script exits, how long children it left behind may keep its pipes open.
PIPE_LINGER_S = 5.0
# After SIGKILL to the group, how long its pipes may take to close; past that, a process
# outside the group (one that called setsid) holds them, and cao stops reading.
KILL_SETTLE_S = 1.0
READ_CHUNK = 65536


@dataclass
class ScriptOutcome:
    returncode: int | None
    stdout_tail: str
    stderr_tail: str
    has_output: bool = False
    output: Any = None
    warnings: list[str] = field(default_factory=list)


def script_env(
    *, run_id: str, generation: int, base_url: str, inputs_json: str, resume: bool, auth_token: str | None = None
) -> dict[str, str]:
    """Exactly what a script gets: its identity, the server address, its inputs, and
    PATH/HOME (plus the server's token when the address is not loopback, where the server
    cannot know the script's user). Nothing else of the server's environment leaks into it."""
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
    if auth_token:
        env["CAO_AUTH_TOKEN"] = auth_token
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
            del self.buf[: len(self.buf) - TAIL_BYTES]
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

    def _line(self, line: bytes | bytearray) -> None:
        line = line.rstrip(b"\r")
        if line.startswith(SENTINEL):
            self.sentinel = bytes(line[len(SENTINEL) :])

    def close(self) -> None:
        if self.scan and self.partial:
            self._line(bytes(self.partial))

    def text(self) -> str:
        return self.buf.decode("utf-8", "replace")


class ScriptProcess:
    """One drive of a script. `start`, then `wait`; `stop` from anywhere.

    Plain threads read the pipes and wait for the exit: asyncio's subprocess `wait()`
    also waits for the pipes to close, which a child the script left behind can delay
    forever; here the exit is seen the moment it happens. Each reader also watches a
    stop pipe, so that a run whose pipes a stray process keeps open still ends with its
    threads and descriptors released.
    """

    def __init__(self, path: Path, env: dict[str, str], cwd: Path | None = None):
        self.path, self.env, self.cwd = path, env, cwd
        self.proc: subprocess.Popen | None = None
        self._stdout = _Tail(scan_sentinel=True)
        self._stderr = _Tail(scan_sentinel=False)
        self._readers_done: list[asyncio.Event] = []
        self._stop_pipe: tuple[int, int] | None = None
        self._exited = asyncio.Event()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        # Under the tree launcher: a stop reaches whatever the script started, setsid or not.
        # Popen only forks and execs (the pipes are read by threads below): nothing here waits.
        self.proc = popen_tree(
            [sys.executable, str(self.path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            cwd=str(self.cwd) if self.cwd else None,
        )
        self._stop_pipe = os.pipe()  # not inherited by children (PEP 446)
        for stream, tail in ((self.proc.stdout, self._stdout), (self.proc.stderr, self._stderr)):
            done = asyncio.Event()
            self._readers_done.append(done)
            threading.Thread(
                target=_drain,
                args=(stream, tail, self._stop_pipe[0], _setter(loop, done)),
                daemon=True,
                name=f"cao-script-{self.proc.pid}",
            ).start()
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
        except TimeoutError:
            timed_out = True
            await self.stop()
        if not await self._pipes_closed(PIPE_LINGER_S):
            # The script is gone but something it started escaped its tree (no subreaper on
            # this system) and holds its stdout or stderr open; the run must not hang on it.
            # End the whole process group.
            _signal_group(self.proc.pid, signal.SIGKILL)
            if await self._pipes_closed(KILL_SETTLE_S):
                note = b"processes the script left behind were killed"
            else:
                # Held from another session (setsid), where killpg cannot reach: stop
                # reading, so that this run leaves no thread or descriptor behind.
                assert self._stop_pipe is not None  # open while the pipes are read
                os.write(self._stop_pipe[1], b"x")
                await self._pipes_closed(PIPE_LINGER_S)
                note = (
                    b"a process the script started in a session of its own still holds its "
                    b"output pipes; cao stopped reading them"
                )
            self._stderr.feed(b"\n[cao] " + note + b"\n")
        self._close_stop_pipe()
        return self._outcome(), timed_out

    async def _pipes_closed(self, timeout: float) -> bool:
        """Whether both readers reached the end of their pipe (or were stopped) in time."""
        try:
            await asyncio.wait_for(asyncio.gather(*(done.wait() for done in self._readers_done)), timeout)
        except TimeoutError:
            return False
        return True

    def _close_stop_pipe(self) -> None:
        # Only once no reader selects on it any more; a reader still running keeps it.
        if self._stop_pipe is not None and all(done.is_set() for done in self._readers_done):
            for fd in self._stop_pipe:
                os.close(fd)
            self._stop_pipe = None

    async def stop(self) -> None:
        """SIGTERM everything the script started, SIGKILL it after the grace period."""
        if self.proc is None or self._exited.is_set():
            return
        await asyncio.to_thread(signal_tree, self.proc.pid, signal.SIGTERM)  # reads /proc: off the loop
        try:
            await asyncio.wait_for(self._exited.wait(), STOP_GRACE_S)
        except TimeoutError:
            if not self._exited.is_set():  # else its pid may be another process's by now
                await asyncio.to_thread(kill_tree, self.proc.pid)
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
                out.warnings.append(
                    "malformed sentinel payload: the last CAO_WORKFLOW_OUTPUT: line is not JSON; the run has no output"
                )
        return out


def _setter(loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> Callable[[], None]:
    def set_in_loop() -> None:
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:  # the loop is closed: the server is stopping, nobody waits
            pass

    return set_in_loop


def _drain(stream: IO[bytes], tail: _Tail, stop_fd: int, done: Callable[[], None]) -> None:
    """Read a pipe until its end, or until `stop_fd` becomes readable; then close it."""
    fd = stream.fileno()
    try:
        os.set_blocking(fd, False)
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            selector.register(stop_fd, selectors.EVENT_READ)
            while True:
                ready = {key.fd for key, _ in selector.select()}
                if stop_fd in ready or (fd in ready and _read_chunk(fd, tail)):
                    break
    finally:
        tail.close()
        stream.close()
        done()


def _read_chunk(fd: int, tail: _Tail) -> bool:
    """Feed one chunk of the pipe into `tail` (one per wake-up, so a stop is never starved
    by a busy writer); True at the pipe's end."""
    try:
        chunk = os.read(fd, READ_CHUNK)
    except BlockingIOError:
        return False
    tail.feed(chunk)
    return not chunk


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
    kill_tree(pid)
    return True
