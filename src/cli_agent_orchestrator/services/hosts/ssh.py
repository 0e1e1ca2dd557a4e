"""One host's SSH connection: the `ssh` argv, and running one command there.

Every run shares one ControlMaster connection per host (a socket under `<cao home>/tmp/ssh/`,
kept ControlPersist after the last use), so a check or a later command pays the handshake once.
Host keys are never accepted on cao's say-so (BatchMode, StrictHostKeyChecking=yes); the user's
own ssh config, agent and known_hosts apply, and a host record adds only `-i`, `-l` and `-p`.
Everything is an argv list: the remote command line is `shlex.join` of fixed words.
"""

from __future__ import annotations

import asyncio
import hashlib
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...errors import InvalidInput
from ...runtime_dir import socket_dir
from .records import HostRecord

SSH = "ssh"
CONNECT_TIMEOUT_S = 10
CONTROL_PERSIST_S = 300  # an idle master lingers this long for the next command, then exits
# A Unix socket path holds at most ~104 bytes, and ssh binds the master first at the control
# path plus a 17-character random suffix, then renames it.
MAX_SOCKET_PATH = 104 - 17
EXIT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class SshResult:
    exit_code: int | None  # None: killed after the timeout
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        return self.exit_code is None


def control_dir(tmp_dir: Path) -> Path:
    """`<cao home>/tmp/ssh`, private to the server's user (the sockets there are live logins)."""
    try:
        return socket_dir(tmp_dir)
    except PermissionError as exc:
        raise InvalidInput(str(exc)) from None


def control_path(sockets: Path, host: HostRecord) -> Path:
    """The master socket of this host: named by a short hash of everything that makes the
    connection, so a changed record never reuses another one's login."""
    key = f"{host.name}\0{host.target}\0{host.identity or ''}"
    return sockets / hashlib.sha256(key.encode()).hexdigest()[:12]


def destination(host: HostRecord) -> list[str]:
    """The ssh words that name the host: the record's identity, user and port, then `--` and
    the host. The agents' long-lived connection (backends/ssh_link.py) adds its own options."""
    target = host.target
    argv = ["-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}"]
    if host.identity:
        argv += ["-i", host.identity]
    if target.user:
        argv += ["-l", target.user]
    if target.port:
        argv += ["-p", str(target.port)]
    return [*argv, "--", target.host]


def link_path(sockets: Path, host: HostRecord) -> Path:
    """The socket of the agents' connection, beside (never the same as) `check`'s master."""
    return control_path(sockets, host).with_name(control_path(sockets, host).name[:11] + "L")


def ssh_argv(host: HostRecord, sockets: Path, *options: str) -> list[str]:
    """`ssh` up to and including the destination; the caller appends the remote command."""
    shared = ["-o", "ControlMaster=auto", "-o", f"ControlPath={control_path(sockets, host)}"]
    return [
        SSH,
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        *shared,
        "-o",
        f"ControlPersist={CONTROL_PERSIST_S}",
        *options,
        *destination(host),
    ]


def remote_line(words: Sequence[str]) -> str:
    """The command line the remote user's shell runs: our fixed words, each quoted."""
    return shlex.join(words)


async def run_on_host(
    host: HostRecord, sockets: Path, words: Sequence[str], timeout: float, env: Mapping[str, str] | None = None
) -> SshResult:
    """Run one command on the host; stdin is empty. Killed when `timeout` passes."""
    return await _run([*ssh_argv(host, sockets), remote_line(words)], timeout, env)


async def close_master(host: HostRecord, sockets: Path, env: Mapping[str, str] | None = None) -> None:
    """End the host's master connection, if one is up (`ssh -O exit`)."""
    if control_path(sockets, host).exists():
        await _run(ssh_argv(host, sockets, "-O", "exit"), EXIT_TIMEOUT_S, env)


async def _run(argv: list[str], timeout: float, env: Mapping[str, str] | None) -> SshResult:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env) if env is not None else None,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        try:  # what it printed before; a master it forked may hold the pipes open, so bounded
            out, err = await asyncio.wait_for(proc.communicate(), EXIT_TIMEOUT_S)
        except TimeoutError:
            out, err = b"", b""
        return SshResult(None, out.decode(errors="replace"), err.decode(errors="replace"))
    except asyncio.CancelledError:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    return SshResult(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))
