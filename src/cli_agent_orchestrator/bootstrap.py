"""The composition root: builds the store, the terminal backend, the bus and the
services, and wires the consumers. Nothing in cao does I/O at import time; all of
it starts here.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from .auth_token import read_token
from .backends.base import TerminalBackend
from .backends.placed import PlacedBackend
from .backends.tmux import TmuxBackend
from .bus import EventBus
from .events import Event
from .flows.runner import FlowRunner
from .flows.schedule import server_zone_name
from .flows.service import FlowService
from .memory.service import MemoryService
from .plugins.dispatch import PluginDispatcher
from .plugins.manager import load_plugins
from .services.handoff_results import HandoffResults
from .services.handoffs import HandoffJobs
from .services.hosts.service import HostService
from .services.inbox import InboxService
from .services.input import InputService
from .services.logs import LogWriter
from .services.orchestration import OrchestrationService
from .services.sessions import SessionService
from .services.status.monitor import StatusMonitor
from .services.terminals.cli_hooks import CliHookChannel
from .services.terminals.service import TerminalService
from .services.worker_questions import QuestionWatch
from .settings import Settings
from .store import Store
from .store.flows import FlowTables
from .store.handoffs import HandoffRecord, HandoffTables
from .store.hosts import HostTables
from .store.memories import MemoryTables
from .tasks import TaskGroup
from .workflows.catalog import WorkflowCatalog
from .workflows.drives import RunRegistry
from .workflows.runs import RunLifecycle
from .workflows.script_driver import ScriptDriver
from .workflows.script_steps import ScriptStepGate
from .workflows.service import WorkflowService
from .workflows.specs import SpecDirectory
from .workflows.step_execution import StepExecution
from .workflows.timeline import Timeline
from .workflows.views import RunViews
from .workflows.yaml_driver import YamlDriver

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: Settings
    store: Store
    bus: EventBus
    tasks: TaskGroup
    backend: TerminalBackend
    monitor: StatusMonitor
    logs: LogWriter
    input: InputService  # what types into the agents (paste, keys, a verified submit)
    terminals: TerminalService
    sessions: SessionService
    inbox: InboxService
    orchestration: OrchestrationService
    step_gate: ScriptStepGate
    workflows: WorkflowService
    cli_hooks: CliHookChannel  # the CLIs' command hooks (POST /terminals/{id}/hooks is the other way in)
    plugins: PluginDispatcher  # the enabled plugins, each fed from the bus in its own task
    flows: FlowService  # scheduled flows: their timer starts with the runtime
    hosts: HostService  # the hosts agents may run on, and cao's ssh connections to them
    memory: MemoryService  # memories: store, recall, forget, and a new agent's memory block
    handoff_results: HandoffResults  # durable handoffs: jobs that outlive their caller's call

    async def start(self) -> None:
        wire_consumers(self)
        self.plugins.start()
        self.bus.start()
        await self.cli_hooks.start()  # before adoption: surviving agents' hooks are read from here on
        await self.backend.start()
        result = await self.terminals.adopt_all()
        if result["adopted"] or result["gone"]:
            log.info("restart: re-adopted %d terminal(s), %d gone", len(result["adopted"]), len(result["gone"]))
        # After adoption: a handoff's surviving worker is found, and adopted again as a job.
        await self.orchestration.recover(adopt=self._adopt_handoff)
        await self.inbox.recover()
        self.inbox.start_sweeper()
        await self.workflows.recover()
        await self.flows.start()  # after adoption: a flow's busy check sees its surviving agent

    def _adopt_handoff(self, record: HandoffRecord) -> None:
        self.tasks.spawn(self.handoff_results.adopt(record), f"handoff-adopt:{record.job_id}")

    async def stop(self) -> None:
        await self.flows.stop()
        await self.hosts.stop()
        await self.workflows.shutdown()
        await self.cli_hooks.stop()
        await self.inbox.stop()
        await self.logs.flush()
        await self.backend.stop()
        await self.bus.stop()
        await self.plugins.stop()  # after the bus: what reached a plugin's queue is handled, or handed back
        await self.monitor.stop()
        await self.tasks.close()
        self.store.close()


# Who listens to what: the one table of consumers (seed 003's pipeline).
# (name, topic pattern, handler, on_drop)
def consumer_table(rt: Runtime) -> list[tuple[str, str, Callable, Callable[[Event], None] | None]]:
    return [
        ("status-monitor", "terminal.#", rt.monitor.handle, rt.monitor.on_dropped),
        ("log-writer", "terminal.*.output", rt.logs.on_output, None),
        ("inbox.status", "terminal.*.status", rt.inbox.on_status, None),
        ("inbox.composer", "terminal.*.composer", rt.inbox.on_composer, None),
        ("inbox.removed", "terminal.*.removed", rt.inbox.on_removed, None),
        ("terminals.backend-lost", "backend.*.lost", rt.terminals.on_backend_lost, None),
        ("terminals.session-env", "session.*.killed", rt.terminals.session_envs.on_session_killed, None),
        ("plugins", "#", rt.plugins.handle, None),
    ]


def wire_consumers(rt: Runtime) -> None:
    for name, pattern, handler, on_drop in consumer_table(rt):
        rt.bus.subscribe(name, pattern, handler, on_drop=on_drop)
    rt.bus.observe_publish(rt.plugins.note_publish)  # who caused each event, seen where it is published


def build_runtime(settings: Settings | None = None) -> Runtime:
    settings = settings or Settings.from_env()
    settings.ensure_dirs()
    store = Store(settings.database_url or settings.db_path, busy_limit_s=settings.db_busy_timeout)
    bus = EventBus(settings.event_queue_size)
    tasks = TaskGroup(on_failure=lambda name, exc: bus.record_failure("task", name, exc))
    local = TmuxBackend(settings.tmux_socket_name, bus, settings.output_source, settings.fifo_dir, spawn=tasks.spawn)
    hosts = HostService(settings.tmp_dir, store, HostTables(store.engine), dict(os.environ))
    token_path = settings.auth_token_path
    backend = PlacedBackend(
        local,
        hosts.connector(
            bus,
            tasks.spawn,
            settings.tmux_socket_name,
            str(settings.hosts_socket_path),
            lambda: read_token(token_path) or "",
            settings.host_dead_after,
        ),
    )
    hosts.connection_of, hosts.disconnect = backend.host_health, backend.disconnect
    monitor = StatusMonitor(bus, store, tasks, backend.request_snapshot)
    logs = LogWriter(settings.terminal_logs_dir, tasks)
    input_service = InputService(backend, bus, monitor)
    terminals = TerminalService(settings, store, bus, backend, backend, monitor, input_service, tasks, dict(os.environ))
    sessions = SessionService(backend, terminals)
    cli_hooks = CliHookChannel(settings.tmp_dir, terminals, bus, tasks.spawn)
    inbox = InboxService(settings, store, bus, terminals, monitor, input_service, tasks)
    questions = QuestionWatch(bus, monitor, terminals, inbox, settings.handoff_grace)
    handoff_tables = HandoffTables(store.engine)
    jobs = HandoffJobs(store, handoff_tables, terminals, inbox, bus)
    memory = MemoryService(settings, store, MemoryTables(store.engine), bus, tasks.spawn)
    orchestration = OrchestrationService(
        bus, monitor, terminals, inbox, questions, jobs, tasks.spawn, memory.first_task
    )
    registry, timeline = RunRegistry(tasks.spawn), Timeline(store, bus)
    steps = StepExecution(store, registry, timeline, orchestration)
    step_gate = ScriptStepGate(store, registry, timeline, steps)
    specs = SpecDirectory(settings.workflows_dir)
    workflows = WorkflowService(
        catalog=WorkflowCatalog(specs),
        runs=RunLifecycle(
            settings,
            store,
            terminals,
            registry,
            timeline,
            specs,
            ScriptDriver(settings, store),
            YamlDriver(store, timeline, steps),
        ),
        views=RunViews(store, registry),
    )
    flow_tables = FlowTables(store.engine)
    flows = FlowService(
        settings.home_dir,
        settings.home_dir / "flows",
        server_zone_name(),
        store,
        flow_tables,
        bus,
        tasks,
        FlowRunner(store, flow_tables, bus, terminals, sessions, orchestration, dict(os.environ)),
    )
    return Runtime(
        settings,
        store,
        bus,
        tasks,
        backend,
        monitor,
        logs,
        input_service,
        terminals,
        sessions,
        inbox,
        orchestration,
        step_gate,
        workflows,
        cli_hooks,
        PluginDispatcher(load_plugins(settings.home_dir)),
        flows,
        hosts,
        memory,
        HandoffResults(
            store, handoff_tables, orchestration, inbox, bus, monitor, tasks.spawn, settings.handoff_unclaimed
        ),
    )
