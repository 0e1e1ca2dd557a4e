"""The bearer token a workflow script sends: CAO_AUTH_TOKEN, else `<cao home>/auth-token`.

cao-server admits its owner's scripts on loopback without it; the token matters where the
server cannot see who connects (a non-loopback address). Standard library only, like the
whole shim, which never imports the server's package.
"""

from __future__ import annotations

import os
import re

TOKEN_VAR = "CAO_AUTH_TOKEN"
HOME_VAR = "CAO_HOME_DIR"
DEFAULT_HOME = "~/.aws/cli-agent-orchestrator"
TOKEN_FILE = "auth-token"
# What cao-server itself accepts in its token file (RFC 6750 characters, 32 or more).
_TOKEN_RE = re.compile(r"[A-Za-z0-9._~+/=-]{32,1024}")


def auth_headers() -> dict[str, str]:
    """`{"Authorization": "Bearer <token>"}`, or `{}` when no token can be found or read."""
    token = os.environ.get(TOKEN_VAR, "").strip()
    if not token:
        home = os.path.expanduser(os.environ.get(HOME_VAR) or DEFAULT_HOME)
        try:
            with open(os.path.join(home, TOKEN_FILE), "rb") as file:
                token = file.read(4096).decode("ascii", errors="replace").strip()
        except OSError:
            return {}
        if not _TOKEN_RE.fullmatch(token):
            return {}
    return {"Authorization": f"Bearer {token}"}
