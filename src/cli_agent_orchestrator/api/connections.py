"""The HTTP server's connection layer, below ASGI: who may hold how many connections, and for
how long a request may take to arrive. What a request says is judged later (auth.py); this
module only keeps a client from holding the server's sockets.

Why here: uvicorn accepts every connection and waits for ever for headers that never end,
and who is calling is known only after them. The kernel names a local socket's user the
moment it is accepted (peer.py), so each connection is counted against its user at once:
another local user holds at most `per_user` connections, and the owner keeps the rest. A
request's headers must arrive within `header_timeout` and its body within `body_timeout`.
Over a cap, a connection is answered 503 and closed; past a deadline, 408 (or closed, when
the request has already reached the app).
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import socket
import struct
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import h11
from h11._connection import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from .peer import socket_owner_uid

log = logging.getLogger(__name__)

UNKNOWN = "unknown"  # the bucket of peers whose user the kernel does not name (remote, or lost)
# How often one user's refusals are written to the log: a flood must not become a log flood.
REFUSAL_LOG_EVERY_S = 10.0
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_UCRED = struct.Struct("3i")  # SO_PEERCRED: pid, uid, gid


@dataclass
class ConnectionLimits:
    """The caps and deadlines, and the live count of connections per user (a uid, or UNKNOWN)."""

    owner_uid: int
    per_user: int  # for every user but the owner, and for the UNKNOWN bucket
    total: int  # all connections together, the owner's included
    header_timeout: float
    body_timeout: float
    held: Counter[int | str] = field(default_factory=Counter)
    refused: Counter[int | str] = field(default_factory=Counter)
    timed_out: Counter[str] = field(default_factory=Counter)  # "headers" / "body"
    _last_logged: dict[int | str, float] = field(default_factory=dict)
    _handed_over: dict[int, Slot] = field(default_factory=dict)  # transport id -> slot, across an upgrade

    def admit(self, transport: asyncio.BaseTransport) -> Slot | str:
        """A slot for this connection, or why it is refused."""
        user = _peer_user(transport)
        in_all = sum(self.held.values())
        if in_all >= self.total:
            reason = f"cao-server holds its most connections ({self.total}); try again shortly"
        elif user != self.owner_uid and self.held[user] >= self.per_user:
            who = "peers whose user is unknown" if user == UNKNOWN else f"uid {user}"
            reason = f"{who} already hold {self.per_user} connections, the most another user may hold"
        else:
            self.held[user] += 1
            return Slot(self, user)
        self.refused[user] += 1
        self._log_refusal(user, reason)
        return reason

    def stats(self) -> dict[str, Any]:
        """What /diagnostics shows: connections held and refused per user, and deadlines missed."""
        return {
            "held": {str(k): v for k, v in self.held.items() if v},
            "refused": {str(k): v for k, v in self.refused.items()},
            "timed_out": dict(self.timed_out),
            "per_user": self.per_user,
            "total": self.total,
            "header_timeout_s": self.header_timeout,
            "body_timeout_s": self.body_timeout,
        }

    def _log_refusal(self, user: int | str, reason: str) -> None:
        now = time.monotonic()
        if now - self._last_logged.get(user, -REFUSAL_LOG_EVERY_S) >= REFUSAL_LOG_EVERY_S:
            self._last_logged[user] = now
            log.warning("refused a connection (%d so far from this user): %s", self.refused[user], reason)


@dataclass
class Slot:
    """One admitted connection's place in the count; released once, whoever ends it."""

    limits: ConnectionLimits
    user: int | str
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.limits.held[self.user] -= 1


def quiet_accept_pauses(loop: asyncio.AbstractEventLoop) -> None:
    """Out of file descriptors, asyncio stops accepting for a second and tries again (it never
    ends the server), but it logs a traceback for every try, up to the listen backlog per pass:
    tens of thousands of lines a minute. Say it once per REFUSAL_LOG_EVERY_S, with a count."""
    pauses = {"count": 0, "said": -REFUSAL_LOG_EVERY_S}

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if not (isinstance(exc, OSError) and exc.errno in _OUT_OF_RESOURCES):
            loop.default_exception_handler(context)
            return
        pauses["count"] += 1
        now = time.monotonic()
        if now - pauses["said"] >= REFUSAL_LOG_EVERY_S:
            log.error("accepting connections paused: %s (%d failed accepts)", exc.strerror, pauses["count"])
            pauses["said"], pauses["count"] = now, 0

    loop.set_exception_handler(handler)


def _peer_user(transport: asyncio.BaseTransport) -> int | str:
    sock = transport.get_extra_info("socket")
    if sock is None:
        return UNKNOWN
    try:
        if sock.family == socket.AF_UNIX:
            # The hosts' socket (0600): only the owner's own ssh forwards can reach it.
            _pid, uid, _gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
            return uid
        peer, local = sock.getpeername(), sock.getsockname()
    except OSError:
        return UNKNOWN
    uid = socket_owner_uid((peer[0], int(peer[1])), (local[0], int(local[1])))
    return UNKNOWN if uid is None else uid


def _answer(transport: asyncio.BaseTransport, status: int, reason: str) -> None:
    """A whole HTTP/1.1 answer written straight to the socket, then closed: for a connection the
    app never sees (refused, or its request never arrived)."""
    body = json.dumps({"detail": reason}).encode()
    phrase = {408: "Request Timeout", 431: "Request Header Fields Too Large", 503: "Service Unavailable"}.get(
        status, "Bad Request"
    )
    head = (
        f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode("ascii")
    assert isinstance(transport, asyncio.WriteTransport)
    transport.write(head + body)
    transport.close()


def guarded_protocols(limits: ConnectionLimits) -> tuple[type[asyncio.Protocol], type[asyncio.Protocol]]:
    """uvicorn's HTTP (h11) and WebSocket protocols, counting and timing every connection."""

    class GuardedHttp(H11Protocol):
        _slot: Slot | None = None
        _phase: str | None = None  # the deadline running: "headers", "body" or None
        _timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            admitted = limits.admit(transport)
            if isinstance(admitted, str):
                _answer(transport, 503, admitted)
                return
            self._slot = admitted
            self._set_phase("headers")  # a new connection that sends nothing is not kept

        def connection_lost(self, exc: Exception | None) -> None:
            self._set_phase(None)
            if self._slot is not None:
                self._slot.release()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._slot is None:
                return  # refused: its answer is already on the way
            if self.conn.their_state is h11.IDLE and self._head_too_long(data):
                return
            super().data_received(data)
            self._follow_request()

        def _head_too_long(self, data: bytes) -> bool:
            """A request line and headers past the bound get 431, whole or not: h11 checks only
            a head that has not ended yet, so one that arrives whole in a read would pass."""
            most = self.config.h11_max_incomplete_event_size or DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
            head = self.conn.trailing_data[0] + data
            end = head.find(b"\r\n\r\n")
            if (end + 4 if end >= 0 else len(head)) <= most:
                return False
            self._set_phase(None)
            _answer(self.transport, 431, f"the request line and headers exceed {most} bytes")
            return True

        def _follow_request(self) -> None:
            state = self.conn.their_state
            if state is h11.SEND_BODY:
                self._set_phase("body")
            elif state is h11.IDLE and self.conn.trailing_data[0]:
                self._set_phase("headers")  # a request has begun and its headers have not ended
            elif state is not h11.IDLE or self._phase != "headers":
                self._set_phase(None)  # the request is in, or idle between requests (keep-alive rules)

        def _set_phase(self, phase: str | None) -> None:
            if phase == self._phase:
                return  # a deadline runs from its phase's start, not from the last byte
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._phase = phase
            if phase is not None:
                limit = limits.header_timeout if phase == "headers" else limits.body_timeout
                self._timer = self.loop.call_later(limit, self._expired, phase, limit)

        def _expired(self, phase: str, limit: float) -> None:
            self._timer = None
            limits.timed_out[phase] += 1
            if self.transport.is_closing():
                return
            if phase == "headers":
                _answer(self.transport, 408, f"the request's headers did not arrive within {limit:g} s")
            else:
                self.transport.close()  # the app already has the request: it sees a disconnect

        def send_400_response(self, msg: str) -> None:
            _answer(self.transport, 400, "invalid HTTP request: " + msg.rstrip("."))

        def handle_websocket_upgrade(self, event: h11.Request) -> None:
            self._set_phase(None)
            if self._slot is not None:
                limits._handed_over[id(self.transport)] = self._slot
                self._slot = None
            super().handle_websocket_upgrade(event)

    class GuardedWebSocket(WebSocketsSansIOProtocol):
        _slot: Slot | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self._slot = limits._handed_over.pop(id(transport), None)
            super().connection_made(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._slot is not None:
                self._slot.release()
            super().connection_lost(exc)

    return GuardedHttp, GuardedWebSocket
