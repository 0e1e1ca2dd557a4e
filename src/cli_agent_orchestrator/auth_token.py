"""The token that admits a client to cao-server, `<cao home>/auth-token`, as clients read it
and as the server makes it (`ensure_token`).

Standard library only and nothing at import, because cao-hook loads it for every hook.
No token is not an error: on loopback the server admits its owner by the socket's uid,
so the token matters only where that cannot be checked (see api/auth.py).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

TOKEN_FILE_NAME = "auth-token"
# settings.DEFAULT_HOME, repeated so that cao-hook need not import settings (~25 ms).
DEFAULT_HOME_DIR = "~/.aws/cli-agent-orchestrator"
# RFC 6750's token characters; at least 32 of them, so a short hand-written token is
# replaced by the server rather than trusted.
TOKEN_RE = re.compile(r"[A-Za-z0-9._~+/=-]{32,1024}")
MAX_READ_BYTES = 4096
TOKEN_BYTES = 32  # 256 bits of randomness, 43 urlsafe characters
OWNER_ONLY = 0o600


def token_path(home_dir: str | os.PathLike[str] | None) -> str:
    """Where the token of the cao home `home_dir` (None: the default home) lives."""
    return os.path.join(os.path.expanduser(os.fspath(home_dir or DEFAULT_HOME_DIR)), TOKEN_FILE_NAME)


def valid_token(text: str) -> bool:
    return TOKEN_RE.fullmatch(text) is not None


def read_token(path: str | os.PathLike[str]) -> str | None:
    """The token in `path`, or None when the file is missing, unreadable or holds no token."""
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_READ_BYTES)
    except OSError:
        return None
    text = raw.decode("ascii", errors="replace").strip()
    return text if valid_token(text) else None


def auth_headers(home_dir: str | os.PathLike[str] | None, token: str | None = None) -> dict[str, str]:
    """`{"Authorization": "Bearer <token>"}`, from `token` (CAO_AUTH_TOKEN) when given,
    else from the home's token file; `{}` when there is none to send."""
    chosen = token.strip() if token and token.strip() else read_token(token_path(home_dir))
    return {"Authorization": f"Bearer {chosen}"} if chosen else {}


def ensure_token(path: Path) -> str:
    """The server's token: the one in `path`, or a new one written there (0600) when the
    file is missing or holds no usable token. Kept across restarts."""
    import logging  # here, not at the top: cao-hook imports this module and never makes a token
    import secrets
    import stat

    existing = read_token(path)
    if existing is not None:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode != OWNER_ONLY:
            logging.getLogger(__name__).warning("%s had mode %o; set to 600 (it admits any client)", path, mode)
            os.chmod(path, OWNER_ONLY)
        return existing
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    # Written aside, then linked in: a reader never sees a half-written file, and of two
    # servers starting on one home the second adopts the first one's token.
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, OWNER_ONLY)
    try:
        os.fchmod(fd, OWNER_ONLY)  # the umask may only have narrowed it; make it exact
        os.write(fd, f"{token}\n".encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(scratch, path)
    except FileExistsError:
        adopted = read_token(path)
        if adopted is not None:
            return adopted
        os.replace(scratch, path)  # an unusable file (empty, too short) is replaced
    finally:
        scratch.unlink(missing_ok=True)
    return token
