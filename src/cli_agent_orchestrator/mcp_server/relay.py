"""`cao-mcp-server`: stdio MCP relayed to cao-server's own MCP endpoint (/mcp), for a CLI that
cannot reach an HTTP MCP server and for a user's own stdio MCP client. The tools run in
cao-server; this process only carries JSON-RPC lines across, one HTTP POST each.

Who it speaks for: the agent whose credential is in CAO_MCP_TOKEN (cao puts it in every agent's
environment), else the user who owns cao-server (its token, read from the cao home like `cao`
does). Standard library only and little of it, so that it starts in tens of milliseconds and
holds a few MB: nothing of cao's packages but the token reader is imported.

Requests are forwarded concurrently (a long handoff does not hold up a send_message), answers are
written one line at a time. A cao-server that cannot be reached yet (restarting) is tried again
for CAO_MCP_RECONNECT_SECONDS (60): nothing was sent, so trying again is safe. A setting it
cannot read (CAO_API_PORT, CAO_MCP_RECONNECT_SECONDS) stops it with exit code 2, as it stops
cao; it parses them itself (settings.LIGHT_PROCESS_READS says why).
"""

from __future__ import annotations

import http.client
import json
import math
import os
import sys
import threading
import time
from urllib.parse import urlsplit

from ..auth_token import auth_headers

PROTOCOL_HEADER = "MCP-Protocol-Version"
SESSION_HEADER = "Mcp-Session-Id"
RECONNECT_S = 60.0
RECONNECT_PAUSES_S = (0.2, 0.5, 1.0, 2.0)
# The longest one call may take: a handoff's own limit (3600 s) plus start-up and teardown.
CALL_TIMEOUT_S = 3600.0 + 300.0
UNREACHABLE_CODE = -32000


class Relay:
    def __init__(self, url: str, headers: dict[str, str], reconnect_s: float):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.path = parts.path or "/mcp"
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **headers,
        }
        self.reconnect_s = reconnect_s
        self._out = threading.Lock()
        self._session: str | None = None

    def serve(self, stdin, stdout) -> None:
        """Each line of `stdin` to the endpoint; each answer to `stdout`. Ends with stdin."""
        self.stdout = stdout
        pending: list[threading.Thread] = []
        for raw in stdin:
            line = raw.strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except ValueError:
                self._write({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}})
                continue
            if isinstance(message, dict) and message.get("method") == "initialize":
                self._forward(line, message)  # in order: the answer names the protocol version
            else:
                thread = threading.Thread(target=self._forward, args=(line, message), daemon=True)
                thread.start()
                pending = [t for t in pending if t.is_alive()] + [thread]
        for thread in pending:  # stdin closed: answer what is in flight, then end
            thread.join()

    def _forward(self, line: bytes, message: object) -> None:
        request_id = message.get("id") if isinstance(message, dict) else None
        try:
            status, kind, body, session = self._post(line)
        except OSError as exc:
            if request_id is not None:
                self._fail(request_id, f"cannot reach cao-server at {self.host}:{self.port}: {exc}")
            return
        if session:
            self._session = session
        if status == 202 or not body:
            return  # a notification, or a response to one of the server's requests
        if kind.startswith("text/event-stream"):
            for data in sse_data(body):
                self._write_raw(data)
            return
        if status >= 400 and request_id is not None:
            try:
                answer = json.loads(body)
            except ValueError:
                answer = None
            if not (isinstance(answer, dict) and "error" in answer):
                self._fail(request_id, f"cao-server answered HTTP {status}: {body[:300].decode(errors='replace')}")
                return
            answer["id"] = request_id
            self._write(answer)
            return
        self._write_raw(body)
        if isinstance(message, dict) and message.get("method") == "initialize":
            self._note_version(body)

    def _post(self, body: bytes) -> tuple[int, str, bytes, str | None]:
        deadline = time.monotonic() + self.reconnect_s
        attempt = 0
        while True:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=CALL_TIMEOUT_S)
            try:
                headers = dict(self.headers)
                if self._session:
                    headers[SESSION_HEADER] = self._session
                conn.request("POST", self.path, body=body, headers=headers)
                resp = conn.getresponse()
                return resp.status, resp.getheader("Content-Type") or "", resp.read(), resp.getheader(SESSION_HEADER)
            except (ConnectionRefusedError, FileNotFoundError):
                pause = RECONNECT_PAUSES_S[min(attempt, len(RECONNECT_PAUSES_S) - 1)]
                if time.monotonic() + pause > deadline:
                    raise
                attempt += 1
                time.sleep(pause)  # waiting for a server that is not listening yet, not a sync
            finally:
                conn.close()

    def _note_version(self, body: bytes) -> None:
        try:
            version = json.loads(body)["result"]["protocolVersion"]
        except (ValueError, KeyError, TypeError):
            return
        if isinstance(version, str):
            self.headers[PROTOCOL_HEADER] = version

    def _fail(self, request_id: object, text: str) -> None:
        self._write({"jsonrpc": "2.0", "id": request_id, "error": {"code": UNREACHABLE_CODE, "message": text}})

    def _write(self, message: object) -> None:
        self._write_raw(json.dumps(message).encode())

    def _write_raw(self, data: bytes) -> None:
        with self._out:
            self.stdout.write(data.replace(b"\n", b"") + b"\n")
            self.stdout.flush()


def sse_data(body: bytes) -> list[bytes]:
    """The `data` of each event of a text/event-stream body (multi-line data joined)."""
    out: list[bytes] = []
    for event in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        lines = [ln[5:].lstrip(b" ") for ln in event.split(b"\n") if ln.startswith(b"data:")]
        if lines and any(lines):
            out.append(b"\n".join(lines))
    return out


def endpoint_url(problems: list[str]) -> str:
    """CAO_MCP_URL (set in every agent's environment), else the server CAO_API_HOST/PORT name."""
    url = os.environ.get("CAO_MCP_URL", "").strip()
    if url:
        return url
    host = os.environ.get("CAO_API_HOST", "").strip() or "127.0.0.1"
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    port = _setting("CAO_API_PORT", 9889, problems, minimum=1, maximum=65535)
    return f"http://{host}:{int(port)}/mcp"


def credential_headers() -> dict[str, str]:
    token = os.environ.get("CAO_MCP_TOKEN", "").strip()
    if token:
        return {"X-CAO-Agent-Token": token}
    return auth_headers(os.environ.get("CAO_HOME_DIR") or None, os.environ.get("CAO_AUTH_TOKEN"))


def _setting(name: str, default: float, problems: list[str], minimum: float, maximum: int | None = None) -> float:
    """A number setting parsed as settings.py parses it (which this process does not import,
    to stay light): unset or empty is the default; anything else that is not a number in
    range is a problem naming the variable. `maximum`: a whole number up to it."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(int(raw)) if maximum is not None else float(raw)
    except ValueError:
        value = float("nan")
    if math.isfinite(value) and value >= minimum and (maximum is None or value <= maximum):
        return value
    shown = repr(raw if len(raw) <= 40 else raw[:40] + "…")
    span = f"a whole number from {minimum} to {maximum}" if maximum is not None else f"a number >= {minimum:g}"
    problems.append(f"{name}={shown} must be {span}")
    return default


def main() -> None:
    problems: list[str] = []
    url = endpoint_url(problems)
    reconnect = _setting("CAO_MCP_RECONNECT_SECONDS", RECONNECT_S, problems, minimum=0.0)
    if problems:  # before any request: the agent's CLI reports an MCP server that did not start
        sys.stderr.write(f"cao-mcp-server cannot read its settings: {'; '.join(problems)}.\n")
        raise SystemExit(2)
    Relay(url, credential_headers(), reconnect).serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
