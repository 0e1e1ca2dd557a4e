"""Small pieces every real-CLI provider needs: where its per-terminal files go,
how its hooks call back, and how it starts cao-mcp-server."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .base import LaunchContext

MCP_SERVER_NAME = "cao-mcp-server"


def terminal_dir(ctx: LaunchContext) -> Path:
    """A directory cao owns for this terminal's generated config (0700). The user's own
    configuration files are never written."""
    path = ctx.home_dir / "tmp" / ctx.terminal_id
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def hook_argv(event: str | None = None) -> list[str]:
    """The command a CLI hook runs to report `event` (see cli_agent_orchestrator/hook.py)."""
    argv = [sys.executable, "-m", "cli_agent_orchestrator.hook"]
    return argv + [event] if event else argv


def mcp_server(ctx: LaunchContext) -> dict:
    """cao-mcp-server as a stdio MCP server entry: command, args and the identity env."""
    argv = ctx.mcp_server_argv or [sys.executable, "-m", "cli_agent_orchestrator.mcp_server.server"]
    env = {"CAO_TERMINAL_ID": ctx.terminal_id}
    for name in (
        "CAO_API_HOST",
        "CAO_API_PORT",
        "CAO_HOME_DIR",
        "CAO_ENABLE_SENDER_ID_INJECTION",
        "CAO_ENABLE_WORKING_DIRECTORY",
        "CAO_MCP_REQUEST_TIMEOUT",
    ):
        if ctx.environ.get(name):
            env[name] = ctx.environ[name]
    return {"command": argv[0], "args": argv[1:], "env": env}
