"""Where a cao home's Unix sockets live (ssh control sockets, the hosts' API socket): a
directory only this user can enter, checked (ours, 0700, not a symlink) at every use.

`<home>/tmp/ssh` when its path leaves room for a socket name. Else `$XDG_RUNTIME_DIR/cao-<hash>`
when that is a 0700 directory of this user's; else a directory with a random name that mkdtemp
made in /tmp, its path recorded in `<home>/tmp/runtime-dir` (0600) so that the next use finds it
again. A name another user can guess is never used: they could make it first.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .private_files import DIR_MODE, exclusive_lock, private_dir, replace_private

# A Unix socket path holds at most ~104 bytes, and ssh binds a master first at the control
# path plus a 17-character random suffix, then renames it; names in the directory are ≤ 12.
MAX_SOCKET_PATH = 104 - 17
SOCKET_NAME_ROOM = 12
RECORD_NAME = "runtime-dir"  # in <home>/tmp: the /tmp directory this home uses
SHARED_TMP = Path("/tmp")  # short, and sticky: nobody else can remove or rename what we make there


def socket_dir(tmp_dir: Path, environ: Mapping[str, str] | None = None) -> Path:
    """The socket directory of the home whose `tmp/` is `tmp_dir` (see the module docstring).
    PermissionError when `<home>/tmp/ssh` exists but is not a directory of this user's."""
    wanted = tmp_dir / "ssh"
    if _fits(wanted):
        wanted.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        info = os.lstat(wanted)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise PermissionError(f"{wanted} is not a directory of this user's; remove it to let cao use it")
        os.chmod(wanted, DIR_MODE)
        return wanted
    runtime = (os.environ if environ is None else environ).get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime) and _is_private(Path(runtime)):
        wanted = Path(runtime) / f"cao-{hashlib.sha256(str(tmp_dir).encode()).hexdigest()[:8]}"
        if _fits(wanted):
            try:
                wanted.mkdir(mode=DIR_MODE)
            except FileExistsError:
                pass
            if _is_private(wanted):
                return wanted
    return _recorded_dir(tmp_dir)


def _fits(directory: Path) -> bool:
    return len(str(directory)) + 1 + SOCKET_NAME_ROOM <= MAX_SOCKET_PATH


def _is_private(directory: Path) -> bool:
    """A real directory (not a symlink) of this user's, mode 0700."""
    try:
        info = os.lstat(directory)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == DIR_MODE


def _recorded_dir(tmp_dir: Path) -> Path:
    """The /tmp directory named in `<home>/tmp/runtime-dir` while it is still ours and 0700;
    else a new one, recorded in its place. One process at a time decides (a lock beside the
    record), so the server and a client starting together agree on one directory."""
    private_dir(tmp_dir)
    record = tmp_dir / RECORD_NAME
    with exclusive_lock(tmp_dir / f"{RECORD_NAME}.lock"):
        try:
            recorded = Path(record.read_text(encoding="utf-8").strip())
        except (OSError, UnicodeDecodeError):
            recorded = None
        if recorded is not None and recorded.is_absolute() and _fits(recorded) and _is_private(recorded):
            return recorded
        fresh = Path(tempfile.mkdtemp(prefix="cao-", dir=SHARED_TMP))  # 0700, a name nobody can guess
        replace_private(record, f"{fresh}\n")
        return fresh
