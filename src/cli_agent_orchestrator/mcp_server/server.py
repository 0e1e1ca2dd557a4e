"""cao's agent tools as an MCP server: the tool signatures agents see, registered once and served
by cao-server itself at /mcp (endpoint.py); `cao-mcp-server` relays stdio to it (relay.py).

The tool signatures are the contract agents see. `working_directory` is offered
only when CAO_ENABLE_WORKING_DIRECTORY is on, so a model is never tempted to pass
a parameter the deployment does not want; that means two function shapes, chosen
when the server is built. Each call asks `tools_for()` for the caller's tools: the endpoint
hands out tools bound to the terminal whose credential the request carries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from .discovery_tools import DiscoveryTools
from .memory_tools import MemoryTools, add_memory_tools
from .skill_tools import SkillTools, add_skill_tools
from .tools import OrchestratorTools
from .workflow_tools import WorkflowTools

SERVER_NAME = "cao-mcp-server"

# Parameter descriptions end up in the tool schemas the calling model reads.
Profile = Annotated[str, Field(description="Agent profile name of the worker, e.g. developer or reviewer")]
Task = Annotated[str, Field(description="The task for the worker, self-contained")]
Timeout = Annotated[int, Field(description="Seconds to wait for the worker to finish, 1-3600")]
WorkDir = Annotated[str | None, Field(description="Absolute directory the worker starts in (default: cao's)")]
Model = Annotated[str | None, Field(description="Model for the worker's CLI (default: the profile's)")]
TerminalId = Annotated[str, Field(description="Terminal id: 8 lowercase hex characters")]
Engine = Annotated[str | None, Field(description="Kiro CLI's agent engine, v2 (kas is refused); ignored by other CLIs")]
Host = Annotated[
    str | None,
    Field(description="Run the worker on this registered host (`cao host list`); default: the placement policy"),
]
Wait = Annotated[
    int | None,
    Field(
        description="Seconds this call waits for the worker before it answers {status: 'pending', job_id} "
        "while the work goes on (default: cao-server's CAO_HANDOFF_WAIT_SECONDS, 600; at most `timeout`)"
    ),
]
JobId = Annotated[str, Field(description="A handoff job's id (12 lowercase hex), from a `pending` handoff")]
Description = Annotated[
    str | None,
    Field(description="What the worker is for, at most 1024 characters; its siblings see it (list_siblings)"),
]
UseWorktree = Annotated[
    bool,
    Field(
        description="Give the worker its own git worktree on a new branch of your repository; "
        "the result names the branch"
    ),
]

HANDOFF_DOC = """Hand a task to a new agent and wait for its answer.

Starts a worker from `agent_profile` in your session, gives it `message`, waits
until it finishes (at most `timeout` seconds, 1-3600), returns its reply in
`output`, and removes the worker. Use it when you need the result before going on.
A handoff runs as a job of cao-server: if it is still at work after `wait` seconds (default
600), the call answers `{status: "pending", job_id}` and the work goes on; then call
get_handoff_result(job_id) for its reply."""

ASSIGN_DOC = """Start a new agent on a task without waiting for it.

Returns the worker's terminal_id at once; the task is delivered when the worker is
ready, and the worker sends its results to your inbox with send_message. Call
delete_terminal on the worker when you no longer need it."""

SEND_MESSAGE_DOC = """Send a message to another agent's inbox.

Without `receiver_id` the message goes to the terminal that assigned you your task.
It is delivered when the receiver is idle, in order, exactly once."""

ANSWER_DOC = """Answer a question an agent is waiting on (its status is waiting_user_answer)."""

DELETE_DOC = """Remove a terminal (its agent and its window) that is no longer needed."""

GET_HANDOFF_RESULT_DOC = """The result of a handoff that answered `pending` (its `job_id`): waits up to `wait`
seconds for it. Returns `{success, status, job_id, output, terminal_id, message}`: `completed`
with the worker's reply (given once: a later call says `delivered`), `pending` while it still
works (call again), or why it ended without a reply. Only the handoff's caller may read it."""

CANCEL_HANDOFF_DOC = """Stop a handoff that answered `pending`: its worker is removed."""

LIST_SIBLINGS_DOC = """List the other agents you work beside: their terminal id, profile, provider, status,
description, group and metadata.

With a group (yours is in the answer): the agents whose group starts with the first
`depth` elements of yours, in your session (any session with cross_session). Without a
group: every other agent of your session. Needs the `discovery` tool marker."""

UPDATE_METADATA_DOC = """Replace your own terminal's metadata with `metadata` (a JSON object of at most
16 KiB; null or {} clears it): the last write wins, nothing is merged. Your siblings see it
in list_siblings. Needs the `discovery` tool marker."""


def add_discovery_tools(server: MCPServer, discovery_for: Callable[[], DiscoveryTools]) -> None:
    """Register list_siblings and update_metadata; `discovery_for()` gives the caller's at each call."""

    async def list_siblings(
        depth: Annotated[int, Field(description="How many leading elements of your group to match, 1-16")] = 1,
        cross_session: Annotated[bool, Field(description="Look in every session, not only yours")] = False,
    ) -> dict[str, Any]:
        return await discovery_for().list_siblings(depth, cross_session)

    async def update_metadata(
        metadata: Annotated[dict[str, Any] | None, Field(description="Your new metadata, a JSON object")],
    ) -> dict[str, Any]:
        return await discovery_for().update_metadata(metadata)

    server.add_tool(list_siblings, description=LIST_SIBLINGS_DOC)
    server.add_tool(update_metadata, description=UPDATE_METADATA_DOC)


# --- workflow tools: every one answers {"ok": true, ...} or {"ok": false, "error": "..."} ---
RunId = Annotated[str, Field(description="Workflow run id: 1-64 of [A-Za-z0-9_-], e.g. run-3f2a9c1d0b4e5f67")]
NameOrPath = Annotated[
    str,
    Field(
        description="Workflow name (a .py script or .yaml spec in cao's workflow "
        "directory, by stem) or a path to one inside that directory"
    ),
]
Inputs = Annotated[dict[str, Any] | None, Field(description="Values for the workflow's declared inputs")]
NewRunId = Annotated[
    str | None, Field(description="Id for the new run (default: cao mints one); 1-64 of [A-Za-z0-9_-], must be unused")
]

WORKFLOW_RUN_DOC = """Run a workflow and wait until it ends (up to about 2.5 hours).

Returns run_id, state (completed | failed | cancelled), kind (null when completed;
error, timeout, halted, diverged, cancelled otherwise), steps, the run's output,
halts (steps waiting for a human decision; see workflow_resume) and warnings. For a
long workflow prefer workflow_start, then workflow_wait."""

WORKFLOW_START_DOC = """Start a workflow run without waiting; returns run_id, state "running" and status_url.

Follow it with workflow_status, workflow_wait or workflow_events."""

WORKFLOW_STATUS_DOC = """Snapshot of a workflow run: state, kind, current_step_id, halts and its steps."""

WORKFLOW_WAIT_DOC = """Wait until a workflow run ends (at most `timeout` seconds), then return its result.

Returns state, kind, steps, output and halts, a failure_envelope for a failed or
cancelled run, and timed_out: true if the run was still running when `timeout` passed."""

WORKFLOW_RESULT_DOC = """The full result of a workflow run: state, kind, inputs, steps, output, halts, warnings,
and a failure_envelope (failing step, error kind, next command) for a failed or cancelled run."""

WORKFLOW_LIST_DOC = """List workflow runs, newest first (runs, not workflow definitions)."""

WORKFLOW_EVENTS_DOC = """Read a workflow run's event timeline after sequence number `after_seq`.

Follows the live stream until `max_events` events (at most 500), 45 seconds, or the
run's end, whichever comes first; timed_out tells which. Pass next_after_seq back as
after_seq to read on. An unknown run gives events_unavailable: true."""

WORKFLOW_RESUME_DOC = """Resume a failed, halted or cancelled workflow run and wait until the new drive ends.

The script re-runs from the top: finished steps replay their stored results and
halted steps stop again unless `decisions` names them. A decision is "rerun" (run the
step once more) or "skip" (accept its stored result); decisions last for this resume
only. Returns state, kind, steps, output and halts, like workflow_run."""

WORKFLOW_CANCEL_DOC = """Cancel a running workflow run: its script is stopped and its running step agents removed."""

WORKFLOW_RETURN_DOC = """Return your structured result for the workflow step you are running.

Only works inside a workflow step (cao sets CAO_WORKFLOW_RUN_ID and
CAO_WORKFLOW_STEP_ID for the step's agent). Call it once your work is done with the
result as a JSON object; calling again replaces it. With `output_schema`, keys the
schema lists as `required` are checked: validated is false and errors names the
missing ones (the output is still recorded, so call again with the fixed object)."""


def add_workflow_tools(server: MCPServer, wf_for: Callable[[], WorkflowTools], *, step_tools: bool = True) -> None:
    """Register the workflow tools; `step_tools=False` leaves out workflow_return, which only a
    workflow step's own agent can use (the ops server's callers are outside cao). `wf_for()`
    gives the caller's workflow tools at each call."""

    async def workflow_run(name_or_path: NameOrPath, inputs: Inputs = None, run_id: NewRunId = None) -> dict[str, Any]:
        return await wf_for().run(name_or_path, inputs, run_id)

    async def workflow_start(
        name_or_path: NameOrPath, inputs: Inputs = None, run_id: NewRunId = None
    ) -> dict[str, Any]:
        return await wf_for().start(name_or_path, inputs, run_id)

    async def workflow_status(run_id: RunId) -> dict[str, Any]:
        return await wf_for().status(run_id)

    async def workflow_wait(
        run_id: RunId, timeout: Annotated[int, Field(description="Most seconds to wait, 0-8820")] = 8820
    ) -> dict[str, Any]:
        return await wf_for().wait(run_id, timeout)

    async def workflow_result(run_id: RunId) -> dict[str, Any]:
        return await wf_for().result(run_id)

    async def workflow_list(
        state: Annotated[
            str | None, Field(description="Only runs in this state: running, completed, failed or cancelled")
        ] = None,
        limit: Annotated[int, Field(description="At most this many runs, 1-500")] = 50,
    ) -> dict[str, Any]:
        return await wf_for().list_runs(state, limit)

    async def workflow_events(
        run_id: RunId,
        after_seq: Annotated[int, Field(description="Only events after this sequence number")] = 0,
        max_events: Annotated[int, Field(description="Most events to return, 1-500")] = 500,
    ) -> dict[str, Any]:
        return await wf_for().events(run_id, after_seq, max_events)

    async def workflow_resume(
        run_id: RunId,
        decisions: Annotated[
            dict[str, str] | None,
            Field(description='For halted steps: step id -> "rerun" or "skip", e.g. {"call-1": "skip"}'),
        ] = None,
    ) -> dict[str, Any]:
        return await wf_for().resume(run_id, decisions)

    async def workflow_cancel(run_id: RunId) -> dict[str, Any]:
        return await wf_for().cancel(run_id)

    async def workflow_return(
        output: Annotated[dict[str, Any], Field(description="Your step's result, a JSON object")],
        output_schema: Annotated[
            dict[str, Any] | None,
            Field(description="JSON Schema the output should meet; its `required` keys are checked"),
        ] = None,
    ) -> dict[str, Any]:
        return await wf_for().return_output(output, output_schema)

    server.add_tool(workflow_run, description=WORKFLOW_RUN_DOC)
    server.add_tool(workflow_start, description=WORKFLOW_START_DOC)
    server.add_tool(workflow_status, description=WORKFLOW_STATUS_DOC)
    server.add_tool(workflow_wait, description=WORKFLOW_WAIT_DOC)
    server.add_tool(workflow_result, description=WORKFLOW_RESULT_DOC)
    server.add_tool(workflow_list, description=WORKFLOW_LIST_DOC)
    server.add_tool(workflow_events, description=WORKFLOW_EVENTS_DOC)
    server.add_tool(workflow_resume, description=WORKFLOW_RESUME_DOC)
    server.add_tool(workflow_cancel, description=WORKFLOW_CANCEL_DOC)
    if step_tools:
        server.add_tool(workflow_return, description=WORKFLOW_RETURN_DOC)


def build_server(
    tools_for: Callable[[], OrchestratorTools],
    workflows_for: Callable[[], WorkflowTools],
    working_directory_param: bool,
    discovery_for: Callable[[], DiscoveryTools] | None = None,
) -> MCPServer:
    """The agent tools; `tools_for()`, `workflows_for()` and `discovery_for()` give the calling
    agent's at each call (no `discovery_for`: no discovery tools)."""
    server: MCPServer = MCPServer(
        SERVER_NAME, instructions="Tools to delegate work to other cao agents and to run cao workflows."
    )

    if working_directory_param:

        async def handoff(
            agent_profile: Profile,
            message: Task,
            timeout: Timeout = 600,
            working_directory: WorkDir = None,
            model: Model = None,
            engine: Engine = None,
            use_worktree: UseWorktree = False,
            host: Host = None,
            description: Description = None,
            wait: Wait = None,
        ) -> dict[str, Any]:
            return await tools_for().handoff(
                agent_profile, message, timeout, working_directory, model, engine, use_worktree, host, description, wait
            )

        async def assign(
            agent_profile: Profile,
            message: Task,
            working_directory: WorkDir = None,
            model: Model = None,
            engine: Engine = None,
            use_worktree: UseWorktree = False,
            host: Host = None,
            description: Description = None,
        ) -> dict[str, Any]:
            return await tools_for().assign(
                agent_profile, message, working_directory, model, engine, use_worktree, host, description
            )
    else:

        async def handoff(  # type: ignore[misc]  # the other variant: a tool schema of its own
            agent_profile: Profile,
            message: Task,
            timeout: Timeout = 600,
            model: Model = None,
            engine: Engine = None,
            use_worktree: UseWorktree = False,
            host: Host = None,
            description: Description = None,
            wait: Wait = None,
        ) -> dict[str, Any]:
            return await tools_for().handoff(
                agent_profile, message, timeout, None, model, engine, use_worktree, host, description, wait
            )

        async def assign(  # type: ignore[misc]  # the other variant: a tool schema of its own
            agent_profile: Profile,
            message: Task,
            model: Model = None,
            engine: Engine = None,
            use_worktree: UseWorktree = False,
            host: Host = None,
            description: Description = None,
        ) -> dict[str, Any]:
            return await tools_for().assign(
                agent_profile, message, None, model, engine, use_worktree, host, description
            )

    async def send_message(
        message: Annotated[str, Field(description="The message text")],
        receiver_id: Annotated[str | None, Field(description="Receiving terminal id (default: your caller)")] = None,
    ) -> dict[str, Any]:
        return await tools_for().send_message(message, receiver_id)

    async def answer_user_prompt(
        terminal_id: TerminalId,
        answer: Annotated[str, Field(description="The answer to type, at most 4000 characters")],
    ) -> dict[str, Any]:
        return await tools_for().answer_user_prompt(terminal_id, answer)

    async def delete_terminal(terminal_id: TerminalId) -> dict[str, Any]:
        return await tools_for().delete_terminal(terminal_id)

    server.add_tool(handoff, description=HANDOFF_DOC)
    server.add_tool(assign, description=ASSIGN_DOC)
    server.add_tool(send_message, description=SEND_MESSAGE_DOC)
    server.add_tool(answer_user_prompt, description=ANSWER_DOC)
    server.add_tool(delete_terminal, description=DELETE_DOC)

    async def get_handoff_result(
        job_id: JobId,
        wait: Annotated[int, Field(description="Seconds to wait for the result, 0-3600")] = 30,
    ) -> dict[str, Any]:
        return await tools_for().get_handoff_result(job_id, wait)

    async def cancel_handoff(job_id: JobId) -> dict[str, Any]:
        return await tools_for().cancel_handoff(job_id)

    server.add_tool(get_handoff_result, description=GET_HANDOFF_RESULT_DOC)
    server.add_tool(cancel_handoff, description=CANCEL_HANDOFF_DOC)
    add_workflow_tools(server, workflows_for)
    add_memory_tools(server, lambda: MemoryTools((tools := tools_for()).config, tools.api))  # issue 29
    add_skill_tools(server, lambda: SkillTools((tools := tools_for()).config, tools.api))  # issue 29
    if discovery_for is not None:
        add_discovery_tools(server, discovery_for)
    return server


def main() -> None:
    """`cao-mcp-server` (also `cao mcp-server`): stdio relayed to cao-server's /mcp endpoint."""
    from .relay import main as relay

    relay()


if __name__ == "__main__":
    main()
