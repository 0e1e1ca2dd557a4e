"""cao's agent tools over MCP streamable HTTP, served by cao-server itself at /mcp.

Who calls is proven on every request: an agent credential (agent_credentials.py) names its
terminal, the server's token names its user (an MCP client outside any agent, e.g.
`cao-mcp-server` run by hand); anything else is 401 and nothing runs. The tools are the code
cao-mcp-server always ran (tools.py, workflow_tools.py), bound to the caller and to an
in-process client of the HTTP API, so they answer exactly as before. Stateless: no MCP session
outlives its request, so a restarted cao-server costs a CLI nothing (its next call works).
An agent's CLI listing the tools (and what else its CLI lists at start) is published
(McpListed): from then on it is ready.

The MCP SDK takes about a second of CPU to import: it is loaded on a thread once cao-server is
up (`start`), so the server answers at once, and a request to /mcp meanwhile waits for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
from starlette.types import ASGIApp, Receive, Scope, Send

from ..agent_credentials import HEADER, terminal_of
from ..api.raw_answers import send_json
from ..bus import EventBus
from ..clients.aio import CANCELLABLE, CaoApi
from ..events import McpListed
from ..settings import Settings
from ..store import Store
from .discovery_tools import DiscoveryTools
from .tools import OrchestratorTools, ToolConfig
from .workflow_tools import WorkflowTools

log = logging.getLogger(__name__)

PATH = "/mcp"
_HEADER = HEADER.lower().encode("latin-1")
_BEARER = b"bearer "
# JSON-RPC's "server error" range: no valid credential (the HTTP status is 401).
UNAUTHORIZED_CODE = -32001
UNAVAILABLE_CODE = -32002  # the endpoint is not up (HTTP 503): its last failure says why
# How long a request waits for the endpoint to come up (the SDK's first import, a restart after a
# failure), and the pauses between such restarts.
READY_WAIT_S = 20.0
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 30.0
_CHALLENGE = (b"www-authenticate", b'Bearer realm="cao-mcp"')


@dataclass(frozen=True)
class Caller:
    """Who an MCP request comes from: a terminal, or (None) the server's own user."""

    terminal_id: str | None
    # A workflow step's agent: its run, step and generation, as workflow_return reads them.
    workflow_env: Mapping[str, str] = field(default_factory=dict)


CALLER: ContextVar[Caller | None] = ContextVar("cao_mcp_caller", default=None)
# The catalogues a request lists (tools/list, prompts/list, ...): McpListed goes out once its
# answer is sent, not while it is computed, so that "ready" never comes before the CLI has the list.
_LISTED: ContextVar[list[str] | None] = ContextVar("cao_mcp_listed", default=None)
_LISTINGS = frozenset({"tools/list", "prompts/list", "resources/list", "resources/templates/list"})


class ShieldedASGITransport(httpx.ASGITransport):
    """The HTTP API in-process. A call is not cancelled with its caller (a CLI that gave up on a
    handoff): a request over a socket would run on after its client went, and so does this one.
    Except a wait that must end with its caller (CANCELLABLE: a durable handoff's result read by
    a caller that is gone would be handed to nobody)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.headers.get(CANCELLABLE) == "1":
            return await super().handle_async_request(request)
        call = asyncio.ensure_future(super().handle_async_request(request))
        return await asyncio.shield(call)


class McpEndpoint:
    """The ASGI app at /mcp, and the lifespan its session manager needs."""

    def __init__(
        self,
        settings: Settings,
        api_app: ASGIApp,
        server_token: Callable[[], str],
        store: Callable[[], Store],
        bus: Callable[[], EventBus],
    ):
        self._token, self._store, self._bus = server_token, store, bus
        self._base = ToolConfig(
            terminal_id=None,
            sender_id_injection=settings.sender_id_injection,
            working_directory_param=settings.working_directory_param,
            home_dir=settings.home_dir,
            base_url=settings.base_url,
            request_timeout=settings.mcp_request_timeout,
            handoff_wait=settings.handoff_wait,
        )
        self._api: CaoApi | None = None
        self._api_app = api_app
        self._working_directory_param = settings.working_directory_param
        self._host = settings.api_host
        self.server: Any = None  # the MCPServer, once built
        self._ready: asyncio.Event | None = None  # set while the endpoint serves
        self._failure = "it is still starting"
        self._closing = asyncio.Event()

    async def start(self) -> None:
        """Import the SDK on a thread and serve (in the background): the server is up meanwhile."""
        self._ready = asyncio.Event()
        self._closing.clear()
        self._runner = asyncio.get_running_loop().create_task(self._serve(), name="mcp-endpoint")

    async def stop(self) -> None:
        self._closing.set()
        if getattr(self, "_runner", None) is not None:
            try:
                async with asyncio.timeout(5):
                    await self._runner
            except (TimeoutError, asyncio.CancelledError):
                self._runner.cancel()

    async def _serve(self) -> None:
        """Serve until stopped. A failure (the SDK could not be imported, out of file descriptors,
        its task group died) is logged and the endpoint is built again after a pause: it never
        stays down while cao-server is up."""
        assert self._ready is not None
        pause = RETRY_FIRST_S
        while not self._closing.is_set():
            try:
                if self.server is None:
                    self.server = await asyncio.to_thread(self._build)
                # A session manager runs once: every (re)start gets a new one.
                self.server.streamable_http_app(stateless_http=True, host=self._host)
                async with self.server.session_manager.run():
                    self._failure, pause = "", RETRY_FIRST_S
                    self._ready.set()
                    await self._closing.wait()
            except Exception as exc:
                self._ready.clear()
                self._failure = f"{type(exc).__name__}: {exc}"
                log.exception("cao's MCP endpoint failed; starting it again in %.0f s", pause)
                try:
                    async with asyncio.timeout(pause):
                        await self._closing.wait()
                except TimeoutError:
                    pass
                pause = min(pause * 2, RETRY_MAX_S)

    def _build(self) -> Any:
        from .server import build_server  # the MCP SDK: about a second of imports

        # A line per request ("Terminating session: None") would drown the server log.
        logging.getLogger("mcp").setLevel(logging.WARNING)

        server = build_server(self._tools, self._workflows, self._working_directory_param, self._discovery)
        server.middleware.append(self._note_listing)
        return server

    # --- the tools, bound to the caller ------------------------------------------------
    def _client(self) -> CaoApi:
        if self._api is None:
            self._api = CaoApi(
                self._base.base_url,
                self._base.request_timeout,
                headers={"Authorization": f"Bearer {self._token()}"},
                reconnect_s=0,
                transport=ShieldedASGITransport(self._api_app),
            )
        return self._api

    def _config(self) -> ToolConfig:
        caller = CALLER.get()
        return replace(self._base, terminal_id=caller.terminal_id if caller else None)

    def _tools(self) -> OrchestratorTools:
        return OrchestratorTools(self._config(), self._client())

    def _discovery(self) -> DiscoveryTools:
        return DiscoveryTools(self._config(), self._client())

    def _workflows(self) -> WorkflowTools:
        caller = CALLER.get()
        return WorkflowTools(self._config(), self._client(), env=dict(caller.workflow_env) if caller else {})

    async def _note_listing(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        result = await call_next(ctx)
        listed = _LISTED.get()
        if ctx.method in _LISTINGS and listed is not None:
            listed.append(ctx.method)
        return result

    # --- ASGI ----------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope.get("method") == "GET":
            # No server-to-client stream without sessions: an open GET would only hold a connection
            # (and break, with a notice in the CLI, at every restart). 405 tells a client there is none.
            await send_json(send, 405, {"detail": "no event stream here: POST JSON-RPC"}, [(b"allow", b"POST, DELETE")])
            return
        caller, refusal = await self._caller(scope.get("headers") or [])
        if caller is None:
            await _unauthorized(send, refusal)
            return
        if not await self._up():
            error = {"code": UNAVAILABLE_CODE, "message": f"cao's MCP endpoint is not available: {self._failure}"}
            await send_json(send, 503, {"jsonrpc": "2.0", "id": None, "error": error})
            return
        listed: list[str] = []
        token, listing = CALLER.set(caller), _LISTED.set(listed)
        try:
            await self.server.session_manager.handle_request(scope, receive, send)  # answer sent
        finally:
            CALLER.reset(token)
            _LISTED.reset(listing)
        if caller.terminal_id is not None:
            for method in listed:
                self._bus().publish(McpListed(caller.terminal_id, method))

    async def _up(self) -> bool:
        """Wait (a little) for the endpoint to be up: just after cao-server started, the SDK may
        still be loading."""
        if self._ready is None:
            return False
        try:
            async with asyncio.timeout(READY_WAIT_S):
                await self._ready.wait()
        except TimeoutError:
            return False
        return True

    async def _caller(self, headers: list[tuple[bytes, bytes]]) -> tuple[Caller | None, str]:
        presented = _credential(headers)
        if presented is None:
            return None, f"no credential: send {HEADER} (an agent's CAO_MCP_TOKEN) or the server's token as a bearer"
        server_token = self._token()
        if presented == server_token:
            return Caller(None), ""
        terminal_id = terminal_of(server_token, presented)
        if terminal_id is None:
            return None, "the credential is not valid for this cao-server"
        store = self._store()
        term = await store.run(store.get_terminal, terminal_id)
        if term is None or term.gone:
            return None, f"terminal {terminal_id} no longer exists"
        return Caller(terminal_id, term.workflow_step or {}), ""


def _credential(headers: list[tuple[bytes, bytes]]) -> str | None:
    bearer = None
    for name, value in headers:
        if name == _HEADER:
            return value.decode("latin-1").strip()
        if name == b"authorization" and value[: len(_BEARER)].lower() == _BEARER:
            bearer = value[len(_BEARER) :].decode("latin-1").strip()
    return bearer


async def _unauthorized(send: Send, reason: str) -> None:
    error = {"code": UNAUTHORIZED_CODE, "message": f"unauthorized: {reason}"}
    await send_json(send, 401, {"jsonrpc": "2.0", "id": None, "error": error}, [_CHALLENGE])
