"""A program and everything it starts, kept as one tree that can be ended. The program runs
under a launcher (this file, run as a script) that is a child subreaper on Linux: a descendant
that calls setsid or double-forks is re-parented to it, so it stays under the launcher and
findable in /proc. The launcher ends what is left when its program exits, and the whole tree
when cao-server dies (PR_SET_PDEATHSIG); cao-server ends the tree at a limit with kill_tree.

Stdlib only: the launcher runs as `python -I -S`, with nothing of cao or its environment.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the launcher has no use for asyncio, and starts faster without it
    import asyncio

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
# What the launcher gets when cao-server's thread that started it ends, however it ends.
PARENT_GONE = signal.SIGHUP
# Sweeps of kill_tree: each kills every process found, so only what forked during the sweep
# before remains; a tree still growing after this many is left to the process group kill.
KILL_SWEEPS = 50
EXEC_FAILED = 127  # the launcher's exit code when it could not start its program (as a shell's)
NO_REPORT = -1


# --- cao-server's side ------------------------------------------------------------------------
def launcher_argv(argv: Sequence[str], report_fd: int = NO_REPORT) -> list[str]:
    """The argument list that runs `argv` under the launcher. With `report_fd`, the launcher
    writes there the errno of a program it could not start (nothing when it started)."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid()), str(report_fd), *argv]


async def start_tree(argv: Sequence[str], **kwargs: Any) -> asyncio.subprocess.Process:
    """`asyncio.create_subprocess_exec(*argv, **kwargs)` under the launcher, in a session of its
    own; the Process is the launcher's, whose exit status is its program's. A program that
    cannot be started raises what starting it directly would (FileNotFoundError, ...)."""
    import asyncio

    read_end, write_end = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            *launcher_argv(argv, write_end), pass_fds=(write_end,), start_new_session=True, **kwargs
        )
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    try:
        report = await asyncio.to_thread(_read_report, read_end)  # at once: the launcher starts in ms
    except BaseException:
        kill_tree(proc.pid)  # which also ends the read: the launcher's end of the pipe closes
        raise
    if report:
        await proc.wait()
        code = int(report)
        raise OSError(code, os.strerror(code), argv[0])  # the errno's own subclass
    return proc


def popen_tree(argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
    """`subprocess.Popen(argv, **kwargs)` under the launcher, in a session of its own. A program
    that cannot be started exits with EXEC_FAILED, saying why on its stderr."""
    return subprocess.Popen(launcher_argv(argv), start_new_session=True, **kwargs)


def _read_report(fd: int) -> bytes:
    try:
        report = b""
        while chunk := os.read(fd, 64):
            report += chunk
        return report
    finally:
        os.close(fd)


# --- both sides -----------------------------------------------------------------------------
def descendants(root: int) -> list[int]:
    """The live processes under `root`, parents before children (from /proc; [] without it)."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                stat = file.read()
        except OSError:  # it ended meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so from the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) < 2 or fields[0] in (b"Z", b"X"):  # dead, only waiting to be reaped
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    found, queue = [], [root]
    while queue:
        for child in children.get(queue.pop(), ()):
            found.append(child)
            queue.append(child)
    return found


def kill_tree(root: int, keep_root: bool = False) -> None:
    """SIGKILL every process under `root`, then `root` and its process group (unless
    `keep_root`). Children first: while `root`, a subreaper, lives, whatever is orphaned
    meanwhile comes back under it, so the sweeps repeat until none is left."""
    for _ in range(KILL_SWEEPS):
        found = descendants(root)
        if not found:
            break
        for pid in found:
            _signal(pid, signal.SIGKILL)
    if not keep_root:
        try:
            os.killpg(root, signal.SIGKILL)  # all there is to reach where /proc is missing
        except (ProcessLookupError, PermissionError):
            pass
        _signal(root, signal.SIGKILL)


def signal_tree(root: int, sig: signal.Signals) -> None:
    """Send `sig` to every process under `root` (the launcher itself takes no part); where
    /proc is missing, to its process group."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(root, sig)
        except (ProcessLookupError, PermissionError):
            pass
        return
    for pid in descendants(root):
        _signal(pid, sig)


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# --- the launcher -------------------------------------------------------------------------
def _prctl(option: int, value: int) -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux: the process group is all there is
        return False


def _on_parent_gone(signum: int, frame: object) -> None:
    kill_tree(os.getpid(), keep_root=True)
    os._exit(128 + signum)


def _ignore(signum: int, frame: object) -> None:
    """A group-wide signal is for the program, which got it too; the launcher stays to end the
    tree. (A handler, not SIG_IGN: a handler is reset when the program is exec'd.)"""


def _launch(parent: int, report_fd: int, argv: list[str]) -> None:
    signal.signal(PARENT_GONE, _on_parent_gone)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _ignore)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, PARENT_GONE)
    if os.getppid() != parent:  # cao-server died before the line above took effect
        os._exit(EXEC_FAILED)
    try:
        program = subprocess.Popen(argv)  # its stdio is the launcher's; report_fd is not passed on
    except OSError as exc:
        if report_fd != NO_REPORT:
            os.write(report_fd, str(exc.errno or 0).encode())
        sys.stderr.write(f"cannot run {argv[0]}: {exc.strerror}\n")
        os._exit(EXEC_FAILED)
    if report_fd != NO_REPORT:
        os.close(report_fd)
    while True:  # orphans re-parented here are reaped on the way
        pid, status = os.wait()
        if pid == program.pid:
            break
    kill_tree(os.getpid(), keep_root=True)  # what the program left behind ends with it
    while True:
        try:
            os.wait()
        except ChildProcessError:
            break
    _exit_like(status)


def _exit_like(status: int) -> None:
    """End the launcher as its program ended: the same exit code, or the same signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the program's crash is not ours to dump
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL cannot be handled: it is SIG_DFL already
            pass
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal whose default is not to end a process
    os._exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    _launch(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])
