"""Errors at the HTTP edge: cao's exceptions and FastAPI's validation failures become
`{"detail": ...}` answers in one place, and the error models every route documents in
OpenAPI come from here too, so that what a route says it answers is what it answers.

Nothing becomes a bare 500: an exception nobody mapped (a bug) is answered
`500 {"detail": "internal error: <type>; see the server log"}`, logged with its traceback,
and the client's kept-alive connection stays open.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import CaoError

log = logging.getLogger(__name__)

# A validation entry is a hint for a human, not a copy of the request: a 100 MB body must
# not come back as a 100 MB answer, so every echoed piece is bounded.
MAX_MSG_CHARS = 300
MAX_LOC_PART_CHARS = 64
MAX_CTX_CHARS = 200
# Fields whose submitted values are never repeated back (they may carry credentials).
SECRET_FIELDS = frozenset({"env_vars"})


class ErrorObject(BaseModel):
    """An error whose callers must tell kinds apart (a workflow conflict, a worker error,
    a script refused by the linter): always a `message`, often a `kind`."""

    model_config = ConfigDict(extra="allow")
    message: str
    kind: str | None = None


class Error(BaseModel):
    """Every cao error: `detail` is a one-line reason, or an object with `message`."""

    detail: str | ErrorObject


class ValidationIssue(BaseModel):
    """One problem with the request, where (`loc`), what (`msg`) and its pydantic `type`.
    The submitted value is never echoed; `ctx` only when small (e.g. `{"le": 3600}`)."""

    loc: list[str | int]
    msg: str
    type: str
    ctx: dict[str, Any] | None = None


class ValidationFailed(BaseModel):
    """422: FastAPI's list of problems with the request, or a request cao refused as a
    whole (a one-line reason, or an object with `message`)."""

    detail: list[ValidationIssue] | str | ErrorObject


_DESCRIPTIONS = {
    400: "Bad input (a one-line reason), or a Host header that is not allowed",
    401: "A bearer token is required here, or the one sent is wrong",
    403: "A request from another user than the server's, or a cross-origin state change",
    404: "Unknown id or name",
    409: "Conflict with the current state",
    413: "Request body over CAO_MAX_BODY_BYTES",
    422: "Invalid request",
    431: "Request line and headers over 16 KiB",
    501: "Not built yet",
    502: "The agent failed",
    503: "The database or tmux cannot serve now (locked, failed or not answering): the reason; try again",
    504: "The agent did not finish in time",
}


def answers(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses` entries for these error statuses."""
    return {
        code: {"model": ValidationFailed if code == 422 else Error, "description": _DESCRIPTIONS[code]}
        for code in codes
    }


# What any route can answer whatever it does: the request gates in front of the app — the
# Host check (400), the owner-or-token check (401, 403; also the Origin check of a
# state-changing request), the body limit (413) and, below the app, the head limit (431).
EVERY_ROUTE = answers(400, 401, 403, 413, 431)


def validation_issue(error: dict[str, Any]) -> dict[str, Any]:
    """One pydantic error, without its `input` and with everything else bounded."""
    loc = [part if isinstance(part, int) else str(part)[:MAX_LOC_PART_CHARS] for part in error.get("loc", ())]
    issue: dict[str, Any] = {
        "loc": loc,
        "msg": str(error.get("msg", ""))[:MAX_MSG_CHARS],
        "type": str(error.get("type", "")),
    }
    secret = any(part in SECRET_FIELDS for part in loc)
    if secret:
        # Below a secret field, `loc` would name what the client put there.
        cut = next(i for i, part in enumerate(loc) if part in SECRET_FIELDS)
        issue["loc"] = loc[: cut + 1]
    ctx = error.get("ctx")
    if ctx and not secret:
        try:
            text = json.dumps(ctx, allow_nan=False)
        except (TypeError, ValueError):  # an exception object, NaN, bytes...
            text = None
        if text is not None and len(text) <= MAX_CTX_CHARS:
            issue["ctx"] = ctx
    return issue


async def _cao_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, CaoError)  # registered for CaoError only
    return JSONResponse({"detail": exc.detail()}, status_code=exc.http_status)


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)  # registered for it only
    return JSONResponse({"detail": [validation_issue(e) for e in exc.errors()]}, status_code=422)


def internal_error(scope: Scope, exc: Exception) -> JSONResponse:
    """The answer to an exception nobody mapped: its type only (its text may hold anything)."""
    log.error("internal error in %s %s", scope.get("method", ""), scope.get("path", ""), exc_info=exc)
    return JSONResponse({"detail": f"internal error: {type(exc).__name__}; see the server log"}, status_code=500)


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    return internal_error(request.scope, exc)


class LastResort:
    """Innermost middleware: an exception that no handler mapped is answered here as JSON and
    not raised further. (Starlette's outer error middleware would answer too, but re-raise, and
    uvicorn then closes the connection; a client keeping it alive would see a reset.) Once an
    answer has started, closing the connection is the only honest end: that is left to uvicorn."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            if started:
                raise
            await internal_error(scope, exc)(scope, receive, send)


def install_error_handlers(app: FastAPI) -> None:
    """Call before any other middleware is added: LastResort must sit innermost, where a route's
    exception arrives first; an exception of an outer middleware still gets the JSON answer."""
    app.add_exception_handler(CaoError, _cao_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _internal_error)
    app.add_middleware(LastResort)
