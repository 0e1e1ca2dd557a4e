"""cao's own exception tree. Foreign exceptions stop at the adapters; the API maps these to
HTTP codes in one place (api/errors.py), each class by its `http_status`:

    CaoError (500)
    ├── InvalidInput (400)                 bad input: a one-line reason
    ├── Unauthorized (401)                 a credential that does not admit
    ├── Forbidden (403)
    ├── NotFound (404)
    ├── Conflict (409)                     with the current state
    │   ├── AgentExited                    input for an agent whose process has ended
    │   └── WorkflowConflict               {message, kind, ...}: stale generation, halts, divergence
    ├── Unprocessable (422)                well-formed, refused as a whole
    ├── NotBuilt (501)                     reserved in the grammar, not built yet
    ├── WorkerError (502)                  an agent reached `error` while we waited
    │   └── WorkerAsks                     ... or stopped at a question (kept for its caller)
    ├── StoreFault (503)                   the database cannot serve now; nothing was changed
    │   ├── StoreBusy                      locked by another process past the retry bound
    │   └── StoreUnavailable               failing (disk full, read-only, PostgreSQL down)
    ├── Stopping (503)                     cao-server is stopping
    ├── BackendError (500)                 tmux failed
    │   ├── BackendNotAnswering (503)      tmux did not answer in time
    │   └── HostUnreachable (503)          an agent's host cannot be reached now
    └── WaitTimeout (504)                  an agent did not finish in time
"""

from __future__ import annotations


class CaoError(Exception):
    """Base class. The message is shown to the user as is: say what to fix."""

    http_status = 500

    def detail(self) -> object:
        """What the API puts in `detail`: the message, or an object for errors whose
        callers must tell kinds apart."""
        return str(self)


class InvalidInput(CaoError):
    http_status = 400


class Unauthorized(CaoError):
    """A credential that does not admit (a used or expired login ticket)."""

    http_status = 401


class Forbidden(CaoError):
    http_status = 403


class NotFound(CaoError):
    http_status = 404


class Conflict(CaoError):
    http_status = 409


class AgentExited(Conflict):
    """Input for an agent whose process has ended (its pane is dead or gone)."""


class StoreFault(CaoError):
    """The database cannot serve now; nothing was changed, and a later try may succeed."""

    http_status = 503


class StoreBusy(StoreFault):
    """The database stayed locked (another process holds it) past cao's retry bound."""


class StoreUnavailable(StoreFault):
    """The database cannot be used now: it cannot be opened (a PostgreSQL server that does
    not answer), or a statement failed for a reason outside cao (disk full, a read-only file
    system, PostgreSQL restarting). The message says which; cao keeps serving and the next
    request tries again."""


class Stopping(CaoError):
    """cao-server is stopping and starts no new work."""

    http_status = 503


class Unprocessable(CaoError):
    """Well-formed but refused as a whole (e.g. a script that fails the linter)."""

    http_status = 422

    def __init__(self, message: str, **fields: object):
        super().__init__(message)
        self.fields = fields

    def detail(self) -> object:
        return {"message": str(self), **self.fields} if self.fields else str(self)


class NotBuilt(CaoError):
    """A construct that is reserved in the grammar but not built yet."""

    http_status = 501


class WorkflowConflict(Conflict):
    """A 409 about a workflow step or run, always `{message, kind, ...}` so that callers
    never sniff strings: kind is stale_generation, run_not_active, duplicate_step_id,
    decision_required or diverged."""

    def __init__(self, message: str, kind: str, **fields: object):
        super().__init__(message)
        self.kind, self.fields = kind, fields

    def detail(self) -> object:
        return {"message": str(self), "kind": self.kind, **self.fields}


class BackendError(CaoError):
    """The terminal backend (tmux) failed."""

    http_status = 500


class BackendNotAnswering(BackendError):
    """tmux did not answer a command in time (its server stopped or overloaded). What was
    sent may still run once it answers."""

    http_status = 503


class HostUnreachable(BackendError):
    """An agent's host cannot be reached now (cao reconnects on its own)."""

    http_status = 503


class WorkerError(CaoError):
    """An agent reached status `error` while we waited for it."""

    http_status = 502
    kind = "error"

    def __init__(self, message: str, terminal_id: str | None = None):
        super().__init__(message)
        self.terminal_id = terminal_id

    def detail(self) -> object:
        return {"message": str(self), "kind": self.kind, "terminal_id": self.terminal_id}


class WorkerAsks(WorkerError):
    """A worker stopped at a question nobody in cao can answer; it is kept for a while so
    its caller can answer (`answer_user_prompt`)."""

    kind = "waiting_user_answer"

    def __init__(self, message: str, terminal_id: str, question: str, grace_seconds: float):
        super().__init__(message, terminal_id)
        self.question = question
        self.grace_seconds = grace_seconds

    def detail(self) -> object:
        return {
            "message": str(self),
            "kind": self.kind,
            "terminal_id": self.terminal_id,
            "question": self.question,
            "grace_seconds": self.grace_seconds,
        }


class WaitTimeout(CaoError):
    http_status = 504
    kind = "timeout"

    def __init__(self, message: str, terminal_id: str | None = None):
        super().__init__(message)
        self.terminal_id = terminal_id

    def detail(self) -> object:
        return {"message": str(self), "kind": self.kind, "terminal_id": self.terminal_id}
