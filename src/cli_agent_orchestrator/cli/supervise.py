"""`cao-server --supervise`: a watchdog that runs cao-server as its child and starts it again
when it dies, so that a crash leaves the agents unsupervised for seconds, not until someone
notices. The new server re-adopts every agent whose tmux window survived (it always does).

Rules: a child that stops cleanly (exit 0, e.g. after SIGTERM) or that never got up (a bad
setting, a port in use) is not started again; one that died after it was up is, after a pause
that doubles while it keeps dying young, until MAX_QUICK_DEATHS in a row. SIGTERM, SIGINT and
SIGHUP to the watchdog go to the child, and the watchdog ends with it. The child tells it
"up" through a pipe (CAO_SUPERVISOR_READY_FD) once its runtime has started; under systemd
(Type=notify) the same moment is sent as READY=1. Standard library only: the watchdog stays
small.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

READY_FD_VAR = "CAO_SUPERVISOR_READY_FD"
SUPERVISOR_PID_VAR = "CAO_SUPERVISOR_PID"
FIRST_PAUSE_S = 1.0
MAX_PAUSE_S = 30.0
# A server that stayed up this long died of something new, not of a crash loop: pauses start over.
STABLE_S = 60.0
MAX_QUICK_DEATHS = 5
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass(frozen=True)
class ReadyNotice:
    """How the server says it is up: to its watchdog's pipe, and to systemd's notify socket."""

    fd: int | None
    notify_socket: str | None
    watchdog_pid: int | None

    @classmethod
    def take_from_env(cls) -> ReadyNotice:
        """Read once at start, and taken out of the environment, which the agents inherit."""
        fd, pid = os.environ.pop(READY_FD_VAR, ""), os.environ.pop(SUPERVISOR_PID_VAR, "")
        return cls(
            int(fd) if fd.isdigit() else None,
            os.environ.get("NOTIFY_SOCKET") or None,
            int(pid) if pid.isdigit() else None,
        )

    def send(self) -> None:
        if self.fd is not None:
            try:
                os.write(self.fd, b"ready\n")
                os.close(self.fd)
            except OSError:
                pass  # the watchdog is gone: nobody to tell
        if self.notify_socket:
            address = "\0" + self.notify_socket[1:] if self.notify_socket.startswith("@") else self.notify_socket
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                    sock.sendto(b"READY=1", address)
            except OSError:
                pass

    def supervision(self) -> dict[str, Any] | None:
        """Who starts this server again if it dies (what /health and `cao info` report): its
        watchdog while that is still its parent, or systemd; None when nobody does."""
        if self.watchdog_pid is not None and os.getppid() == self.watchdog_pid:
            return {"kind": "watchdog", "pid": self.watchdog_pid}
        if os.environ.get("INVOCATION_ID"):  # set by systemd for each unit it starts
            return {"kind": "systemd"}
        return None


def supervise(argv: list[str], log_path: Path) -> int:
    """Run `argv` (cao-server without --supervise) until it stops for good; its exit code."""
    stop = threading.Event()
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: object) -> None:
        stop.set()
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    for signum in _FORWARDED:
        signal.signal(signum, forward)
    pause, quick_deaths, was_up = FIRST_PAUSE_S, 0, False
    while True:
        started = time.monotonic()
        child, ready = _start(argv)  # `child` is what `forward` signals from here on
        up = _wait_until_up(ready)
        code = child.wait()
        ran = time.monotonic() - started
        if stop.is_set():
            return code
        if code == 0:
            _say(log_path, f"cao-server (pid {child.pid}) stopped cleanly; the watchdog ends too")
            return 0
        if not up and not was_up:
            _say(log_path, f"cao-server did not start ({_how(code)}); not starting it again")
            return code if code > 0 else 1
        was_up = was_up or up
        if ran >= STABLE_S:
            pause, quick_deaths = FIRST_PAUSE_S, 0
        quick_deaths += 1
        if quick_deaths > MAX_QUICK_DEATHS:
            _say(log_path, f"cao-server died {MAX_QUICK_DEATHS} times in a row soon after it started; giving up")
            return 1
        _say(
            log_path, f"cao-server (pid {child.pid}) died ({_how(code)}) after {ran:.1f} s; starting it in {pause:g} s"
        )
        if stop.wait(pause):
            return code
        pause = min(pause * 2, MAX_PAUSE_S)


def _start(argv: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    """Start the server with the write end of a pipe it says "up" on; (child, read end)."""
    read_end, write_end = os.pipe()
    env = {**os.environ, SUPERVISOR_PID_VAR: str(os.getpid()), READY_FD_VAR: str(write_end)}
    try:
        return subprocess.Popen(argv, env=env, pass_fds=(write_end,)), read_end
    except OSError:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)


def _wait_until_up(read_end: int) -> bool:
    """True once the server says "up"; False when it exits first (the pipe ends unsaid)."""
    with os.fdopen(read_end, "rb") as pipe:
        return pipe.readline() == b"ready\n"


def _how(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _say(log_path: Path, text: str) -> None:
    line = f"{datetime.now(UTC).isoformat(timespec='seconds')} WARNING cao.watchdog: {text}\n"
    sys.stderr.write(line)
    sys.stderr.flush()
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass
