"""Driving the real cao-mcp-server console script over stdio with the official MCP
client SDK (shared by the MCP tests)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def mcp_command() -> tuple[str, list[str]]:
    """The installed console script next to this interpreter; the module form if the
    package was installed without scripts."""
    script = Path(sys.executable).parent / "cao-mcp-server"
    if script.exists():
        return str(script), []
    return sys.executable, ["-m", "cli_agent_orchestrator.mcp_server.server"]


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
