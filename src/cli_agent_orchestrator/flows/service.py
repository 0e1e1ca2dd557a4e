"""Flows as the API and the CLI see them: add (a flow file, or fields that become one),
list, get, enable, disable, remove, run now, and each flow's runs; and the schedule's life
with the server's (start, stop).

Invariants: one run per flow at a time (a marker set before the first await, so two due
times or a due time and `cao flow run` never both start one; the loser is recorded as
skipped); a due time is advanced before its run starts, so a failing gate fails once per
due time, not in a loop; a due time missed while the server was down runs once at start-up.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from ..bus import EventBus
from ..errors import InvalidInput, NotFound
from ..events import FlowRunFinished, FlowRunStarted
from ..private_files import private_dir, replace_private
from ..store import Store
from ..store.flows import FlowTables, stamp
from ..tasks import TaskGroup
from .records import MISSED_RUN_RULE, FlowRecord, FlowRun, FlowSpec, Trigger
from .runner import INTERRUPTED, FlowRunner
from .schedule import Schedule
from .scheduler import DueTimer, utc_now
from .spec import check_name, check_references, flow_file_text, parse_flow, read_flow_file, session_name

log = logging.getLogger(__name__)


class FlowService:
    def __init__(
        self,
        home: Path,
        flows_dir: Path,
        server_zone: str,
        store: Store,
        tables: FlowTables,
        bus: EventBus,
        tasks: TaskGroup,
        runner: FlowRunner,
    ):
        self.home = home
        self.flows_dir = flows_dir  # where POST /flows with fields writes `<name>.flow.md`
        self.server_zone = server_zone  # the zone of flows without `timezone`
        self.store = store
        self.tables = tables
        self.bus = bus
        self.tasks = tasks
        self.runner = runner
        self._running: dict[str, int | None] = {}  # flow → its run now (None while it is recorded)
        self._drives: dict[int, asyncio.Task] = {}
        self._unschedulable: dict[str, str] = {}  # flow → why its stored schedule cannot be used
        self._timer = DueTimer(self._fire_due, self._earliest_due)
        self._timer_task: asyncio.Task | None = None
        self._started_at = utc_now()

    # --- the server's life ------------------------------------------------------------
    async def start(self) -> None:
        self._started_at = now = utc_now()
        for run in await self.store.run(self.tables.interrupt_running, INTERRUPTED):
            self.bus.publish(FlowRunFinished(run.flow_name, run.id, run.state, run.reason, run.terminal_id))
        for flow in await self.store.run(self.tables.list_flows):
            # A stored flow that can no longer be scheduled (e.g. its zone vanished from the
            # system) is reported by `cao flow list`; it never keeps the server or others down.
            try:
                schedule = self._schedule(flow.spec)
            except InvalidInput as exc:
                self._unschedulable[flow.spec.name] = str(exc)
                log.warning("flow %s cannot be scheduled: %s", flow.spec.name, exc)
                continue
            if flow.enabled and flow.next_run is None:
                await self.store.run(self.tables.set_times, flow.spec.name, schedule.next_after(now))
        self._timer_task = self.tasks.spawn(self._timer.run(), "flows:timer")

    async def stop(self) -> None:
        """Stop the timer; runs still going are recorded as interrupted (their agents stay)."""
        pending = [t for t in (self._timer_task, *self._drives.values()) if t is not None]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    # --- flows --------------------------------------------------------------------------
    async def add_file(self, path: str) -> dict[str, Any]:
        """Add the flow file at `path` (absolute, on the server's machine), or replace the
        flow of that name with it."""
        file = Path(path).expanduser()
        if not file.is_absolute():
            raise InvalidInput(f"flow file path must be absolute, got {path[:200]!r}")
        spec = await asyncio.to_thread(self._load, file)
        return await self._put(spec)

    async def add_fields(self, fields: dict[str, Any], prompt_template: str) -> dict[str, Any]:
        """Write `<flows dir>/<name>.flow.md` from the fields and add it."""
        name = check_name(fields.get("name"))
        file = self.flows_dir / f"{name}.flow.md"
        meta = {k: v for k, v in fields.items() if v is not None}
        text = flow_file_text(meta, prompt_template)
        spec = parse_flow(text, file, self.server_zone)
        await asyncio.to_thread(check_references, spec, self.home)
        await asyncio.to_thread(_write_file, file, text)
        return await self._put(spec)

    async def list(self) -> list[dict[str, Any]]:
        flows = await self.store.run(self.tables.list_flows)
        flows.sort(key=lambda f: (f.next_run is None, f.next_run or datetime.min, f.spec.name))
        return [self.view(f) for f in flows]

    async def get(self, name: str) -> dict[str, Any]:
        return self.view(await self._flow(name))

    async def set_enabled(self, name: str, enabled: bool) -> None:
        flow = await self._flow(name)
        next_run = None
        if enabled:  # due times from now on; none that passed while it was disabled
            next_run = self._schedule(flow.spec).next_after(utc_now())
            self._unschedulable.pop(name, None)
        await self.store.run(self.tables.set_enabled, name, enabled, next_run)
        self._timer.changed()

    async def remove(self, name: str) -> None:
        check_name(name)
        if not await self.store.run(self.tables.delete_flow, name):
            raise NotFound(f"flow {name!r} not found")
        self._unschedulable.pop(name, None)
        self._timer.changed()

    async def runs(self, name: str, limit: int) -> builtins.list[dict[str, Any]]:  # (`list` is a method here)
        await self._flow(name)
        return [r.as_json() for r in await self.store.run(self.tables.list_runs, name, limit)]

    async def run_now(self, name: str, wait: bool) -> FlowRun:
        """Fire the flow now (enabled or not; its schedule is unchanged). Answers once it is
        known whether the agent gets the prompt, or with `wait` when the run has ended."""
        flow = await self._flow(name)
        await self.store.run(self.tables.set_last_run, name, utc_now())
        run, started = await self._begin(flow.spec, "manual", None)
        if started is None:
            return run
        drive, decided = started
        # Shielded: a client that leaves does not end the run.
        return await asyncio.shield(drive if wait else decided)

    # --- firing -------------------------------------------------------------------------
    async def _fire_due(self, now: datetime) -> None:
        for flow in await self.store.run(self.tables.list_flows):
            name = flow.spec.name
            if not flow.enabled or flow.next_run is None or flow.next_run > now or name in self._unschedulable:
                continue
            try:
                next_run: datetime | None = self._schedule(flow.spec).next_after(now)
            except InvalidInput as exc:
                self._unschedulable[name], next_run = str(exc), None
            trigger: Trigger = "missed" if flow.next_run < self._started_at else "schedule"
            # Advanced before the run starts: whatever the run does, this due time is spent.
            await self.store.run(self.tables.set_times, name, next_run, now)
            try:
                await self._begin(flow.spec, trigger, flow.next_run)
            except Exception:  # one flow's trouble (a locked database) must not stop the others
                log.exception("flow %s: could not start its run", name)

    async def _earliest_due(self) -> datetime | None:
        flows = await self.store.run(self.tables.list_flows)
        due = [f.next_run for f in flows if f.enabled and f.next_run and f.spec.name not in self._unschedulable]
        return min(due, default=None)

    async def _begin(
        self, spec: FlowSpec, trigger: Trigger, due_at: datetime | None
    ) -> tuple[FlowRun, tuple[asyncio.Task[FlowRun], asyncio.Future[FlowRun]] | None]:
        """Record a run and start it in the background (its task, and the future set once it
        is known whether the agent gets the prompt); a flow still running gets a skipped run."""
        name = spec.name
        base = {"flow_name": name, "trigger": trigger, "due_at": stamp(due_at) if due_at else None}
        if name in self._running:
            current = self._running[name]
            busy = f"run {current} of this flow is still running" if current else "a run of this flow is starting"
            run = await self.store.run(
                self.tables.add_run,
                {**base, "state": "skipped", "started_at": stamp(), "finished_at": stamp(), "reason": busy},
            )
            self.bus.publish(FlowRunStarted(name, run.id, trigger))
            self.bus.publish(FlowRunFinished(name, run.id, run.state, run.reason))
            return run, None
        self._running[name] = None  # before the first await: nobody else starts this flow now
        try:
            run = await self.store.run(
                self.tables.add_run,
                {**base, "state": "running", "started_at": stamp(), "session_name": session_name(name)},
            )
        except BaseException:
            self._running.pop(name, None)
            raise
        self._running[name] = run.id
        self.bus.publish(FlowRunStarted(name, run.id, trigger))
        decided: asyncio.Future[FlowRun] = asyncio.get_running_loop().create_future()
        task = self.tasks.spawn(self._drive(run, spec, decided), f"flow:{name}:{run.id}")
        if task is None:  # the server is stopping
            self._running.pop(name, None)
            return await self.runner.finish(run, "interrupted", reason=INTERRUPTED), None
        self._drives[run.id] = task
        return run, (task, decided)

    async def _drive(self, run: FlowRun, spec: FlowSpec, decided: asyncio.Future[FlowRun]) -> FlowRun:
        try:
            return await self.runner.drive(run, spec, decided)
        finally:
            self._drives.pop(run.id, None)
            if self._running.get(spec.name) == run.id:
                del self._running[spec.name]

    # --- helpers ------------------------------------------------------------------------
    async def _flow(self, name: str) -> FlowRecord:
        check_name(name)
        flow = await self.store.run(self.tables.get_flow, name)
        if flow is None:
            raise NotFound(f"flow {name!r} not found (`cao flow list` shows the flows)")
        return flow

    def _load(self, file: Path) -> FlowSpec:
        spec = parse_flow(read_flow_file(file), file.resolve(), self.server_zone)
        check_references(spec, self.home)
        return spec

    async def _put(self, spec: FlowSpec) -> dict[str, Any]:
        next_run = self._schedule(spec).next_after(utc_now())
        flow = await self.store.run(self.tables.put_flow, spec, next_run)
        self._unschedulable.pop(spec.name, None)
        self._timer.changed()
        return self.view(flow)

    def _zone_name(self, spec: FlowSpec) -> str:
        return spec.timezone or self.server_zone

    def _schedule(self, spec: FlowSpec) -> Schedule:
        return Schedule.parse(spec.schedule, self._zone_name(spec))

    def view(self, flow: FlowRecord) -> dict[str, Any]:
        spec = flow.spec
        zone_name = self._zone_name(spec)
        try:
            tz: ZoneInfo | None = ZoneInfo(zone_name)
        except (ValueError, KeyError):
            tz = None

        def local(moment: datetime | None) -> str | None:
            if moment is None:
                return None
            return (moment.astimezone(tz) if tz else moment).isoformat()

        return {
            "name": spec.name,
            "file_path": spec.file_path,
            "schedule": spec.schedule,
            "timezone": zone_name,
            "timezone_source": "flow" if spec.timezone else "server",
            "agent_profile": spec.agent_profile,
            "provider": spec.provider,
            "script": spec.script,
            "engine": spec.engine,
            "host": spec.host,
            "timeout": spec.timeout,
            "description": spec.description,
            "prompt_template": spec.prompt_template,
            "enabled": flow.enabled,
            "last_run": local(flow.last_run),
            "next_run": local(flow.next_run) if spec.name not in self._unschedulable else None,
            "session_name": session_name(spec.name),
            "running_run_id": self._running.get(spec.name),
            "missed_runs": MISSED_RUN_RULE,
            "error": self._unschedulable.get(spec.name),
        }


def _write_file(file: Path, text: str) -> None:
    private_dir(file.parent)
    replace_private(file, text)
