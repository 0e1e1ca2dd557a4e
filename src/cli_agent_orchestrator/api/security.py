"""Request gates: Host check (DNS rebinding) and Origin check (cross-site requests).

A browser page on another site can make a victim's browser POST to
127.0.0.1:9889; the Origin check refuses such state-changing requests. A
rebinding attack arrives with a foreign Host header; the Host check refuses it.
A WebSocket is not covered by CORS at all, so its Origin is checked on every
handshake, after its peer address (close 4003, then 4403).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from ..settings import Settings
from .peer import is_loopback
from .raw_answers import send_json

_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}
_DEV_PORTS = (3000, 5173, 5174)
_STATE_CHANGING = {"POST", "PUT", "PATCH", "DELETE"}


def allowed_hosts(settings: Settings) -> set[str]:
    hosts = set(_LOOPBACK_NAMES)
    if settings.api_host not in ("0.0.0.0", "::", ""):
        hosts.add(settings.api_host)
    hosts.update(h.lower() for h in settings.allowed_hosts)
    return hosts


def cors_origins(settings: Settings) -> list[str]:
    origins = [f"http://{h}:{p}" for h in ("localhost", "127.0.0.1") for p in _DEV_PORTS]
    for host in ("localhost", "127.0.0.1", "[::1]"):
        origins.append(f"http://{host}:{settings.api_port}")
    if settings.api_host not in ("0.0.0.0", "::", "127.0.0.1", "localhost"):
        origins.append(f"http://{settings.api_host}:{settings.api_port}")
    origins.extend(settings.cors_origins)
    return origins


def _host_name(host_header: str) -> str:
    host_header = host_header.strip().lower()
    if host_header.startswith("["):
        return host_header[: host_header.find("]") + 1] if "]" in host_header else host_header
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def same_origin(origin: str, host_header: str) -> bool:
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    netloc = parts.netloc.rsplit("@", 1)[-1].lower()
    return netloc == host_header.strip().lower()


class RequestGate:
    """ASGI middleware: Host first, then Origin for state-changing methods."""

    def __init__(self, app, settings: Settings):
        self.app = app
        self.hosts = allowed_hosts(settings)
        self.any_host = "*" in settings.allowed_hosts
        self.origins = set(cors_origins(settings))
        self.any_origin = "*" in settings.cors_origins
        # A `*` among the CORS origins does not open the WebSocket; only its own list can.
        self.ws_origins = (self.origins - {"*"}) | set(settings.ws_allowed_origins)
        self.ws_any_origin = "*" in settings.ws_allowed_origins
        self.ws_clients = set(settings.ws_allowed_clients)

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host", "")
        if not self.any_host and _host_name(host) not in self.hosts:
            return await _reject(scope, receive, send, 400, "Invalid host header")
        origin = headers.get("origin", "")
        if scope["type"] == "websocket":
            client = (scope.get("client") or ("", 0))[0]
            if not (
                is_loopback(client) or client == "localhost" or "*" in self.ws_clients or client in self.ws_clients
            ):
                return await _reject(scope, receive, send, 403, "WebSocket client address not allowed", code=4003)
            if origin and not (self.ws_any_origin or same_origin(origin, host) or origin in self.ws_origins):
                return await _reject(scope, receive, send, 403, "WebSocket origin not allowed", code=4403)
            return await self.app(scope, receive, send)
        method = scope.get("method", "GET")
        if (
            scope["type"] == "http"
            and method in _STATE_CHANGING
            and origin
            and not self.any_origin
            and not same_origin(origin, host)
            and origin not in self.origins
        ):
            return await _reject(scope, receive, send, 403, "Cross-origin request blocked")
        return await self.app(scope, receive, send)


async def close_websocket(receive, send, code: int, reason: str) -> None:
    """Refuse a WebSocket with a close code the client can read. Closed before the handshake
    is accepted, a client would only see an HTTP 403; accepted first, it gets `code`."""
    message = await receive()
    if message.get("type") != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.close", "code": code, "reason": reason[:120]})


async def _reject(scope, receive, send, status: int, detail: str, code: int = 4403) -> None:
    if scope["type"] == "websocket":
        await close_websocket(receive, send, code, detail)
        return
    await send_json(send, status, {"detail": detail})
