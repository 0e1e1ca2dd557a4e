"""The mock brain's real tool caller: one MCP client session to cao-mcp-server,
kept open for the agent's lifetime (the official MCP SDK, stdio transport)."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

HEARTBEAT_S = 0.1  # how often the working indicator moves while a tool call runs
START_TIMEOUT_S = 30.0  # cao-mcp-server start plus MCP handshake
CALL_TIMEOUT_S = 120.0  # every tool but handoff, which waits as long as its worker may take
HANDOFF_MARGIN_S = 120.0
CLOSE_TIMEOUT_S = 5.0


class BrainError(Exception):
    """A failure the agent shows as its own error row: ``✗ Error: <error_text>``."""

    @property
    def error_text(self) -> str:
        return str(self)


def _default_log_path(env: Mapping[str, str]) -> Path:
    home = Path(env.get("CAO_HOME_DIR") or "~/.aws/cli-agent-orchestrator").expanduser()
    who = env.get("CAO_TERMINAL_ID") or str(os.getpid())
    return home / "logs" / "mock-brain" / f"{who}.log"


class McpToolCaller:
    """Calls cao-mcp-server tools from the mock's synchronous loop.

    The MCP SDK is async; the mock is a plain select() loop. So the session lives
    in a background thread running its own asyncio loop, opened on the first call
    and kept for the process lifetime (like a real CLI keeps its MCP servers).
    While a call runs, `heartbeat` is invoked every HEARTBEAT_S so the caller can
    keep its working indicator alive.
    """

    def __init__(
        self,
        argv: list[str],
        env: Mapping[str, str],
        heartbeat: Callable[[], None] | None = None,
        log_path: Path | None = None,
    ):
        if not argv:
            raise ValueError("empty cao-mcp-server command")
        self.argv = list(argv)
        self.env = dict(env)  # the pane's env: CAO_TERMINAL_ID, CAO_API_PORT, ... reach the server
        self.heartbeat = heartbeat
        self.log_path = log_path or _default_log_path(env)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._serving: concurrent.futures.Future[None] | None = None
        self._session: Any = None  # mcp ClientSession, typed loosely so importing this module stays cheap
        self._stop: asyncio.Event | None = None

    # --- sync side ----------------------------------------------------------------------
    def __call__(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        try:
            self._ensure_session()
            future = asyncio.run_coroutine_threadsafe(self._call(name, args), self._require_loop())
            return self._wait(future)
        except BrainError:
            raise
        except Exception as exc:  # transport trouble, timeouts: the turn fails, the agent lives on
            raise BrainError(f"{name} failed: {type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        loop, stop, serving = self._loop, self._stop, self._serving
        if loop is None:
            return
        if stop is not None and serving is not None and not serving.done():
            loop.call_soon_threadsafe(stop.set)
            try:
                serving.result(CLOSE_TIMEOUT_S)  # lets the SDK close stdin and reap the server
            except BaseException:
                pass
        loop.call_soon_threadsafe(loop.stop)
        self._loop = None

    def _wait(self, future: concurrent.futures.Future[Any], timeout: float | None = None) -> Any:
        waited = 0.0
        while True:
            try:
                return future.result(HEARTBEAT_S)
            except concurrent.futures.TimeoutError:
                waited += HEARTBEAT_S
                if timeout is not None and waited >= timeout:
                    future.cancel()
                    raise TimeoutError(f"no answer within {timeout:.0f}s") from None
                if self.heartbeat is not None:
                    self.heartbeat()

    def _require_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="mock-brain-mcp", daemon=True).start()
            self._loop = loop
            atexit.register(self.close)
        return self._loop

    def _ensure_session(self) -> None:
        if self._serving is not None and not self._serving.done() and self._session is not None:
            return
        # First use, or the server went away since: (re)connect.
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._serving = asyncio.run_coroutine_threadsafe(self._serve(ready), self._require_loop())
        try:
            self._wait(ready, START_TIMEOUT_S)
        except Exception as exc:
            self._serving.cancel()  # a server that never answered must not linger
            raise BrainError(
                f"cannot start cao-mcp-server ({' '.join(self.argv)}): {type(exc).__name__}: {exc}; see {self.log_path}"
            ) from exc

    # --- async side (the background loop) -------------------------------------------------
    async def _serve(self, ready: concurrent.futures.Future[None]) -> None:
        from mcp.client.session import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        _quiet_logging(self.log_path)
        params = StdioServerParameters(command=self.argv[0], args=self.argv[1:], env=self.env, cwd=os.getcwd())
        self._stop = asyncio.Event()
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            # The server's stderr must never reach the pane: it would break the screen contract.
            with open(self.log_path, "a", encoding="utf-8") as errlog:  # noqa: ASYNC230 - opening a local log does not block
                async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                    await session.initialize()  # bounded by the caller's START_TIMEOUT_S
                    self._session = session
                    if ready.cancelled():  # the caller gave up waiting meanwhile
                        return
                    ready.set_result(None)
                    await self._stop.wait()
        except BaseException as exc:
            if not ready.done():  # done: cancelled by the caller, or an error after start
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            raise
        finally:
            self._session = None

    async def _call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        session = self._session
        if session is None:
            raise BrainError(f"{name} failed: the cao-mcp-server session closed")
        limit = CALL_TIMEOUT_S
        if name == "handoff":
            limit = float(args.get("timeout") or 600) + HANDOFF_MARGIN_S
        result = await session.call_tool(name, args, read_timeout_seconds=limit)
        text = "\n".join(getattr(block, "text", "") for block in result.content).strip()
        if result.is_error:  # unknown tool, bad arguments, a tool that raised
            raise BrainError(f"{name} failed: {text or 'tool error'}")
        if isinstance(result.structured_content, dict):
            return result.structured_content
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        return parsed if isinstance(parsed, dict) else {"result": text}


def _quiet_logging(path: Path) -> None:
    """Send the SDK's log records to the brain's log file instead of the pane (stderr)."""
    root = logging.getLogger()
    if root.handlers:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.FileHandler(path, encoding="utf-8")
    except OSError:
        handler = logging.NullHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.WARNING)


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
