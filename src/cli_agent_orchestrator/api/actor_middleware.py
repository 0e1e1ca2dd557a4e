"""Credits everything a request causes to its client (the `X-CAO-Client` header it sends,
"cli" for `cao`; "api" when it names none), for the audit log and plugins."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from ..actor import CLIENT_HEADER, client_actor, reset_actor, set_actor

_HEADER = CLIENT_HEADER.encode("latin-1")


class ActorMiddleware:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        declared = next((v.decode("latin-1") for k, v in scope.get("headers") or () if k == _HEADER), None)
        token = set_actor(client_actor(declared))
        try:
            await self.app(scope, receive, send)
        finally:
            reset_actor(token)
