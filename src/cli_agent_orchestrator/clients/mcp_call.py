"""One call of one of cao's MCP tools over cao-server's `/mcp` endpoint, from a process that is no
MCP client (`cao agent …`): the same tool, arguments and result an agent's CLI gets.

Who calls is proven as the relay proves it (mcp_server/relay.py): the agent's credential from
CAO_MCP_TOKEN (cao puts it in every agent's environment), else the token of the user who owns
cao-server. A CAO_TERMINAL_ID without the credential claims nothing. Standard library HTTP, one
POST per message: the endpoint is stateless.
"""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit

from ..mcp_server.relay import credential_headers, endpoint_url, sse_data

PROTOCOL_VERSION = "2025-06-18"
CALL_TIMEOUT_S = 3600.0 + 300.0  # a handoff's own limit plus start-up and teardown


class McpCallError(Exception):
    """The endpoint could not be reached or did not answer the call as MCP does."""


def call_tool(tool: str, arguments: dict[str, Any], timeout: float = CALL_TIMEOUT_S) -> dict[str, Any]:
    """The tool's structured result (what an agent's CLI reads), or McpCallError."""
    problems: list[str] = []
    url = endpoint_url(problems)
    if problems:
        raise McpCallError("; ".join(problems))
    parts = urlsplit(url)
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        **credential_headers(),
    }
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "cao-agent-cli", "version": "1"},
        },
    }
    answer = _post(parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/mcp", headers, init, 30.0)
    version = (answer.get("result") or {}).get("protocolVersion")
    if isinstance(version, str):
        headers["MCP-Protocol-Version"] = version
    request = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    answer = _post(parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/mcp", headers, request, timeout)
    result = answer.get("result")
    if not isinstance(result, dict):
        error = answer.get("error") or {}
        raise McpCallError(str(error.get("message") or f"no result from {tool}"))
    structured = result.get("structuredContent")
    if isinstance(structured, dict):
        return structured.get("result", structured) if set(structured) == {"result"} else structured
    text = "".join(c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict))
    if result.get("isError"):
        raise McpCallError(text or f"{tool} failed")
    try:
        parsed = json.loads(text)
    except ValueError:
        return {"text": text}
    return parsed if isinstance(parsed, dict) else {"result": parsed}


def _post(host: str, port: int, path: str, headers: dict[str, str], message: dict, timeout: float) -> dict:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(message).encode(), headers=headers)
        resp = conn.getresponse()
        body, kind = resp.read(), resp.getheader("Content-Type") or ""
    except OSError as exc:
        raise McpCallError(f"cannot reach cao-server at {host}:{port}: {exc}") from None
    finally:
        conn.close()
    frames = sse_data(body) if kind.startswith("text/event-stream") else [body]
    for frame in frames:
        try:
            answer = json.loads(frame)
        except ValueError:
            continue
        if isinstance(answer, dict) and answer.get("id") == message["id"]:
            return answer
    shown = body[:300].decode(errors="replace")
    raise McpCallError(f"cao-server answered HTTP {resp.status}: {shown}" if resp.status >= 400 else shown)
