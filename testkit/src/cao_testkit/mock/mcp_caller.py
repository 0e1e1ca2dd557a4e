"""The mock's MCP client, as a real coding CLI has one of its own: JSON-RPC to cao's tools, over
streamable HTTP to cao-server's /mcp endpoint (CAO_MCP_URL, proving itself with CAO_MCP_TOKEN),
or, with CAO_MOCK_MCP=stdio, over the stdio of the `cao-mcp-server` relay it starts.

Like a real CLI it lists the tools as it starts (`list_tools_at_start`), which is when cao
counts the agent as ready. Standard library only: a hundred mock agents must start fast.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HEARTBEAT_S = 0.1  # how often the working indicator moves while a tool call runs
CALL_TIMEOUT_S = 120.0  # every tool but handoff, which waits as long as its worker may take
HANDOFF_MARGIN_S = 120.0
PROTOCOL_VERSION = "2025-06-18"
RECONNECT_S, RECONNECT_PAUSE_S = 60.0, 0.5  # a refused connection is tried again this long
CLIENT_INFO = {"name": "cao-mock-agent", "version": "1"}


# Set once the tools listed at start are in (None: this mock lists none at start). Until then the
# brain has no cao tools, as a real CLI whose MCP servers are still connecting has none.
_listed_at_start: threading.Event | None = None


class BrainError(Exception):
    """A failure the agent shows as its own error row: ``✗ Error: <error_text>``."""

    @property
    def error_text(self) -> str:
        return str(self)


def _default_log_path(env: Mapping[str, str]) -> Path:
    home = Path(env.get("CAO_HOME_DIR") or "~/.aws/cli-agent-orchestrator").expanduser()
    who = env.get("CAO_TERMINAL_ID") or str(os.getpid())
    return home / "logs" / "mock-brain" / f"{who}.log"


class HttpChannel:
    """One JSON-RPC request per POST to the endpoint; the answer is JSON or an SSE stream."""

    def __init__(self, url: str, token: str):
        parts = urlsplit(url)
        self.host, self.port, self.path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/mcp"
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "X-CAO-Agent-Token": token,
        }

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + RECONNECT_S
        while True:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
            try:
                conn.request("POST", self.path, body=json.dumps(message).encode(), headers=self.headers)
                resp = conn.getresponse()
                body = resp.read()
                kind = resp.getheader("Content-Type") or ""
                break
            except ConnectionRefusedError:
                # Nothing was sent (cao-server restarting, a host's forward being made again):
                # a client that keeps its MCP server tries again for a while.
                if time.monotonic() > deadline:
                    raise
                time.sleep(RECONNECT_PAUSE_S)
            finally:
                conn.close()
        if resp.status == 202 or not body:
            return None
        if kind.startswith("text/event-stream"):
            for event in body.replace(b"\r\n", b"\n").split(b"\n\n"):
                data = b"\n".join(ln[5:].lstrip() for ln in event.split(b"\n") if ln.startswith(b"data:"))
                if data:
                    answer = json.loads(data)
                    if isinstance(answer, dict) and answer.get("id") == message.get("id"):
                        return answer
            raise BrainError(f"{message.get('method')}: no answer in the event stream (HTTP {resp.status})")
        answer = json.loads(body)
        if resp.status >= 400 and not (isinstance(answer, dict) and "error" in answer):
            raise BrainError(f"{message.get('method')}: HTTP {resp.status}: {body[:200]!r}")
        return answer

    def close(self) -> None:
        pass


class StdioChannel:
    """JSON-RPC lines to a `cao-mcp-server` relay process and back, one call at a time."""

    def __init__(self, argv: list[str], env: Mapping[str, str], log_path: Path):
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._errlog = open(log_path, "ab")  # the relay's stderr must never reach the pane
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errlog, env=dict(env)
        )
        self._lock = threading.Lock()

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self._lock:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
            if "id" not in message:
                return None
            while True:
                line = self.proc.stdout.readline()
                if not line:
                    raise BrainError(f"{message.get('method')}: the cao-mcp-server relay ended")
                answer = json.loads(line)
                if isinstance(answer, dict) and answer.get("id") == message["id"]:
                    return answer

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._errlog.close()


class McpToolCaller:
    """Calls cao's tools from the mock's synchronous loop; while a call runs, `heartbeat` is
    invoked every HEARTBEAT_S so the caller can keep its working indicator alive."""

    def __init__(
        self,
        env: Mapping[str, str],
        heartbeat: Callable[[], None] | None = None,
        log_path: Path | None = None,
    ):
        self.env = dict(env)
        self.heartbeat = heartbeat
        self.log_path = log_path or _default_log_path(env)
        self._ids = itertools.count(1)
        self._channel: HttpChannel | StdioChannel | None = None
        self._lock = threading.Lock()

    def _open(self) -> HttpChannel | StdioChannel:
        with self._lock:
            if self._channel is None:
                if self.env.get("CAO_MOCK_MCP", "http") == "stdio":
                    channel: HttpChannel | StdioChannel = StdioChannel(mcp_command(self.env), self.env, self.log_path)
                else:
                    url, token = self.env.get("CAO_MCP_URL", ""), self.env.get("CAO_MCP_TOKEN", "")
                    if not url or not token:
                        raise BrainError("no cao MCP endpoint: CAO_MCP_URL and CAO_MCP_TOKEN are not set")
                    channel = HttpChannel(url, token)
                self._send(
                    channel,
                    "initialize",
                    {
                        "protocolVersion": PROTOCOL_VERSION,
                        "capabilities": {},
                        "clientInfo": CLIENT_INFO,
                    },
                )
                channel.request({"jsonrpc": "2.0", "method": "notifications/initialized"}, CALL_TIMEOUT_S)
                self._channel = channel
            return self._channel

    def _send(self, channel: HttpChannel | StdioChannel, method: str, params: dict, timeout: float = CALL_TIMEOUT_S):
        answer = channel.request({"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}, timeout)
        if not isinstance(answer, dict):
            raise BrainError(f"{method}: no answer")
        if "error" in answer:
            error = answer["error"]
            raise BrainError(f"{method} failed: {error.get('message') if isinstance(error, dict) else error}")
        return answer.get("result") or {}

    def list_tools(self) -> list[str]:
        """What a CLI does as it starts: connect and list the tools (cao's readiness signal)."""
        result = self._send(self._open(), "tools/list", {})
        return [str(tool.get("name")) for tool in result.get("tools", []) if isinstance(tool, dict)]

    def __call__(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        if _listed_at_start is not None and not _listed_at_start.is_set():
            raise BrainError(f"{name} failed: no such tool yet (the agent's MCP connection to cao is still starting)")
        limit = CALL_TIMEOUT_S
        if name == "handoff":
            limit = float(args.get("timeout") or 600) + HANDOFF_MARGIN_S
        done = threading.Event()
        outcome: dict[str, Any] = {}

        def call() -> None:
            try:
                outcome["result"] = self._send(self._open(), "tools/call", {"name": name, "arguments": args}, limit)
            except BaseException as exc:
                outcome["error"] = exc
            finally:
                done.set()

        threading.Thread(target=call, daemon=True).start()
        while not done.wait(HEARTBEAT_S):
            if self.heartbeat is not None:
                self.heartbeat()
        if "error" in outcome:
            exc = outcome["error"]
            if isinstance(exc, BrainError):
                raise exc
            raise BrainError(f"{name} failed: {type(exc).__name__}: {exc}") from exc
        return _tool_result(name, outcome["result"])

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()


def _tool_result(name: str, result: dict[str, Any]) -> dict[str, Any]:
    text = "\n".join(str(b.get("text", "")) for b in result.get("content", []) if isinstance(b, dict)).strip()
    if result.get("isError"):  # unknown tool, bad arguments, a tool that raised
        raise BrainError(f"{name} failed: {text or 'tool error'}")
    if isinstance(result.get("structuredContent"), dict):
        return result["structuredContent"]
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"result": text}


def list_tools_at_start(env: Mapping[str, str]) -> None:
    """Connect and list cao's tools in the background, after CAO_MOCK_MCP_DELAY_MS, as a real CLI
    does while its prompt is already up; failures go to the brain's log (the pane stays clean)."""
    global _listed_at_start
    if not (env.get("CAO_MCP_URL") and env.get("CAO_MCP_TOKEN")) or env.get("CAO_MOCK_LIST_TOOLS") == "0":
        return
    listed = _listed_at_start = threading.Event()

    def run() -> None:
        try:
            time.sleep(int(env.get("CAO_MOCK_MCP_DELAY_MS") or 0) / 1000)  # the CLI's own start-up pace
            caller = McpToolCaller(env)
            caller.list_tools()
            listed.set()  # the tools are known from here on, as a CLI registers them
            caller.close()
        except Exception as exc:
            log = _default_log_path(env)
            try:
                log.parent.mkdir(parents=True, exist_ok=True)
                with open(log, "a", encoding="utf-8") as out:
                    out.write(f"listing cao's tools at start failed: {type(exc).__name__}: {exc}\n")
            except OSError:
                pass

    threading.Thread(target=run, name="mock-mcp-start", daemon=True).start()


def mcp_command(env: Mapping[str, str]) -> list[str]:
    raw = env.get("CAO_MOCK_MCP_COMMAND", "").strip()
    if not raw:
        return ["cao-mcp-server"]  # the provider normally sets it; a hand-started mock uses PATH
    try:
        argv = json.loads(raw)
    except json.JSONDecodeError:
        argv = raw.split()  # a plain command line is friendlier than an error
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
        raise ValueError(f"CAO_MOCK_MCP_COMMAND must be a JSON list of strings, got {raw!r}")
    return argv
