"""Agent credentials: what proves, on each request to cao's MCP endpoint, which terminal's CLI is
calling. A terminal's credential is "<terminal id>.<HMAC-SHA256 of its id under the server's
token>": cao keeps no table of them, a restart keeps them valid (adopted agents call on), and a
new token (delete `<home>/auth-token`, restart) revokes them all. Standard library only.

Where it travels: the agent's environment (CAO_MCP_TOKEN, from the 0600 launch file the pane
sources and deletes) and the per-terminal config files some CLIs read (0600, removed with the
agent); never argv, logs or an API answer.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re

ENV_VAR = "CAO_MCP_TOKEN"
HEADER = "X-CAO-Agent-Token"  # or `Authorization: Bearer <credential>`
_DOMAIN = b"cao agent credential v1:"
_SHAPE = re.compile(r"\A([a-f0-9]{8})\.([A-Za-z0-9_-]{43})\Z")


def credential_for(server_token: str, terminal_id: str) -> str:
    return f"{terminal_id}.{_mac(server_token, terminal_id)}"


def terminal_of(server_token: str, credential: str) -> str | None:
    """The terminal a credential proves, or None for anything that is not one (compared in
    constant time)."""
    match = _SHAPE.match(credential)
    if match is None:
        return None
    terminal_id, mac = match.groups()
    return terminal_id if hmac.compare_digest(mac, _mac(server_token, terminal_id)) else None


def _mac(server_token: str, terminal_id: str) -> str:
    digest = hmac.new(server_token.encode("ascii"), _DOMAIN + terminal_id.encode("ascii"), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")
