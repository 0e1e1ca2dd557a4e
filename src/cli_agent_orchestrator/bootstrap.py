"""The composition root: builds the store, the terminal backend, the bus and the
services, and wires the consumers. Nothing in cao does I/O at import time; all of
it starts here.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from .backends.base import TerminalBackend
from .backends.tmux import TmuxBackend
from .bus import EventBus
from .events import Event
from .services.inbox import InboxService
from .services.input import InputService
from .services.logs import LogWriter
from .services.orchestration import OrchestrationService
from .services.sessions import SessionService
from .services.status import StatusMonitor
from .services.terminals import TerminalService
from .services.workflow_state import RunRegistry, Timeline
from .services.workflow_steps import StepGate
from .services.workflow_yaml import YamlDriver
from .services.workflows import WorkflowService
from .settings import Settings
from .store import Store

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: Settings
    store: Store
    bus: EventBus
    backend: TerminalBackend
    monitor: StatusMonitor
    logs: LogWriter
    typing: InputService
    terminals: TerminalService
    sessions: SessionService
    inbox: InboxService
    orchestration: OrchestrationService
    step_gate: StepGate
    workflows: WorkflowService

    async def start(self) -> None:
        wire_consumers(self)
        self.bus.start()
        await self.backend.start()
        result = await self.terminals.adopt_all()
        if result["adopted"] or result["gone"]:
            log.info("restart: re-adopted %d terminal(s), %d gone", len(result["adopted"]), len(result["gone"]))
        await self.inbox.recover()
        self.inbox.start_sweeper()
        await self.workflows.recover()

    async def stop(self) -> None:
        await self.workflows.shutdown()
        await self.inbox.stop()
        await self.logs.flush()
        await self.backend.stop()
        await self.bus.stop()
        await self.monitor.stop()
        self.store.close()


# Who listens to what: the one table of consumers (seed 003's pipeline).
# (name, topic pattern, handler, on_drop)
def consumer_table(rt: Runtime) -> list[tuple[str, str, Callable, Callable[[Event], None] | None]]:
    return [
        ("status-monitor", "terminal.#", rt.monitor.handle, rt.monitor.on_dropped),
        ("log-writer", "terminal.*.output", rt.logs.on_output, None),
        ("inbox.status", "terminal.*.status", rt.inbox.on_status, None),
        ("inbox.removed", "terminal.*.removed", rt.inbox.on_removed, None),
        ("terminals.backend-lost", "backend.*.lost", rt.terminals.on_backend_lost, None),
    ]


def wire_consumers(rt: Runtime) -> None:
    for name, pattern, handler, on_drop in consumer_table(rt):
        rt.bus.subscribe(name, pattern, handler, on_drop=on_drop)


def build_runtime(settings: Settings | None = None) -> Runtime:
    settings = settings or Settings.from_env()
    settings.ensure_dirs()
    store = Store(settings.db_path, busy_limit_s=settings.db_busy_timeout)
    bus = EventBus(settings.event_queue_size)
    backend = TmuxBackend(settings.tmux_socket_name, bus, settings.output_source, settings.fifo_dir)
    monitor = StatusMonitor(bus, store, backend.request_snapshot)
    logs = LogWriter(settings.terminal_logs_dir)
    typing = InputService(backend, bus, monitor)
    terminals = TerminalService(settings, store, bus, backend, monitor, typing)
    sessions = SessionService(backend, terminals)
    inbox = InboxService(settings, store, bus, terminals, monitor, typing)
    orchestration = OrchestrationService(bus, monitor, terminals, inbox)
    registry, timeline = RunRegistry(), Timeline(store, bus)
    step_gate = StepGate(store, registry, timeline, orchestration)
    workflows = WorkflowService(settings, store, bus, terminals, registry, timeline,
                                YamlDriver(store, timeline, orchestration))
    return Runtime(settings, store, bus, backend, monitor, logs, typing, terminals, sessions, inbox,
                   orchestration, step_gate, workflows)
