"""Browser sign-in: `cao ui` asks the server for a one-time ticket and prints a link with it;
the page trades the ticket for a cookie session. A browser never sees the server's token.

A ticket works once, for TICKET_TTL_S; a session lasts SESSION_TTL_S from its last use. Both
live only in the server's memory (a restart signs browsers out), and only their SHA-256 is
kept, so a memory dump or a timing probe reveals no usable value.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable

TICKET_TTL_S = 120.0
SESSION_TTL_S = 12 * 3600.0
MAX_TICKETS = 32  # outstanding; the oldest is dropped beyond it
MAX_SESSIONS = 256
_TOKEN_BYTES = 32


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


class Logins:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._tickets: dict[str, float] = {}  # digest -> expiry
        self._sessions: dict[str, float] = {}  # digest -> expiry

    def new_ticket(self) -> str:
        self._expire(self._tickets)
        if len(self._tickets) >= MAX_TICKETS:
            del self._tickets[min(self._tickets, key=self._tickets.__getitem__)]
        ticket = secrets.token_urlsafe(_TOKEN_BYTES)
        self._tickets[_digest(ticket)] = self._clock() + TICKET_TTL_S
        return ticket

    def redeem(self, ticket: str) -> str | None:
        """A new session id for a valid, unused ticket (which is used up), else None."""
        expiry = self._tickets.pop(_digest(ticket), None)
        if expiry is None or expiry < self._clock():
            return None
        self._expire(self._sessions)
        if len(self._sessions) >= MAX_SESSIONS:
            del self._sessions[min(self._sessions, key=self._sessions.__getitem__)]
        session = secrets.token_urlsafe(_TOKEN_BYTES)
        self._sessions[_digest(session)] = self._clock() + SESSION_TTL_S
        return session

    def check(self, session: str) -> bool:
        """Whether the session is live; a live one is extended."""
        key = _digest(session)
        expiry = self._sessions.get(key)
        now = self._clock()
        if expiry is None:
            return False
        if expiry < now:
            del self._sessions[key]
            return False
        self._sessions[key] = now + SESSION_TTL_S
        return True

    def end(self, session: str) -> None:
        self._sessions.pop(_digest(session), None)

    def _expire(self, table: dict[str, float]) -> None:
        now = self._clock()
        for key in [k for k, expiry in table.items() if expiry < now]:
            del table[key]
