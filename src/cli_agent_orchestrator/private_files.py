"""Files only cao's own user may read: everything cao writes under its home (logs,
scrollbacks, snapshots, launch files, workflow snapshots) is created 0600 in 0700
directories, whatever the process umask says.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


def private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    os.chmod(path, DIR_MODE)
    return path


def write_private(path: Path, data: str | bytes) -> None:
    """Replace `path` with `data`, readable by this user only from the first byte."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # an older file keeps its mode through O_CREAT
        _write_all(fd, raw)
    finally:
        os.close(fd)


def append_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# A Unix socket path holds at most ~104 bytes, and ssh binds a master first at the control
# path plus a 17-character random suffix, then renames it; names in the directory are ≤ 12.
MAX_SOCKET_PATH = 104 - 17
SOCKET_NAME_ROOM = 12


def socket_dir(tmp_dir: Path) -> Path:
    """`<cao home>/tmp/ssh`: the home's Unix sockets (ssh control sockets, the hosts' API socket),
    private to the server's user. A home whose path leaves no room for a socket name uses a
    private directory in /tmp instead."""
    wanted = tmp_dir / "ssh"
    if len(str(wanted)) + 1 + SOCKET_NAME_ROOM > MAX_SOCKET_PATH:
        digest = hashlib.sha256(str(tmp_dir).encode()).hexdigest()[:8]
        wanted = Path("/tmp") / f"cao-ssh-{os.getuid()}-{digest}"
    wanted.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(wanted)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(f"{wanted} is not a directory of this user's; remove it to let cao use it")
    os.chmod(wanted, 0o700)
    return wanted
