"""The shim's exception tree. Every failure a script can see from a step call is one of
these, so a script can tell "nothing was attempted" from "the outcome is unknown"
from "the server answered no" — the three cases call for different reactions."""

from __future__ import annotations


class ShimError(Exception):
    """Base class; also raised for a call the shim refuses before doing anything
    (bad recovery value, reuse_terminal_id, unreadable CAO_WORKFLOW_INPUTS)."""


class ShimIdentityError(ShimError):
    """The run's identity is missing from the environment; nothing was attempted."""


class ShimTransportError(ShimError):
    """The request failed on the wire (refused, reset, socket timeout).

    The step may or may not have run server-side, which is exactly why the shim never
    retries: the original urllib/socket error is kept as ``__cause__``.
    """


class ShimHTTPError(ShimError):
    """The server answered, but not with a usable 200.

    ``status`` is the HTTP status (int) and ``body`` the raw response text. A 409 is a
    halt (``kind: "decision_required"``), a divergence (``kind: "diverged"``) or a stale
    generation — never absorb it in a blanket ``except ShimError``.
    """

    def __init__(self, status: int, body: str, message: str | None = None):
        super().__init__(message or f"run-step returned HTTP {status}")
        self.status = status
        self.body = body

    def __reduce__(self):  # keep status/body when sent across a process pool
        return (type(self), (self.status, self.body, str(self)))
