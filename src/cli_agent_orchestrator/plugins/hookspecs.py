"""The hooks a cao plugin may implement, declared once.

Every event hook is called with keyword arguments, always including `event`: a JSON-ready
dict `{"id", "seq", "type", "hook", "topic", "at", "actor", "data"}` (see docs/plugins.md).
An implementation takes any subset of the arguments and may be `async def`. Plugins
observe: what a hook returns is ignored (but `cao_stats`), what it raises is counted in GET
/diagnostics, and neither reaches the agents or the other plugins. Each event also reaches
`post_event`; one a plugin will never get there reaches its `cao_missed_events`.
"""

from __future__ import annotations

from typing import Any

import pluggy

PROJECT = "cao"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

Event = dict[str, Any]


class CaoHooks:
    @hookspec
    def post_create_session(self, event: Event, session_name: str, terminal_id: str) -> None:
        """A new session was created with its first terminal (`session.created`)."""

    @hookspec
    def post_kill_session(self, event: Event, session_name: str) -> None:
        """A session was deleted, after its terminals (`session.killed`)."""

    @hookspec
    def post_create_terminal(self, event: Event, terminal_id: str, session_name: str, caller_id: str | None) -> None:
        """An agent terminal was spawned; `caller_id` is the terminal that created it, if any
        (`terminal.spawned`)."""

    @hookspec
    def post_kill_terminal(self, event: Event, terminal_id: str, reason: str) -> None:
        """A terminal is no longer cao's: deleted, or gone with its window or tmux server
        (`terminal.removed`)."""

    @hookspec
    def post_status_change(self, event: Event, terminal_id: str, status: str, previous: str) -> None:
        """A terminal's status changed (`terminal.status`)."""

    @hookspec
    def post_send_message(self, event: Event, message_id: int, sender_id: str, receiver_id: str, message: str) -> None:
        """A message was stored in a terminal's inbox, before delivery (`inbox.queued`);
        `message` is its text, given to this hook alone (not in `event["data"]`, so neither
        `post_event` nor the audit log or webhook sees it). An implementation that does not
        name `message` is called as before."""

    @hookspec
    def post_inbox_delivery(
        self, event: Event, message_id: int, sender_id: str, receiver_id: str, delivered: bool
    ) -> None:
        """An inbox message reached its receiver (`inbox.delivered`, `delivered` true) or
        will not (`inbox.failed`)."""

    @hookspec
    def post_handoff(self, event: Event, phase: str, agent: str, caller_id: str | None) -> None:
        """An agent step (MCP handoff, run-step, a workflow step) `phase` "started" or
        "finished" (`handoff.started`, `handoff.finished`), or "orphaned" (`handoff.orphaned`):
        a restart tore down the worker of a handoff whose caller could no longer get its answer."""

    @hookspec
    def post_assign(self, event: Event, phase: str, terminal_id: str, caller_id: str | None) -> None:
        """An assigned worker's task: "started" (waiting for the worker to be ready) or
        "finished" (typed in, or the worker could not start) (`assign.*`)."""

    @hookspec
    def post_workflow_run(self, event: Event, run_id: str) -> None:
        """A workflow run started, resumed, completed, failed, was cancelled or interrupted
        (`workflow.run.*`)."""

    @hookspec
    def post_workflow_step(self, event: Event, run_id: str, step_id: str) -> None:
        """A fact of one workflow step: started, attempt, terminal created, completed,
        failed, replayed, skipped, halted, diverged, output received (`workflow.step.*`,
        `workflow.terminal.created`)."""

    @hookspec
    def post_flow_run(self, event: Event, flow_name: str, run_id: int, phase: str) -> None:
        """A scheduled flow's run "started" (`flow.run.started`) or "finished" with its final
        state in `event["data"]["state"]` (`flow.run.finished`)."""

    @hookspec
    def post_memory_stored(self, event: Event, key: str, scope: str, memory_type: str, created: bool) -> None:
        """A memory was created (`created`) or got a new dated entry (`memory.stored`); who wrote
        it is `event["data"]["terminal_id"]` (null: the user). The text is not passed: read it
        with `cao memory show`."""

    @hookspec
    def post_memory_forgotten(self, event: Event, key: str, scope: str) -> None:
        """A memory was deleted (`memory.forgotten`)."""

    @hookspec
    def post_event(self, event: Event) -> None:
        """Every event above, after its own hook: for plugins that treat all alike (the
        webhook, the audit log)."""

    @hookspec
    def cao_missed_events(self, events: list[Event], reason: str) -> None:
        """Events this plugin will never get through the hooks above, oldest first: its queue
        was full (`reason` "queue full"), or cao-server stopped before it handled them
        ("stopped": still queued, or in flight and cancelled; a plain hook's thread may still
        be running that one). Record them somewhere durable, quickly: at shutdown this call
        has a second (the webhook dead-letters them)."""

    @hookspec
    def cao_stats(self) -> dict[str, Any] | None:
        """This plugin's own counts, shown in its entry in GET /diagnostics (the dispatcher's
        keys win). Called on the server's loop on every request: answer at once, no I/O;
        an `async def` implementation is not called."""

    @hookspec
    def cao_shutdown(self) -> None:
        """cao-server is stopping; this plugin's queue drained or what was left went to
        `cao_missed_events`: close what it opened."""
