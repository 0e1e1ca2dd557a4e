"""What the HTTP edge refuses before a route sees it: a body over CAO_MAX_BODY_BYTES
(413, decided from Content-Length or while a chunked body streams in), JSON that
Python's parser accepts but nothing downstream can carry: numbers that are not finite
(NaN, Infinity, 1e400) and strings with lone UTF-16 surrogates (not Unicode text), and a
method the path does not have (405, its `Allow` naming every method the path has).
"""

from __future__ import annotations

import json
import math
import re
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .raw_answers import send_json


class BodySizeLimit:
    """Pure ASGI middleware: one limit for every request body.

    A declared Content-Length over the limit is refused before a byte is read (the HTTP
    server never delivers more than was declared). A body without one (chunked) is read
    here, counted, and refused as soon as it passes the limit; otherwise it is handed to
    the app as if it had just arrived.
    """

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = _content_length(scope)
        if length is not None:
            if length > self.max_bytes:
                return await self._refuse(send)
            return await self.app(scope, receive, send)
        buffered: list[Message] = []
        size = 0
        while True:
            message = await receive()
            buffered.append(message)
            if message["type"] != "http.request":
                break  # the client went away; the app sees that as usual
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                return await self._refuse(send)
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return buffered.pop(0) if buffered else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        detail = {"detail": f"request body exceeds {self.max_bytes} bytes"}
        # The unread rest of the body makes the connection unusable.
        await send_json(send, 413, detail, [(b"connection", b"close")])


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the HTTP server refuses such a request before we see it
    return None


# A surrogate can only enter a parsed string through a \uD800-\uDFFF escape or through
# UTF-8-encoded surrogate bytes (json.loads decodes with surrogatepass).
_MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def _not_a_json_number(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not a JSON number", "", 0)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise json.JSONDecodeError("number out of range (not a finite double)", "", 0)
    return value


def _refuse_lone_surrogates(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise json.JSONDecodeError("a string holds a lone UTF-16 surrogate (not Unicode text)", "", 0) from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


class StrictJsonRequest(Request):
    """A request whose JSON body may hold only finite numbers and Unicode text: a NaN or
    a lone surrogate that got past the edge would be stored, and every later answer that
    carries it would fail to encode (a 500, again and again)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            value = json.loads(body, parse_constant=_not_a_json_number, parse_float=_finite_float)
            if _MAYBE_SURROGATE.search(body):  # rare: only then walk the whole value
                _refuse_lone_surrogates(value)
            self._json = value
        return self._json


class StrictJsonRoute(APIRoute):
    """Route class for cao's routers: bodies are parsed by StrictJsonRequest, so what it
    refuses is FastAPI's usual 422 `json_invalid`; a 405 lists every method of the path."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return handle

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Each method of a path is a route of its own, and Starlette's 405 names only the methods
        # of the route that happened to match first; `Allow` must name all of the path's. A path
        # that is a documented path of its own (`/terminals/run-step`) is never taken by a
        # template beside it (`/terminals/{terminal_id}`) for a method it does not have.
        allowed: set[str] | None = None
        if self.param_convertors:
            own = _documented_paths(scope.get("app")).get(scope.get("path", ""))
            if own is not None and scope["method"] not in own:
                allowed = own
        if allowed is None and self.methods and scope["method"] not in self.methods:
            allowed = set(self.methods) | _documented_paths(scope.get("app")).get(self.path_format, set())
        if allowed is not None:
            raise HTTPException(405, headers={"Allow": ", ".join(sorted(allowed))})
        await super().handle(scope, receive, send)


_PATHS: weakref.WeakKeyDictionary[Any, dict[str, set[str]]] = weakref.WeakKeyDictionary()


def _documented_paths(app: Any) -> dict[str, set[str]]:
    """Each path template of the app's OpenAPI document and its methods (read once per app)."""
    if app is None:
        return {}
    paths = _PATHS.get(app)
    if paths is None:
        openapi = getattr(app, "openapi", None)
        items = openapi().get("paths", {}) if callable(openapi) else {}
        paths = _PATHS[app] = {path: {method.upper() for method in item} for path, item in items.items()}
    return paths
