"""Who caused what is happening now: the actor the audit log and plugins name for an event.

One context variable, set where the cause is known (the HTTP edge names its client; an
agent step names its calling terminal) and read when an event is published. Context
variables follow tasks and `call_soon_threadsafe`, so an event published deep inside a
request or a step still carries the actor that started it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token

# What an event caused by nobody in particular (no request, no agent step) is credited to.
UNKNOWN_ACTOR = "api"
# Request header a client names itself with (`cao` sends "cli"); a declaration, not a proof.
CLIENT_HEADER = "x-cao-client"
CLIENT_NAME_RE = re.compile(r"\A[a-z0-9][a-z0-9_.-]{0,31}\Z")

_current: ContextVar[str | None] = ContextVar("cao_actor", default=None)


def current_actor() -> str | None:
    return _current.get()


@contextmanager
def acting_as(actor: str | None) -> Iterator[None]:
    """Credit what happens inside the block to `actor` (None: leave the current one)."""
    if actor is None:
        yield
        return
    token = _current.set(actor)
    try:
        yield
    finally:
        _current.reset(token)


def set_actor(actor: str) -> Token[str | None]:
    """For the HTTP edge: credit the rest of this context to `actor`; undo with `reset_actor`."""
    return _current.set(actor)


def reset_actor(token: Token[str | None]) -> None:
    _current.reset(token)


def client_actor(header_value: str | None) -> str:
    """The actor an HTTP request is credited to: its declared client name, else "api"."""
    value = (header_value or "").strip().lower()
    return value if CLIENT_NAME_RE.fullmatch(value) else UNKNOWN_ACTOR
