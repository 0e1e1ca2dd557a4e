"""Driving cao's agent tools with the official MCP client SDK: through the real `cao-mcp-server`
console script over stdio (the relay to cao-server's /mcp), as an agent's CLI starts it (shared
by the MCP tests)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from cli_agent_orchestrator.agent_credentials import credential_for

# What a test process may have inherited from a cao terminal it runs in: never leaked into a
# client that stands for another agent (or for the user).
_IDENTITY = ("CAO_TERMINAL_ID", "CAO_MCP_TOKEN", "CAO_MCP_URL", "CAO_HOOK_SECRET")
_WORKFLOW = ("CAO_WORKFLOW_RUN_ID", "CAO_WORKFLOW_STEP_ID", "CAO_WORKFLOW_GENERATION")


def agent_env(server: Any, terminal_id: str | None, **extra: str) -> dict[str, str]:
    """The environment an agent's MCP client has: the server's, its CAO_TERMINAL_ID and its
    credential CAO_MCP_TOKEN, as cao gives every agent. None: the user, outside any agent
    (cao-mcp-server then speaks with the server's token)."""
    env = {k: v for k, v in server.env.items() if k not in _IDENTITY + _WORKFLOW}
    if terminal_id is not None:
        token = (Path(server.home) / "auth-token").read_text().strip()
        env["CAO_TERMINAL_ID"] = terminal_id
        env["CAO_MCP_TOKEN"] = credential_for(token, terminal_id)
    env.update(extra)
    return env


def mcp_command() -> tuple[str, list[str]]:
    """The installed console script next to this interpreter; the module form if the
    package was installed without scripts."""
    script = Path(sys.executable).parent / "cao-mcp-server"
    if script.exists():
        return str(script), []
    return sys.executable, ["-m", "cli_agent_orchestrator.mcp_server.relay"]


@asynccontextmanager
async def mcp_session(env: dict[str, str]) -> AsyncIterator[ClientSession]:
    command, args = mcp_command()
    params = StdioServerParameters(command=command, args=args, env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool and return its structured result; expected failures are results, not errors."""
    result = await session.call_tool(tool, arguments, read_timeout_seconds=60)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict), result
    return result.structured_content
