"""One POST over urllib, one fresh connection, no retries, no redirects, no proxies.

Why so bare: a run-step request is held open by the server for the whole agent step,
and its outcome is unknown if the connection breaks. Anything that might silently
re-send it (a retry, a redirect turned into a new request) or sit in the middle of it
(a proxy with its own idle timeout) could make agent work run twice or look failed
while it still runs — so the shim talks straight to the server and reports what happened.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request

from ._auth import auth_headers
from ._errors import ShimTransportError


def _direct_opener() -> urllib.request.OpenerDirector:
    # Built by hand rather than with build_opener(): that would add the proxy handler
    # (reads *_proxy env vars) and the redirect handler. Without HTTPErrorProcessor,
    # non-2xx answers come back as ordinary responses instead of raised HTTPErrors,
    # so every status takes the same path.
    opener = urllib.request.OpenerDirector()
    opener.add_handler(urllib.request.HTTPHandler())
    opener.add_handler(urllib.request.HTTPSHandler())
    return opener


def _describe(exc: BaseException, socket_timeout: float) -> str:
    if isinstance(exc, TimeoutError) or (
        isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, TimeoutError)
    ):
        return f"no answer within the {socket_timeout:.0f}s socket timeout"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def post_json(url: str, payload: bytes, socket_timeout: float, fn_name: str) -> tuple[int, str]:
    """POST `payload` and return (status, body text) for any HTTP answer.

    Raises ShimTransportError (original error as __cause__) when no complete answer arrived.
    """
    request = urllib.request.Request(
        url,
        data=payload,
        method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json", **auth_headers()},
    )
    try:
        response = _direct_opener().open(request, timeout=socket_timeout)
        if response is None:  # no handler took the URL; the caller checked the scheme, so defensive
            raise urllib.error.URLError(f"unsupported URL {url!r}")
        with response:
            return response.status, response.read().decode("utf-8", errors="replace")
    except (OSError, http.client.HTTPException) as exc:  # URLError and socket timeouts are OSErrors
        raise ShimTransportError(
            f"{fn_name}(): run-step request to {url} failed: {_describe(exc, socket_timeout)}; "
            "not retried — the step may or may not have run"
        ) from exc
