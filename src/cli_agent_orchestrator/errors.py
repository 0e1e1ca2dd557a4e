"""cao's own exception tree. Foreign exceptions stop at the adapters; the API maps
these to HTTP codes in one place (api/errors.py)."""
from __future__ import annotations


class CaoError(Exception):
    """Base class. The message is shown to the user as is: say what to fix."""

    http_status = 500


class InvalidInput(CaoError):
    http_status = 400


class NotFound(CaoError):
    http_status = 404


class Conflict(CaoError):
    http_status = 409


class BackendError(CaoError):
    """The terminal backend (tmux) failed."""

    http_status = 500


class WorkerError(CaoError):
    """An agent reached status `error` while we waited for it."""

    http_status = 502

    def __init__(self, message: str, terminal_id: str | None = None):
        super().__init__(message)
        self.terminal_id = terminal_id


class WaitTimeout(CaoError):
    http_status = 504

    def __init__(self, message: str, terminal_id: str | None = None):
        super().__init__(message)
        self.terminal_id = terminal_id
