"""cao-ops-mcp-server entry point: the operations tools on an MCP server (stdio).

For an agent outside cao (a Claude Code or Codex the user runs in their own terminal) to
drive cao: profiles, sessions, messages, output, flows and workflow runs. Like
cao-mcp-server it is only an HTTP client of cao-server, and it needs no CAO_TERMINAL_ID.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from ..clients.aio import CaoApi
from ..memory.scopes import project_of
from ..settings import Settings, SettingsError
from .memory_tools import UserMemoryTools, add_ops_memory_tools
from .ops_tools import OpsConfig, OpsTools
from .server import add_workflow_tools
from .tools import ToolConfig
from .workflow_tools import WorkflowTools

SERVER_NAME = "cao-ops-mcp"

# Parameter descriptions end up in the tool schemas the calling model reads.
TerminalId = Annotated[str, Field(description="Terminal id: 8 lowercase hex characters")]
OptTerminalId = Annotated[str | None, Field(description="Terminal id (8 lowercase hex); leave out to use session_name")]
SessionName = Annotated[str, Field(description="Session name, e.g. cao-1a2b3c4d (cao- is added when missing)")]
OptSessionName = Annotated[
    str | None, Field(description="Session name: its first (conductor) terminal is used; leave out with terminal_id")
]
Mode = Annotated[str, Field(description="full: the recent raw screen output; last: the agent's last reply")]

LIST_PROFILES_DOC = """List the agent profiles cao can launch: name, source, description, provider, role."""
PROFILE_DOC = """Read one agent profile as written: description, provider, model, role, tools, system prompt."""
INSTALL_DOC = """Install an agent profile into cao's agent store, by name or from an allow-listed https URL.

`env_vars` are written to cao's .env (the profile's ${VAR} values); a local path is refused."""
LAUNCH_DOC = """Start an agent in a new cao session (its own tmux session); returns session_name and terminal_id.

Without `initial_message` it returns once the agent's CLI is ready; with one it returns at
once and the message is typed in when the agent is ready. The session is named
cao-<8 hex> unless `session_name` is given."""
SEND_DOC = """Send a message to an agent: the given terminal, or the session's first (conductor) terminal.

The message is queued in the agent's inbox and typed in as soon as it is ready (idle),
in order, exactly once. Follow with get_terminal_status and read_session_output."""
READ_DOC = """Read an agent's output: the given terminal, or the session's first (conductor) terminal.

mode "full" is the recent screen output, "last" the agent's last reply. With
`max_chars` only the most recent characters are returned (truncated tells)."""
STATUS_DOC = """An agent terminal's details and live status: idle, processing, completed,
waiting_user_answer, error or unknown."""
OUTPUT_DOC = """An agent terminal's output; mode "last" (default) is its last reply, "full" the recent screen."""
LIST_SESSIONS_DOC = """List cao's sessions: name, status, terminal count, first agent profile."""
SESSION_INFO_DOC = """One session and its terminals (id, provider, agent_profile, status)."""
SHUTDOWN_DOC = """Stop a session: every agent in it is exited and removed, then its tmux session is killed."""
LIST_FLOWS_DOC = """List cao's flows (scheduled agent sessions): name, schedule, agent_profile, next_run, enabled."""
RUN_FLOW_DOC = """Run a flow now: its gate script decides; executed tells whether it launched its agent."""


def build_server(config: OpsConfig | None = None) -> MCPServer:
    ops = OpsTools(config or OpsConfig.from_env())
    server: MCPServer = MCPServer(
        SERVER_NAME,
        instructions="Tools to operate cao from outside it: launch agents in sessions, message them, "
        "read their output, shut sessions down, and run flows and workflows.",
    )

    async def list_profiles() -> dict[str, Any]:
        return await ops.list_profiles()

    async def get_profile_details(
        name: Annotated[str, Field(description="Profile name, e.g. developer")],
    ) -> dict[str, Any]:
        return await ops.get_profile_details(name)

    async def install_profile(
        source: Annotated[str, Field(description="A profile name or an allow-listed https URL")],
        provider: Annotated[str | None, Field(description="Provider to install for (default: cao's)")] = None,
        env_vars: Annotated[
            dict[str, str] | None, Field(description="Variables for the profile, written to cao's .env")
        ] = None,
    ) -> dict[str, Any]:
        return await ops.install_profile(source, provider, env_vars)

    async def launch_session(
        agent_profile: Annotated[str, Field(description="Agent profile to start, e.g. developer")],
        provider: Annotated[
            str | None, Field(description="CLI to run it with, e.g. claude_code or codex (default: the profile's)")
        ] = None,
        session_name: Annotated[str | None, Field(description="Session name (default: cao-<8 hex>)")] = None,
        working_directory: Annotated[
            str | None, Field(description="Absolute directory the agent starts in (default: cao-server's)")
        ] = None,
        allowed_tools: Annotated[
            list[str] | None, Field(description="Tool set replacing the profile's, e.g. ['fs_read', 'fs_list']")
        ] = None,
        model: Annotated[str | None, Field(description="Model for the agent's CLI (default: the profile's)")] = None,
        initial_message: Annotated[
            str | None, Field(description="First message, typed in when the agent is ready")
        ] = None,
        host: Annotated[
            str | None,
            Field(description="Run the agent on this registered host (`cao host list`); default: the placement policy"),
        ] = None,
        env_vars: Annotated[
            dict[str, str] | None,
            Field(
                description="Variables for the agent and every worker later started in its session "
                "(names CAO_* are refused; kept in cao-server's memory only)"
            ),
        ] = None,
    ) -> dict[str, Any]:
        return await ops.launch_session(
            agent_profile,
            provider,
            session_name,
            working_directory,
            allowed_tools,
            model,
            initial_message,
            host,
            env_vars,
        )

    async def send_session_message(
        message: Annotated[str, Field(description="The message text")],
        terminal_id: OptTerminalId = None,
        session_name: OptSessionName = None,
    ) -> dict[str, Any]:
        return await ops.send_session_message(message, terminal_id, session_name)

    async def read_session_output(
        terminal_id: OptTerminalId = None,
        session_name: OptSessionName = None,
        mode: Mode = "full",
        max_chars: Annotated[int | None, Field(description="Return at most this many (the latest) characters")] = None,
    ) -> dict[str, Any]:
        return await ops.read_session_output(terminal_id, session_name, mode, max_chars)

    async def get_terminal_status(terminal_id: TerminalId) -> dict[str, Any]:
        return await ops.get_terminal_status(terminal_id)

    async def get_terminal_output(terminal_id: TerminalId, mode: Mode = "last") -> dict[str, Any]:
        return await ops.get_terminal_output(terminal_id, mode)

    async def list_sessions() -> dict[str, Any]:
        return await ops.list_sessions()

    async def get_session_info(session_name: SessionName) -> dict[str, Any]:
        return await ops.get_session_info(session_name)

    async def shutdown_session(session_name: SessionName) -> dict[str, Any]:
        return await ops.shutdown_session(session_name)

    async def list_flows() -> dict[str, Any]:
        return await ops.list_flows()

    async def run_flow(name: Annotated[str, Field(description="Flow name: 1-64 of [A-Za-z0-9_-]")]) -> dict[str, Any]:
        return await ops.run_flow(name)

    for tool, doc in (
        (list_profiles, LIST_PROFILES_DOC),
        (get_profile_details, PROFILE_DOC),
        (install_profile, INSTALL_DOC),
        (launch_session, LAUNCH_DOC),
        (send_session_message, SEND_DOC),
        (read_session_output, READ_DOC),
        (get_terminal_status, STATUS_DOC),
        (get_terminal_output, OUTPUT_DOC),
        (list_sessions, LIST_SESSIONS_DOC),
        (get_session_info, SESSION_INFO_DOC),
        (shutdown_session, SHUTDOWN_DOC),
        (list_flows, LIST_FLOWS_DOC),
        (run_flow, RUN_FLOW_DOC),
    ):
        server.add_tool(tool, description=doc)
    workflows = WorkflowTools(workflow_config(ops.api), ops.api)
    add_workflow_tools(server, lambda: workflows, step_tools=False)
    add_ops_memory_tools(server, UserMemoryTools(ops.api, project_of(os.getcwd(), Settings.from_env().project_id)))
    return server


def workflow_config(api: CaoApi) -> ToolConfig:
    """The workflow tools' settings, with no caller identity: this server's callers are outside cao."""
    return dataclasses.replace(
        ToolConfig.from_env(), terminal_id=None, base_url=api.base_url, request_timeout=api.timeout
    )


def main() -> None:
    """Run on stdio (also what `cao ops-mcp-server` calls)."""
    # stderr is the host CLI's log; a line per HTTP request would drown real problems.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        server = build_server()
    except SettingsError as exc:  # a malformed CAO_* value: named, no traceback (exit 2, like cao)
        exc.show()
        sys.exit(2)
    server.run("stdio")


if __name__ == "__main__":
    main()
