"""cao-mcp-server entry point: registers the orchestration tools on an MCP server (stdio).

The tool signatures are the contract agents see. `working_directory` is offered
only when CAO_ENABLE_WORKING_DIRECTORY is on, so a model is never tempted to pass
a parameter the deployment does not want; that means two function shapes, chosen
when the server is built.
"""
from __future__ import annotations

import logging
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from .tools import OrchestratorTools, ToolConfig

SERVER_NAME = "cao-mcp-server"

# Parameter descriptions end up in the tool schemas the calling model reads.
Profile = Annotated[str, Field(description="Agent profile name of the worker, e.g. developer or reviewer")]
Task = Annotated[str, Field(description="The task for the worker, self-contained")]
Timeout = Annotated[int, Field(description="Seconds to wait for the worker to finish, 1-3600")]
WorkDir = Annotated[str | None, Field(description="Absolute directory the worker starts in (default: cao's)")]
Model = Annotated[str | None, Field(description="Model for the worker's CLI (default: the profile's)")]
TerminalId = Annotated[str, Field(description="Terminal id: 8 lowercase hex characters")]

HANDOFF_DOC = """Hand a task to a new agent and wait for its answer.

Starts a worker from `agent_profile` in your session, gives it `message`, waits
until it finishes (at most `timeout` seconds, 1-3600), returns its reply in
`output`, and removes the worker. Use it when you need the result before going on."""

ASSIGN_DOC = """Start a new agent on a task without waiting for it.

Returns the worker's terminal_id at once; the task is delivered when the worker is
ready, and the worker sends its results to your inbox with send_message. Call
delete_terminal on the worker when you no longer need it."""

SEND_MESSAGE_DOC = """Send a message to another agent's inbox.

Without `receiver_id` the message goes to the terminal that assigned you your task.
It is delivered when the receiver is idle, in order, exactly once."""

ANSWER_DOC = """Answer a question an agent is waiting on (its status is waiting_user_answer)."""

DELETE_DOC = """Remove a terminal (its agent and its window) that is no longer needed."""


def build_server(config: ToolConfig | None = None) -> MCPServer:
    tools = OrchestratorTools(config or ToolConfig.from_env())
    server: MCPServer = MCPServer(SERVER_NAME, instructions="Tools to delegate work to other cao agents.")

    if tools.config.working_directory_param:
        async def handoff(agent_profile: Profile, message: Task, timeout: Timeout = 600,
                          working_directory: WorkDir = None, model: Model = None) -> dict[str, Any]:
            return await tools.handoff(agent_profile, message, timeout, working_directory, model)

        async def assign(agent_profile: Profile, message: Task, working_directory: WorkDir = None,
                         model: Model = None) -> dict[str, Any]:
            return await tools.assign(agent_profile, message, working_directory, model)
    else:
        async def handoff(agent_profile: Profile, message: Task, timeout: Timeout = 600,  # type: ignore[misc]
                          model: Model = None) -> dict[str, Any]:
            return await tools.handoff(agent_profile, message, timeout, None, model)

        async def assign(agent_profile: Profile, message: Task,  # type: ignore[misc]
                         model: Model = None) -> dict[str, Any]:
            return await tools.assign(agent_profile, message, None, model)

    async def send_message(
            message: Annotated[str, Field(description="The message text")],
            receiver_id: Annotated[str | None, Field(description="Receiving terminal id (default: your caller)")]
            = None) -> dict[str, Any]:
        return await tools.send_message(message, receiver_id)

    async def answer_user_prompt(
            terminal_id: TerminalId,
            answer: Annotated[str, Field(description="The answer to type, at most 4000 characters")]) -> dict[str, Any]:
        return await tools.answer_user_prompt(terminal_id, answer)

    async def delete_terminal(terminal_id: TerminalId) -> dict[str, Any]:
        return await tools.delete_terminal(terminal_id)

    server.add_tool(handoff, description=HANDOFF_DOC)
    server.add_tool(assign, description=ASSIGN_DOC)
    server.add_tool(send_message, description=SEND_MESSAGE_DOC)
    server.add_tool(answer_user_prompt, description=ANSWER_DOC)
    server.add_tool(delete_terminal, description=DELETE_DOC)
    return server


def main() -> None:
    """Run on stdio (also what `cao mcp-server` calls)."""
    # stderr is the host CLI's log; a line per HTTP request would drown real problems.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    build_server().run("stdio")


if __name__ == "__main__":
    main()
