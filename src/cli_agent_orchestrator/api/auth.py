"""Who may use cao-server: the user who runs it, and whoever presents its token.

Every HTTP request and WebSocket is checked before anything else runs; nothing is exempt
(/health shows the home directory). On loopback the kernel names the user behind the
client's socket (peer.py): the server's own uid needs no credentials, so the owner's
raw-HTTP scripts keep working, and any other user gets 403. Where the user cannot be known
(a non-loopback peer, a forwarded request, no answer from the kernel) only
`Authorization: Bearer <token>` with the token of `<home>/auth-token` admits, else 401.

A browser is not its user: any site it shows can make it send requests. So a request that
comes from a browser (it carries Fetch metadata, `Sec-Fetch-*`, or is a WebSocket handshake
with an `Origin`) is never admitted by its socket's user alone; it needs the cookie of a browser session (web/logins.py, opened with the
one-time link `cao ui` prints), on a same-origin or user-typed request. Only the page's
static shell and the sign-in call itself are open to a browser without one. A cookie and a
ticket are bearer values another local user could copy, so the sign-in and every request
with a cookie must also come from a socket the kernel names as the owner's (or, on a
non-loopback bind, from another machine, where the kernel names nobody).
"""

from __future__ import annotations

import hmac
import logging
import os
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl

from ..agent_credentials import HEADER as AGENT_HEADER
from ..agent_credentials import terminal_of
from ..auth_token import ensure_token
from ..settings import Settings
from ..web.logins import Logins
from .peer import is_loopback, socket_owner_uid
from .raw_answers import send_json
from .security import close_websocket, same_origin

log = logging.getLogger(__name__)

_BEARER = b"bearer "
# Headers with which a proxy names another client: uvicorn then rewrites scope["client"]
# (and trusts it from 127.0.0.1 by default), so that address says nothing about the socket.
_FORWARDING_HEADERS = (b"x-forwarded-for", b"forwarded")
_FETCH_METADATA = (b"sec-fetch-site", b"sec-fetch-mode", b"sec-fetch-dest")
_HOOK_PATH = re.compile(r"/terminals/[a-f0-9]{8}/hooks")
_MCP_PATHS = ("/mcp", "/mcp/")
_AGENT_HEADER = AGENT_HEADER.lower().encode("latin-1")
# Fetch metadata values of requests no other site can have started: the page's own, or typed.
_OWN_SITE = (b"same-origin", b"none")
# What a browser may fetch before it has signed in: the page shell (no data in it) and the
# sign-in call, whose one-time ticket is its credential.
_SIGN_IN = ("POST", "/ui/login")
_OPEN_TO_BROWSERS = {("GET", "/"), ("HEAD", "/"), ("GET", "/login"), ("HEAD", "/login")}
_OPEN_PREFIX = "/assets/"
_SIGN_IN_HINT = "run `cao ui` on the server's machine and open the one-time login link it prints"
_TOKEN_HINT = "send 'Authorization: Bearer <token>' with the token in the auth-token file of the server's cao home"


@dataclass(frozen=True)
class Refusal:
    status: int  # HTTP status; a WebSocket is closed with 4000 + status
    detail: str


class OwnerOrToken:
    """ASGI middleware: admit the server's own user on loopback, or a valid bearer token."""

    def __init__(self, app, settings: Settings, logins: Logins | None = None):
        self.app = app
        self.logins = logins or Logins()
        # Built by Starlette on the first ASGI event (lifespan start), so the token file is
        # created when the server starts, never at import or create_app() time.
        self.token = ensure_token(settings.auth_token_path).encode("ascii")
        self.owner_uid = os.geteuid()

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            refusal = self.check(scope)
            if refusal is not None:
                client = scope.get("client") or ("?", 0)
                log.warning(
                    "refused %s %s from %s:%s: %s",
                    scope.get("method", "WEBSOCKET"),
                    scope.get("path", ""),
                    client[0],
                    client[1],
                    refusal.detail,
                )
                return await _refuse(scope, receive, send, refusal)
        await self.app(scope, receive, send)

    def check(self, scope) -> Refusal | None:
        """None to admit, else why not."""
        headers = scope.get("headers") or []
        presented = _bearer_token(headers)
        if presented is None and scope["type"] == "websocket":
            presented = _query_token(scope)  # a browser cannot set headers on a WebSocket
        if presented is not None and hmac.compare_digest(presented, self.token):
            return None
        if from_a_browser(scope, headers):
            return self.check_browser(scope, headers)
        client, server = scope.get("client"), scope.get("server")
        if not (client and server and is_loopback(client[0])):
            reason = "the connection is not on loopback"
        elif any(name in _FORWARDING_HEADERS for name, _ in headers):
            reason = "a forwarded request does not show who sent it"
        else:
            peer_uid = _peer_uid(scope)
            if peer_uid == self.owner_uid:
                return None
            if peer_uid is not None:
                return self._not_the_owner(peer_uid)
            reason = "the user behind this connection cannot be determined"
        if self._agent_on_mcp(scope, headers, presented):
            return None  # an agent on a host, through its forward: its credential proves it
        if presented is not None:
            return Refusal(401, f"invalid bearer token ({reason}, so a token is required); {_TOKEN_HINT}")
        return Refusal(401, f"a token is required: {reason}; {_TOKEN_HINT}")

    def check_browser(self, scope, headers: list[tuple[bytes, bytes]]) -> Refusal | None:
        method = scope.get("method", "GET") if scope["type"] == "http" else "WEBSOCKET"
        path = scope.get("path", "")
        if (method, path) == _SIGN_IN:
            return self._browser_of_another_user(scope)
        if (method, path) in _OPEN_TO_BROWSERS or (method in ("GET", "HEAD") and path.startswith(_OPEN_PREFIX)):
            return None
        # The sign-in and every signed-in request must come from the owner's own browser: a
        # cookie or a ticket is a bearer credential, and another local user could copy one.
        wrong_user = self._browser_of_another_user(scope)
        if wrong_user is not None:
            return wrong_user
        session = session_cookie(headers, cookie_name(scope))
        if session is None or not self.logins.check(session):
            return Refusal(401, f"this browser has not signed in: {_SIGN_IN_HINT}")
        if scope["type"] == "websocket":  # no Fetch metadata here: the page's own origin only
            origin = _header(headers, b"origin").decode("latin-1")
            if not same_origin(origin, _header(headers, b"host").decode("latin-1")):
                return Refusal(403, "a WebSocket opened by another site is refused")
            return None
        if _header(headers, b"sec-fetch-site").lower() not in _OWN_SITE:
            return Refusal(403, "a request started by another site is refused")
        return None

    def _agent_on_mcp(self, scope, headers: list[tuple[bytes, bytes]], bearer: bytes | None) -> bool:
        """A request to cao's MCP endpoint that carries a valid agent credential. Only asked
        where the kernel cannot name the caller (an agent on a host): on loopback the owner rule
        comes first, so a credential copied by another local user admits nobody."""
        if scope.get("path") not in _MCP_PATHS:
            return False
        credential = _header(headers, _AGENT_HEADER) or bearer or b""
        return terminal_of(self.token.decode("ascii"), credential.decode("latin-1").strip()) is not None

    def _browser_of_another_user(self, scope) -> Refusal | None:
        """A browser on this machine runs as some user, and the kernel names it: only the
        owner's is let in. A peer it cannot name is let in only from another machine (a
        non-loopback bind, where the cookie alone has always been the rule)."""
        peer_uid = _peer_uid(scope)
        if peer_uid is not None and peer_uid != self.owner_uid:
            return self._not_the_owner(peer_uid)
        client = scope.get("client")
        if peer_uid is None and (not client or is_loopback(client[0])):
            return Refusal(403, "the user behind this browser's connection cannot be determined")
        return None

    def _not_the_owner(self, peer_uid: int) -> Refusal:
        return Refusal(
            403,
            f"this cao-server belongs to uid {self.owner_uid} and refuses uid "
            f"{peer_uid}: only its owner may use it (its auth-token file admits, "
            "and only the owner can read it)",
        )


def _peer_uid(scope) -> int | None:
    """The uid that opened the client's socket, if the kernel knows it (a local peer)."""
    client, server = scope.get("client"), scope.get("server")
    if not (client and server and client[1] is not None and server[1] is not None):
        return None
    try:
        return socket_owner_uid((client[0], int(client[1])), (server[0], int(server[1])))
    except (ValueError, TypeError):
        return None


def _query_token(scope) -> bytes | None:
    """`?token=` of a WebSocket URL (core contract §3.6). cao-server keeps no access log,
    so the URL is not written anywhere."""
    for name, value in parse_qsl(scope.get("query_string", b"").decode("latin-1")):
        if name == "token":
            return value.encode("latin-1")
    return None


def _header(headers: list[tuple[bytes, bytes]], wanted: bytes) -> bytes:
    return next((value for name, value in headers if name == wanted), b"")


def from_a_browser(scope, headers: list[tuple[bytes, bytes]]) -> bool:
    """Browsers send Fetch metadata with every HTTP request, and an Origin with every
    WebSocket handshake (where Chromium sends no Fetch metadata); other clients send neither
    unless told to. One exception: a CLI's own requests with Node's fetch (see `_cli_request`)."""
    names = {name for name, _ in headers}
    if scope["type"] == "websocket" and b"origin" in names:
        return True
    return any(name in _FETCH_METADATA for name in names) and not _cli_request(scope, names)


def _cli_request(scope, names: set[bytes]) -> bool:
    """A CLI's own request with Node's fetch: an HTTP hook (Qwen Code) or a call to cao's MCP
    endpoint (Gemini CLI, Qwen Code). Node sends `Sec-Fetch-Mode: cors` and no other Fetch
    metadata, where a browser always sends Sec-Fetch-Site with it. Only a hook post carrying a
    hook secret, or an MCP request carrying an agent credential, is read so; it is then
    admitted by its socket's user like any other client, and the route itself requires the
    terminal's secret or credential."""
    if scope["type"] != "http" or b"sec-fetch-site" in names:
        return False
    path = scope.get("path", "")
    if path in _MCP_PATHS:
        return _AGENT_HEADER in names
    return scope.get("method") == "POST" and b"x-cao-hook-secret" in names and _HOOK_PATH.fullmatch(path) is not None


def cookie_name(scope) -> str:
    """Cookies are shared by every port of a host: one name per server port keeps two servers'
    browser sessions apart."""
    server = scope.get("server") or ("", 0)
    return f"cao_ui_{server[1]}"


def session_cookie(headers: list[tuple[bytes, bytes]], name: str) -> str | None:
    prefix = name + "="
    for key, value in headers:
        if key != b"cookie":
            continue
        for part in value.decode("latin-1").split(";"):
            part = part.strip()
            if part.startswith(prefix):
                return part[len(prefix) :]
    return None


def _bearer_token(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    for name, value in headers:
        if name == b"authorization":
            if value[: len(_BEARER)].lower() == _BEARER:
                return value[len(_BEARER) :].strip()
            return None
    return None


async def _refuse(scope, receive, send, refusal: Refusal) -> None:
    if scope["type"] == "websocket":
        await close_websocket(receive, send, 4000 + refusal.status, refusal.detail)
        return
    challenge = [(b"www-authenticate", b'Bearer realm="cao-server"')] if refusal.status == 401 else []
    await send_json(send, refusal.status, {"detail": refusal.detail}, challenge)
