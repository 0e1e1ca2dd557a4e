"""Terminal ids and session names as cao accepts them: an id is checked, a session name is
given the `cao-` prefix and checked, before either reaches the store or tmux.
"""

from __future__ import annotations

import secrets

from ...errors import InvalidInput
from ...models import SAFE_NAME_RE, SESSION_PREFIX, TERMINAL_ID_RE


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


def check_terminal_id(terminal_id: str) -> str:
    if not TERMINAL_ID_RE.match(terminal_id or ""):
        raise InvalidInput(f"invalid terminal id {terminal_id!r}: expected 8 lowercase hex characters")
    return terminal_id
