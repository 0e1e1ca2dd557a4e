"""Watching a piped pane's death from its reader thread: tmux's view of the pane (its
process, whether it is dead, its exit status), and the pane's process itself through a
pidfd on Linux or a cheap liveness poll elsewhere.
"""

from __future__ import annotations

import os
import select
from dataclasses import dataclass

from .tmux_process import BlockingTmux

PID_POLL_S = 1.0  # only where pidfd_open is missing (not Linux)
STATE_FORMAT = "#{pane_pid}\t#{pane_dead}\t#{pane_dead_status}\t#{pane_dead_signal}"


@dataclass(frozen=True)
class PaneState:
    pid: int
    dead: bool
    code: int | None
    # tmux marks a pane dead when its pty closes, but knows the exit status (or
    # signal) only once it has reaped the process: wait for that before reporting.
    settled: bool


def parse_state(line: str) -> PaneState | None:
    """One line of STATE_FORMAT."""
    parts = line.split("\t")
    if len(parts) != 4 or not parts[0].isdigit():
        return None
    pid, dead, status, signal = parts
    return PaneState(
        int(pid),
        dead == "1",
        int(status) if status.lstrip("-").isdigit() else None,
        dead == "1" and (status != "" or signal != ""),
    )


def pane_state(tmux: BlockingTmux, pane_id: str) -> PaneState | None:
    """The pane as tmux sees it now, or None when it no longer exists."""
    ok, out = tmux("display-message", "-p", "-t", pane_id, STATE_FORMAT)
    return parse_state(out.rstrip("\n")) if ok else None


def zombie_exit_code(pid: int) -> int | None:
    """The exit code of `pid` if it has ended and nobody reaped it yet (a zombie), as a dead pane
    reports it: the code, or minus the signal. Why: tmux 3.3a now and then marks a pane dead and
    never reaps its process, so it never learns the status; the kernel still holds it, in
    /proc/<pid>/stat's 52nd field (Linux 3.5+). None when it cannot be read or is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) ": state is fields[0]
    if len(fields) < 50 or fields[0] != b"Z" or not fields[49].isdigit():
        return None
    status = int(fields[49])
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ProcessWatch:
    """The pane's process, watched within the reader's poll set."""

    def __init__(self, poll: select.poll) -> None:
        self._poll = poll
        self.pidfd = -1
        self.pid = 0  # watched by polling where pidfd is unavailable

    def start(self, pid: int) -> bool:
        """Watch `pid`; False when it has already ended."""
        try:
            self.pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        except (AttributeError, OSError):
            self.pid = pid
        else:
            self._poll.register(self.pidfd, select.POLLIN)
        return True

    def poll_timeout_ms(self) -> int | None:
        """How long the reader's poll may wait: forever, unless the pid must be polled."""
        return int(PID_POLL_S * 1000) if self.pid else None

    def ended(self, ready: set[int]) -> bool:
        """After a poll that returned the fds `ready`: has the process ended?"""
        if self.pidfd >= 0 and self.pidfd in ready:
            return True
        return bool(self.pid) and not pid_alive(self.pid)

    def close(self) -> None:
        if self.pidfd >= 0:
            self._poll.unregister(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = -1
        self.pid = 0
