"""Files only cao's own user may read: everything cao writes under its home (logs,
scrollbacks, snapshots, launch files, workflow snapshots) is created 0600 in 0700
directories, whatever the process umask says; and the home itself must be this user's
and closed to everyone else, or cao refuses it (it never chmods a directory it did not make).
"""

from __future__ import annotations

import fcntl
import os
import pwd
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import InvalidInput

FILE_MODE = 0o600
DIR_MODE = 0o700


class HomeRefused(InvalidInput):
    """The cao home cannot be used: another user's, open to others, or not creatable."""


def private_home(home: Path) -> Path:
    """`home`, made 0700 when missing (its parents as the umask makes them); an existing one
    must be a directory of this user's that nobody else may read, write or enter, else
    HomeRefused says whose it is, its mode and what to do. A symlink is judged by the
    directory it leads to."""
    elsewhere = "set CAO_HOME_DIR to a directory of yours (a missing one is created, mode 0700)"
    try:
        if not os.path.lexists(home):
            home.parent.mkdir(parents=True, exist_ok=True)
            try:
                home.mkdir(mode=DIR_MODE)
                os.chmod(home, DIR_MODE)  # ours since a moment ago: only the umask can have narrowed it
            except FileExistsError:  # made meanwhile (by another cao process, or not: checked below)
                pass
        info = os.stat(home)
    except OSError as exc:
        raise HomeRefused(f"cao home {home} cannot be made or read ({exc.strerror}): {elsewhere}") from None
    problem = _not_private(info)
    if problem:
        owner, mode = _user_name(info.st_uid), stat.S_IMODE(info.st_mode)
        fix = (
            f"run `chmod 700 {home}` if it is yours alone, or set CAO_HOME_DIR to another directory"
            if info.st_uid == os.getuid() and stat.S_ISDIR(info.st_mode)
            else elsewhere
        )
        raise HomeRefused(f"cao home {home} (owner {owner}, mode {mode:04o}) {problem}: {fix}")
    return home


def _not_private(info: os.stat_result) -> str | None:
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid != os.getuid():
        return f"belongs to another user, not to {_user_name(os.getuid())}"
    if info.st_mode & 0o077:
        return "is open to other users, and cao keeps secrets there (tokens, prompts, .env)"
    return None


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def private_dir(path: Path) -> Path:
    """A directory of cao's own under the home, 0700 (made with its parents when missing).
    One the user replaced by a symlink keeps the mode they gave its target."""
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    if not path.is_symlink():
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


def replace_private(path: Path, data: str | bytes) -> None:
    """Replace `path` whole, 0600: a reader sees the old content or the new, never a part
    (a temp file beside it, flushed to disk, then renamed over it)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, scratch = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # 0600
    try:
        try:
            _write_all(fd, raw)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(scratch, path)
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    """Make a rename in `directory` survive a crash (the rename is atomic without this)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an advisory lock (flock) on the 0600 file `path` for the block: writers that all
    take it run one at a time. The file is kept: removing it would let two holders lock
    different files of the same name."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when the descriptor closes
        yield
    finally:
        os.close(fd)
