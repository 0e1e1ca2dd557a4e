"""Terminal ids and session names as cao accepts them: an id is checked, a session name is
given the `cao-` prefix and checked, before either reaches the store or tmux. Names in
`cao-flow-` belong to scheduled flows: only a flow's run may create such a session.
"""

from __future__ import annotations

import secrets

from ...errors import InvalidInput
from ...models import SAFE_NAME_RE, SESSION_PREFIX, TERMINAL_ID_RE

# A flow replaces its session on each run. Nobody else creates one in this namespace, and the
# run checks what it finds there anyway (sessions from before, tmux used by hand): flows/ownership.py.
FLOW_SESSION_PREFIX = SESSION_PREFIX + "flow-"


def normalise_session_name(name: str | None) -> str:
    if not name:
        return SESSION_PREFIX + secrets.token_hex(4)
    if not name.startswith(SESSION_PREFIX):
        name = SESSION_PREFIX + name
    if not SAFE_NAME_RE.match(name):
        raise InvalidInput(
            f"invalid session name {name!r}: use up to 64 of [A-Za-z0-9_-], starting with a letter, digit or underscore"
        )
    return name


def check_not_flow_session(name: str) -> str:
    """A session name a user may create: refused when it is in the flows' namespace."""
    if name.startswith(FLOW_SESSION_PREFIX):
        raise InvalidInput(
            f"session name {name!r} is reserved: sessions named {FLOW_SESSION_PREFIX}* belong to "
            "scheduled flows (cao flow), which replace them on each run; choose another name"
        )
    return name


def check_terminal_id(terminal_id: str) -> str:
    if not TERMINAL_ID_RE.match(terminal_id or ""):
        raise InvalidInput(f"invalid terminal id {terminal_id!r}: expected 8 lowercase hex characters")
    return terminal_id
