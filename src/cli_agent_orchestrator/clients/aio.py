"""A thin async HTTP client for cao-server, shaped for tool code.

Tools must turn every expected failure into a result, so nothing here raises for
HTTP errors or an unreachable server: each call returns an `ApiResponse` whose
`error` is a sentence ready to show to the agent.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass
from typing import Any

import httpx

from ..auth_token import auth_headers
from ..settings import Settings
from .edge import describe_detail


@dataclass(frozen=True)
class ApiResponse:
    status: int  # 0 when no HTTP answer arrived (connection failure, client timeout)
    body: Any
    error: str | None = None  # set for every non-2xx outcome
    timed_out: bool = False  # our own client timeout fired, not a server 504

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def detail(self) -> Any:
        """FastAPI's `detail` (a string, a dict for worker errors, a list for 422s)."""
        if isinstance(self.body, dict) and "detail" in self.body:
            return self.body["detail"]
        return self.body


# A call that could not even connect (cao-server restarting, an agent's host whose connection
# to the server is being re-made) never reached the server, so it is safe to try again: for
# Settings.mcp_reconnect_seconds (CAO_MCP_RECONNECT_SECONDS), with these pauses (the last repeats).
RECONNECT_PAUSES_S = (0.2, 0.5, 1.0, 2.0)


# A request header of cao's in-process calls (mcp_server/endpoint.py): this call ends with its
# caller instead of running on (a wait for a result that nobody would receive).
CANCELLABLE = "X-CAO-Cancellable"


class CaoApi:
    def __init__(
        self,
        base_url: str,
        timeout: float,
        headers: dict[str, str] | None = None,
        reconnect_s: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        """`reconnect_s`: how long a call that cannot connect is tried again (None: the
        agent default, CAO_MCP_RECONNECT_SECONDS; 0 for a human's tool, who should hear at once).
        `transport`: how requests travel (None: HTTP; cao-server's own MCP endpoint calls its
        app in-process)."""
        self.base_url = base_url
        self.timeout = timeout
        self.transport = transport
        self.reconnect_s = Settings.from_env().mcp_reconnect_seconds if reconnect_s is None else reconnect_s
        # The Authorization header; by default from CAO_AUTH_TOKEN or the cao home's token
        # file, and none when neither can be read (the server still admits its owner on loopback).
        self.headers = headers
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        # One client for the process: building an httpx client costs tens of
        # milliseconds (TLS context), more than the call it would serve. The MCP
        # server runs a single event loop, so the client never changes loops.
        # trust_env=False: cao-server is addressed directly; a corporate
        # HTTP(S)_PROXY must not swallow localhost calls.
        if self._client is None:
            if self.headers is None:
                settings = Settings.from_env()
                self.headers = auth_headers(settings.home_dir, settings.client_auth_token)
            self._client = httpx.AsyncClient(
                base_url=self.base_url, trust_env=False, headers=self.headers, transport=self.transport
            )
        return self._client

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        timeout: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> ApiResponse:
        limit = self.timeout if timeout is None else timeout
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            resp = await self._request_reconnecting(method, path, query, json, limit, headers)
        except httpx.TimeoutException:
            return ApiResponse(0, None, f"no answer from cao-server within {limit:.0f}s", timed_out=True)
        except httpx.HTTPError as exc:
            return ApiResponse(0, None, f"cannot reach cao-server at {self.base_url}: {exc}")
        try:
            body = resp.json()
        except ValueError:
            body = resp.text
        if 200 <= resp.status_code < 300:
            return ApiResponse(resp.status_code, body)
        failed = ApiResponse(resp.status_code, body)
        return ApiResponse(resp.status_code, body, describe_detail(failed.detail))

    async def _request_reconnecting(
        self,
        method: str,
        path: str,
        query: dict[str, Any],
        json: Any,
        limit: float,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """The request, tried again while the server cannot be connected to (nothing was sent)."""
        deadline = time.monotonic() + self.reconnect_s
        for attempt in itertools.count():
            try:
                return await self._http().request(method, path, params=query, json=json, timeout=limit, headers=headers)
            except httpx.ConnectError:
                pause = RECONNECT_PAUSES_S[min(attempt, len(RECONNECT_PAUSES_S) - 1)]
                if time.monotonic() + pause > deadline:
                    raise
                await asyncio.sleep(pause)
        raise AssertionError("unreachable")

    async def get(self, path: str, **kw: Any) -> ApiResponse:
        return await self.request("GET", path, **kw)

    async def post(self, path: str, **kw: Any) -> ApiResponse:
        return await self.request("POST", path, **kw)

    async def delete(self, path: str, **kw: Any) -> ApiResponse:
        return await self.request("DELETE", path, **kw)
