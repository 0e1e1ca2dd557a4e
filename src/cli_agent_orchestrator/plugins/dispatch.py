"""One bus consumer feeds every plugin. Each event plugins see becomes a JSON-ready dict and
a hook call, queued per plugin; each plugin drains its own queue in its own task (plain
hooks in its own thread, `async def` hooks on the loop), so a slow or failing plugin delays
neither the agents nor the other plugins. No event goes unaccounted for: per plugin, events =
handled + in flight + queued + dropped + left at stop (GET /diagnostics), and each one it will
never handle (dropped, or left at stop) is handed to its `cao_missed_events` and logged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
import queue
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..actor import UNKNOWN_ACTOR, current_actor
from ..events import (
    AssignFinished,
    AssignStarted,
    Event,
    FlowRunFinished,
    FlowRunStarted,
    HandoffFinished,
    HandoffOrphaned,
    HandoffStarted,
    InboxDelivered,
    InboxFailed,
    InboxQueued,
    MemoryForgotten,
    MemoryStored,
    SessionCreated,
    SessionKilled,
    StatusChanged,
    TerminalRemoved,
    TerminalSpawned,
    WorkflowEvent,
)
from ..events.base import public_fields
from .manager import Plugins

log = logging.getLogger(__name__)

MAX_PLUGIN_QUEUE = 10_000  # events one plugin may lag behind; more are dropped, counted, reported
# Shutdown stays within a few seconds whatever a plugin does (an endpoint that never answers):
DRAIN_ON_STOP_S = 2.0  # how long each plugin may take to finish its queue
CLOSE_ON_STOP_S = 1.0  # then for cao_missed_events with what is left, then for cao_shutdown
MISSED_QUEUE_FULL = "queue full"  # `reason` of cao_missed_events
MISSED_AT_STOP = "stopped"
SCHEDULER_ACTOR = "scheduler"  # what a flow run that no request started is credited to
LOG_EVERY_NTH_FAILURE = 100  # a plugin failing on every event is logged once in so many

# (hook, event type, the hook's own arguments besides `event`)
Described = tuple[str, str, dict[str, Any]]


def describe(event: Event) -> Described | None:
    """The hook and the event type plugins see for a bus event; None: not for plugins."""
    match event:
        case SessionCreated():
            return "post_create_session", "session.created", _args(event, "session_name", "terminal_id")
        case SessionKilled():
            return "post_kill_session", "session.killed", _args(event, "session_name")
        case TerminalSpawned():
            return "post_create_terminal", "terminal.spawned", _args(event, "terminal_id", "session_name", "caller_id")
        case TerminalRemoved():
            return "post_kill_terminal", "terminal.removed", _args(event, "terminal_id", "reason")
        case StatusChanged():
            args: dict[str, Any] = {
                "terminal_id": event.terminal_id,
                "status": str(event.status),
                "previous": str(event.previous),
            }
            return "post_status_change", "terminal.status", args
        case InboxQueued():
            # `message`: the text, as a hook argument only (a plugin that names it gets it).
            return (
                "post_send_message",
                "inbox.queued",
                _args(event, "message_id", "sender_id", "receiver_id", "message"),
            )
        case InboxDelivered() | InboxFailed():
            args = {
                **_args(event, "message_id", "sender_id", "receiver_id"),
                "delivered": isinstance(event, InboxDelivered),
            }
            return "post_inbox_delivery", "inbox.delivered" if args["delivered"] else "inbox.failed", args
        case HandoffStarted() | HandoffFinished():
            phase = "started" if isinstance(event, HandoffStarted) else "finished"
            return "post_handoff", f"handoff.{phase}", {"phase": phase, **_args(event, "agent", "caller_id")}
        case HandoffOrphaned():  # a restart tore its worker down (services/handoffs.py)
            return "post_handoff", "handoff.orphaned", {"phase": "orphaned", **_args(event, "agent", "caller_id")}
        case AssignStarted() | AssignFinished():
            phase = "started" if isinstance(event, AssignStarted) else "finished"
            return "post_assign", f"assign.{phase}", {"phase": phase, **_args(event, "terminal_id", "caller_id")}
        case FlowRunStarted() | FlowRunFinished():
            phase = "started" if isinstance(event, FlowRunStarted) else "finished"
            return "post_flow_run", f"flow.run.{phase}", {"phase": phase, **_args(event, "flow_name", "run_id")}
        case MemoryStored():
            return "post_memory_stored", "memory.stored", _args(event, "key", "scope", "memory_type", "created")
        case MemoryForgotten():
            return "post_memory_forgotten", "memory.forgotten", _args(event, "key", "scope")
        case WorkflowEvent():
            kind = f"workflow.{event.journal_type}"
            if event.journal_type.startswith("run."):
                return "post_workflow_run", kind, {"run_id": event.run_id}
            return "post_workflow_step", kind, {"run_id": event.run_id, "step_id": event.step_id or ""}
    return None


def _args(event: Event, *names: str) -> dict[str, Any]:
    return {name: getattr(event, name) for name in names}


def actor_of(event: Event, noted: str | None) -> str:
    """Who caused it: an agent for its own status; the calling terminal of a worker, handoff
    or assign; a message's sender; else whoever published it (an API client, or the caller
    of the step it happened in); else the scheduler for a flow's run; else "api"."""
    if isinstance(event, StatusChanged):
        return event.terminal_id
    for name in ("caller_id", "sender_id"):
        value = getattr(event, name, None)
        if value:
            return str(value)
    if noted:
        return noted
    return SCHEDULER_ACTOR if isinstance(event, FlowRunStarted | FlowRunFinished) else UNKNOWN_ACTOR


def _jsonable(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return str(value)


class PluginThread:
    """A plugin's own daemon thread for its plain (not `async def`) hooks: a hook that blocks
    holds only this thread; it never stalls the loop, the other plugins, or the server's exit."""

    def __init__(self, name: str):
        self.name = name
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    async def call(self, function: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name=f"plugin:{self.name}", daemon=True)
            self._thread.start()
        loop = asyncio.get_running_loop()
        answer: asyncio.Future = loop.create_future()
        self._calls.put((function, kwargs, loop, answer))
        return await answer

    def close(self) -> None:
        if self._thread is not None:
            self._calls.put(None)

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            function, kwargs, loop, answer = call
            try:
                result, error = function(**kwargs), None
            except BaseException as exc:  # handed to the plugin's task, which counts it
                result, error = None, exc
            try:
                loop.call_soon_threadsafe(_settle, answer, result, error)
            except RuntimeError:  # the loop is closed: cao-server is exiting
                return


def _settle(answer: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if answer.cancelled():
        return
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(result)


@dataclass
class _HookImpl:
    function: Callable[..., Any]
    argnames: tuple[str, ...]
    is_async: bool


@dataclass
class PluginWorker:
    """One plugin's queue, task and counts; every event it was given is in exactly one of
    handled, in flight, queued, dropped, left at stop."""

    name: str
    source: str
    plugin: object
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(MAX_PLUGIN_QUEUE))
    task: asyncio.Task | None = None
    state: str = "running"  # then "stopping", "stopped"
    events: int = 0
    handled: int = 0  # its hooks were called (whether they raised or not)
    in_flight: str | None = None  # the event its hooks are being called with
    failures: int = 0
    dropped: int = 0  # its queue was full
    left_at_stop: int = 0  # still queued, or in flight and cancelled, when cao-server stopped
    last_failure: str | None = None
    overflow: list[str] = field(default_factory=list)  # dropped, not yet given to cao_missed_events
    reporter: asyncio.Task | None = None  # gives them
    impls: dict[str, list[_HookImpl]] = field(default_factory=dict)
    thread: PluginThread = field(init=False)

    def __post_init__(self) -> None:
        self.thread = PluginThread(self.name)

    def stats(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "state": self.state,
            "events": self.events,
            "handled": self.handled,
            "in_flight": int(self.in_flight is not None),
            "queued": self.queue.qsize(),
            "dropped": self.dropped,
            "left_at_stop": self.left_at_stop,
            "failures": self.failures,
            "last_failure": self.last_failure,
        }


class PluginDispatcher:
    def __init__(self, plugins: Plugins):
        self.plugins = plugins
        self.workers = [PluginWorker(load.name, load.source, load.plugin) for load in plugins.running]
        self._boot = uuid.uuid4().hex[:8]  # event ids stay unique across restarts
        self._seq = 0
        self._actors: dict[int, str] = {}  # id(event) → actor noted at publish, until handled

    # --- on the bus -------------------------------------------------------------------
    def note_publish(self, event: Event) -> None:
        """Publish observer: remember the actor in the publisher's context (request, step)."""
        if self.workers and event.lossless:
            actor = current_actor()
            if actor is not None:
                self._actors[id(event)] = actor

    def handle(self, event: Event) -> None:
        """The bus consumer: describe the event once, queue it for every plugin."""
        noted = self._actors.pop(id(event), None)
        if not self.workers:
            return
        described = describe(event)
        if described is None:
            return
        hook, kind, args = described
        self._seq += 1
        doc = {
            "id": f"{self._boot}-{self._seq}",
            "seq": self._seq,
            "type": kind,
            "hook": hook,
            "topic": event.topic,
            "at": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "actor": actor_of(event, noted),
            "data": public_fields(event),
        }
        payload = json.dumps(doc, default=_jsonable)
        for worker in self.workers:
            worker.events += 1
            try:
                worker.queue.put_nowait((hook, payload, args))
            except asyncio.QueueFull:
                self._drop(worker, payload)

    def _drop(self, worker: PluginWorker, payload: str) -> None:
        worker.dropped += 1
        if worker.dropped == 1 or worker.dropped % 1000 == 0:
            log.warning("plugin %s is %d events behind: dropped %d", worker.name, MAX_PLUGIN_QUEUE, worker.dropped)
        if not self._impls(worker, "cao_missed_events"):
            return
        # Told in its own task, in batches: the plugin's queue task is the one that is behind.
        worker.overflow.append(payload)
        if worker.reporter is None or worker.reporter.done():
            worker.reporter = asyncio.get_running_loop().create_task(
                self._report_overflow(worker), name=f"plugin:{worker.name}:missed"
            )

    async def _report_overflow(self, worker: PluginWorker) -> None:
        while worker.overflow:
            batch, worker.overflow = worker.overflow, []
            await self._report_missed(worker, batch, MISSED_QUEUE_FULL)

    async def _report_missed(self, worker: PluginWorker, payloads: list[str], reason: str) -> None:
        await self._call(worker, "cao_missed_events", {"events": [json.loads(p) for p in payloads], "reason": reason})

    # --- each plugin's task ---------------------------------------------------------------
    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for worker in self.workers:
            worker.task = loop.create_task(self._drain(worker), name=f"plugin:{worker.name}")

    async def stop(self) -> None:
        """Let each plugin finish its queue (bounded), hand it what is left, tell it to close."""
        running = [w for w in self.workers if w.task is not None]
        await asyncio.gather(*(self._finish(w) for w in running))

    async def _finish(self, worker: PluginWorker) -> None:
        worker.state = "stopping"
        try:
            await asyncio.wait_for(worker.queue.join(), DRAIN_ON_STOP_S)
        except TimeoutError:
            pass
        assert worker.task is not None
        worker.task.cancel()  # a hook still awaiting (a POST that never gets an answer) is cut
        if worker.reporter is not None:
            worker.reporter.cancel()  # what it had not taken yet is still in `overflow`
        await asyncio.gather(worker.task, *filter(None, [worker.reporter]), return_exceptions=True)
        in_flight = [worker.in_flight] if worker.in_flight is not None else []
        worker.in_flight = None
        queued = [worker.queue.get_nowait()[1] for _ in range(worker.queue.qsize())]
        left = in_flight + queued
        worker.left_at_stop = len(left)
        if left:
            log.warning(
                "plugin %s: %d events not handled at shutdown (%d in flight, %d queued); %s",
                worker.name,
                len(left),
                len(in_flight),
                len(queued),
                "handed to its cao_missed_events" if self._impls(worker, "cao_missed_events") else "it never sees them",
            )
        await self._bounded(worker, "cao_missed_events", self._report_left(worker, left))
        await self._bounded(worker, "cao_shutdown", self._call(worker, "cao_shutdown", {}))
        worker.thread.close()
        worker.state = "stopped"

    async def _report_left(self, worker: PluginWorker, left: list[str]) -> None:
        if worker.overflow:
            batch, worker.overflow = worker.overflow, []
            await self._report_missed(worker, batch, MISSED_QUEUE_FULL)
        if left:
            await self._report_missed(worker, left, MISSED_AT_STOP)

    async def _bounded(self, worker: PluginWorker, hook: str, call: Any) -> None:
        try:
            await asyncio.wait_for(call, CLOSE_ON_STOP_S)
        except TimeoutError:
            log.warning("plugin %s: %s did not return within %ss", worker.name, hook, CLOSE_ON_STOP_S)

    async def _drain(self, worker: PluginWorker) -> None:
        while True:
            hook, payload, args = await worker.queue.get()
            worker.in_flight = payload  # until handled; if cancelled first, it is left at stop
            try:
                # Each call gets its own copy of the event: a plugin cannot alter what others see.
                await self._call(worker, hook, {"event": json.loads(payload), **args})
                await self._call(worker, "post_event", {"event": json.loads(payload)})
                worker.handled += 1
                worker.in_flight = None
            finally:
                worker.queue.task_done()

    async def _call(self, worker: PluginWorker, hook: str, args: dict[str, Any]) -> None:
        for impl in self._impls(worker, hook):
            wanted = {name: args[name] for name in impl.argnames}
            try:
                if impl.is_async:
                    await impl.function(**wanted)
                else:
                    result = await worker.thread.call(impl.function, wanted)
                    if asyncio.iscoroutine(result):
                        await result
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # counted and shown; never reaches the agents or other plugins
                worker.failures += 1
                worker.last_failure = f"{hook}: {type(exc).__name__}: {exc}"
                if worker.failures == 1 or worker.failures % LOG_EVERY_NTH_FAILURE == 0:
                    log.warning(
                        "plugin %s failed on %s (%d failures so far)", worker.name, hook, worker.failures, exc_info=exc
                    )

    def _impls(self, worker: PluginWorker, hook: str) -> list[_HookImpl]:
        if hook not in worker.impls:
            caller = getattr(self.plugins.pm.hook, hook)
            worker.impls[hook] = [
                _HookImpl(impl.function, tuple(impl.argnames), inspect.iscoroutinefunction(impl.function))
                for impl in caller.get_hookimpls()
                if impl.plugin is worker.plugin
            ]
        return worker.impls[hook]

    # --- GET /diagnostics ---------------------------------------------------------------------
    def _own_stats(self, worker: PluginWorker) -> dict[str, Any]:
        """What the plugin's `cao_stats` says (a plain function, answered on the loop)."""
        own: dict[str, Any] = {}
        for impl in self._impls(worker, "cao_stats"):
            if impl.is_async:
                continue
            try:
                own |= dict(impl.function() or {})
            except Exception as exc:  # shown, never a failed /diagnostics
                own["stats_error"] = f"{type(exc).__name__}: {exc}"
        return own

    def stats(self) -> list[dict[str, Any]]:
        """Every enabled plugin: running with its counts, or not running and why."""
        shown = [self._own_stats(w) | w.stats() for w in self.workers]
        shown += [
            {"name": load.name, "source": load.source, "state": load.state, "error": load.error}
            for load in self.plugins.loads
            if load.plugin is None
        ]
        shown += [
            {"name": None, "source": "settings", "state": "settings error", "error": p} for p in self.plugins.problems
        ]
        return shown
