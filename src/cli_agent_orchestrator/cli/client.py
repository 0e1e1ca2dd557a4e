"""The CLI's only way to cao: a small synchronous HTTP client of cao-server.

Every failure becomes a `click.ClickException`, so click prints `Error: ...`
and exits with code 1 and no traceback.
"""

from __future__ import annotations

from typing import Any

import click
import httpx

from ..actor import CLIENT_HEADER
from ..auth_token import auth_headers
from ..clients.edge import describe_detail
from ..settings import Settings

LAUNCH_TIMEOUT = 120.0  # creating a session waits for the agent CLI to become ready


class ApiError(click.ClickException):
    """cao-server answered with an HTTP error; the message is its `detail`."""

    def __init__(self, message: str, status_code: int):
        super().__init__(message)
        self.status_code = status_code


class ServerUnavailable(click.ClickException):
    """Nothing answered at the server's address (or it did not answer in time)."""


class CaoClient:
    def __init__(self, base_url: str, timeout: float, settings: Settings | None = None):
        self.base_url = base_url
        self.timeout = timeout
        settings = settings or Settings.from_env()
        # The token where it can be read; without it the server still admits its owner on loopback.
        headers = auth_headers(settings.home_dir, settings.client_auth_token)
        headers[CLIENT_HEADER] = "cli"  # the audit log credits what this client causes to "cli"
        # trust_env=False: cao-server is local; a user's HTTP(S)_PROXY must not capture its traffic.
        self._http = httpx.Client(base_url=base_url, timeout=timeout, trust_env=False, headers=headers)

    @classmethod
    def from_env(cls) -> CaoClient:
        settings = Settings.from_env()
        return cls(settings.base_url, settings.mcp_request_timeout, settings)

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        timeout: float | None = None,
    ) -> Any:
        wait = timeout if timeout is not None else self.timeout
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            resp = self._http.request(method, path, params=clean or None, json=json, timeout=wait)
        except httpx.ConnectError:
            raise ServerUnavailable(
                f"cao-server is not running at {self.base_url} (start it with `cao-server`)"
            ) from None
        except httpx.TimeoutException:
            raise ServerUnavailable(
                f"cao-server at {self.base_url} did not answer {method} {path} within {wait:g}s"
            ) from None
        except httpx.HTTPError as exc:
            raise click.ClickException(f"request to cao-server failed ({method} {path}): {exc}") from None
        if resp.status_code >= 400:
            try:
                message = describe_detail(resp.json().get("detail"))
            except (ValueError, AttributeError):
                message = resp.text.strip()[:500]
            raise ApiError(message or f"HTTP {resp.status_code}", resp.status_code)
        try:
            return resp.json()
        except ValueError:
            return resp.text

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("POST", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.request("DELETE", path, **kwargs)
