"""The lifecycle of workflow runs: start (journal first, then drive), resume with
decisions, cancel, finish, recover after a server crash, delete. A run is journaled before
anything runs; every drive has its own generation, only the drive holding the current one
can run steps (`script_steps`), and at most one drive per run exists at any time.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
from collections.abc import Mapping
from typing import Any

from ..errors import CaoError, Conflict, InvalidInput, NotBuilt, NotFound, Unprocessable, WorkflowConflict
from ..events import RunCancelled, RunCompleted, RunFailed, RunInterrupted, RunResumed, RunStarted, StepOutputReceived
from ..services.terminals.service import TerminalService
from ..settings import Settings
from ..store import Store
from ..store.journal import dumps, stamp
from . import output_schema, resume_gate, yaml_spec
from .drives import Drive, DriveEnd, RunRegistry
from .inputs import encode_inputs, read_inputs_declaration, validate_inputs
from .lint import lint_script
from .records import Decision, RunKind, RunRecord, RunState, StepRecord, StepState, Tier
from .script_driver import ScriptDriver
from .script_process import kill_orphan
from .specs import SpecDirectory, SpecFile, check_name, content_hash
from .timeline import Timeline
from .yaml_driver import YamlDriver

log = logging.getLogger(__name__)

MAX_STEP_OUTPUT_BYTES = 1024 * 1024
CANCEL_SETTLE_S = 10.0
# Halt rules a `skip` can lift: the step has a stored result a human may accept.
SKIPPABLE_RULES = frozenset({resume_gate.POLICY_MANUAL, resume_gate.ENVELOPE_LOSSY, resume_gate.OUTCOME_FAILED})


def mint_run_id() -> str:
    return "run-" + secrets.token_hex(8)


class RunLifecycle:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        terminals: TerminalService,
        registry: RunRegistry,
        timeline: Timeline,
        specs: SpecDirectory,
        scripts: ScriptDriver,
        yaml: YamlDriver,
    ):
        self.settings, self.store, self.terminals = settings, store, terminals
        self.registry, self.timeline, self.specs = registry, timeline, specs
        self.scripts, self.yaml = scripts, yaml
        self.journal = store.journal

    # --- starting ---------------------------------------------------------------------
    async def start(self, name_or_path: str, inputs: dict[str, Any] | None, run_id: str | None) -> Drive:
        """Validate everything, journal the run, and start its first drive."""
        spec = self.specs.resolve(name_or_path)
        source = spec.read()
        yaml_steps: list[str] = []
        if spec.tier == Tier.SCRIPT:
            resolved = validate_inputs(read_inputs_declaration(source), inputs)
        else:
            parsed = yaml_spec.parse_spec(source)
            problem = yaml_spec.runnable_problem(parsed)
            if problem:
                raise NotBuilt(problem)
            resolved = validate_inputs(parsed.inputs, inputs)
            yaml_steps = [s.id for s in parsed.steps]
        run_id = check_name(run_id, "run id") if run_id is not None else mint_run_id()
        if await self.store.run(self.journal.get_run, run_id):
            raise Conflict(f"run id {run_id!r} is already taken")
        if spec.tier == Tier.SCRIPT:
            lint = lint_script(source)
            if lint["status"] == "fail":
                raise Unprocessable(
                    f"{spec.path.name} fails validation: " + "; ".join(lint["errors"]), findings=lint["findings"]
                )
        if run_id in self.registry.drives:
            raise Conflict(f"run id {run_id!r} is already taken")
        # Claimed before the row is visible, so nobody sees a running run without a drive.
        drive = Drive(run_id, 1, spec.tier)
        self.registry.claim(drive)
        try:
            await self._journal_new_run(run_id, spec, source, resolved, yaml_steps)
        except BaseException:
            self.registry.release(drive)
            raise
        drive.task = self.registry.start(self._drive(drive, resume=False), f"workflow-drive-{run_id}")
        return drive

    async def _journal_new_run(
        self, run_id: str, spec: SpecFile, source: str, resolved: dict, yaml_steps: list[str]
    ) -> None:
        await self.store.run(
            self.journal.create_run,
            RunRecord(
                run_id=run_id,
                workflow_name=spec.name,
                tier=spec.tier,
                state=RunState.RUNNING,
                kind=None,
                generation=1,
                source=source,
                source_path=str(spec.path),
                content_hash=content_hash(source),
                inputs_json=encode_inputs(resolved),
                output_json=None,
                warnings=(),
                halts=(),
                current_step_id=None,
                driver_pid=None,
                drives=1,
                started_at=stamp(),
                finished_at=None,
            ),
        )
        if yaml_steps:
            await self.store.run(self.journal.seed_steps, run_id, yaml_steps)
        await self.timeline.record(
            RunStarted(run_id=run_id, generation=1, workflow_name=spec.name, tier=spec.tier, inputs=resolved)
        )

    async def _drive(self, drive: Drive, resume: bool) -> None:
        try:
            if drive.tier == Tier.SCRIPT:
                end = await self.scripts.drive(drive, resume)
                if end is not None:
                    await self._finish(drive, end)
            else:
                await self.yaml.drive(drive)
        except Exception as exc:  # the run must end in a state, whatever broke
            log.exception("drive of %s failed", drive.run_id)
            await self._finish(drive, DriveEnd(RunState.FAILED, RunKind.ERROR, warnings=[f"cao-server error: {exc}"]))
        finally:
            await self.store.run(self.journal.revoke_decisions, drive.run_id)  # consent lasts one drive
            self.registry.release(drive)

    async def _finish(self, drive: Drive, end: DriveEnd) -> None:
        run = await self.store.run(self.journal.get_run, drive.run_id)
        if run is None or run.state != RunState.RUNNING:  # cancelled (or deleted) meanwhile
            return
        all_warnings = list(run.warnings) + end.warnings
        await self.store.run(
            lambda: self.journal.update_run(
                drive.run_id,
                state=end.state,
                kind=end.kind,
                output_json=end.output_json,
                warnings=all_warnings,
                finished_at=stamp(),
                driver_pid=None,
            )
        )
        halts = [h.as_json() for h in drive.halts]
        if end.state == RunState.COMPLETED:
            await self.timeline.record(
                RunCompleted(run_id=drive.run_id, generation=drive.generation, halts=halts, warnings=end.warnings)
            )
        else:
            assert end.kind is not None  # a run that did not complete says why
            await self.timeline.record(
                RunFailed(
                    run_id=drive.run_id, generation=drive.generation, kind=end.kind, halts=halts, warnings=end.warnings
                )
            )

    # --- resume and cancel ------------------------------------------------------------
    async def resume(self, run_id: str, decisions: Mapping[str, Decision] | None) -> Drive:
        check_name(run_id, "run id")
        decisions = dict(decisions or {})
        run = await self.store.run(self.journal.get_run, run_id)
        if run is None:
            raise NotFound(f"unknown workflow run {run_id!r}")
        if run_id in self.registry.drives:
            raise Conflict(f"run {run_id!r} is currently executing; wait for it or cancel it first")
        if run.state == RunState.COMPLETED:
            raise Conflict(f"run {run_id!r} is completed; there is nothing to resume")
        if run.tier == Tier.YAML:
            if decisions:
                raise InvalidInput(
                    "decisions apply to script runs only; a YAML run resumes from its first unfinished step"
                )
            if run.state == RunState.CANCELLED:
                raise Conflict(f"run {run_id!r} is a cancelled YAML run; start a new run instead")
        if not run.source:
            raise Unprocessable(f"run {run_id!r} has no source snapshot to resume from")
        steps = {s.step_id: s for s in await self.store.run(self.journal.list_steps, run_id)}
        _check_decisions(run_id, decisions, steps)
        if run_id in self.registry.drives:  # re-check after the awaits above
            raise Conflict(f"run {run_id!r} is currently executing; wait for it or cancel it first")
        drive = Drive(run_id, run.generation + 1, run.tier)
        self.registry.claim(drive)
        try:
            # Steps still in flight from the previous drive settle first, so that the
            # gate sees their real outcome instead of "never settled".
            pending = self.registry.inflight(run_id)
            if pending:
                await asyncio.wait(pending)
            drive.generation = await self.store.run(self.journal.begin_drive, run_id, decisions)
        except BaseException:
            self.registry.release(drive)
            raise
        await self.timeline.record(RunResumed(run_id=run_id, generation=drive.generation, decisions=decisions))
        drive.task = self.registry.start(self._drive(drive, resume=True), f"workflow-drive-{run_id}")
        return drive

    async def cancel(self, run_id: str) -> None:
        check_name(run_id, "run id")
        run = await self.store.run(self.journal.get_run, run_id)
        if run is None:
            raise NotFound(f"unknown workflow run {run_id!r}")
        drive = self.registry.drives.get(run_id)
        if run.state != RunState.RUNNING:
            raise Conflict(f"run {run_id!r} is already finished ({run.state})")
        if drive is not None:
            drive.cancelled = True
        generation = await self.store.run(
            lambda: self.journal.bump_generation(
                run_id, state=RunState.CANCELLED, kind=RunKind.CANCELLED, finished_at=stamp(), driver_pid=None
            )
        )
        await self.timeline.record(RunCancelled(run_id=run_id, generation=generation))
        if drive is not None:
            if drive.process is not None:
                await drive.process.stop()
            if drive.task is not None and drive.tier == Tier.YAML:
                drive.task.cancel()
        await self._remove_step_terminals(run_id)
        # Their executions now fail and settle as cancelled; answer once they have, so
        # that a status read after the cancel shows the final journal.
        pending = self.registry.inflight(run_id)
        if pending:
            await asyncio.wait(pending, timeout=CANCEL_SETTLE_S)

    async def _remove_step_terminals(self, run_id: str) -> None:
        for step in await self.store.run(self.journal.list_steps, run_id):
            if step.state == StepState.RUNNING and step.terminal_id:
                try:
                    await self.terminals.delete(step.terminal_id)
                except CaoError:
                    pass  # already gone

    # --- server start and stop --------------------------------------------------------
    async def recover(self) -> None:
        """After a restart: a run whose drive died with the old server is interrupted
        (its generation bumped so any orphan call is fenced), its orphan script ended,
        and the terminals of its unsettled steps removed. Resume decides the rest."""
        for run in await self.store.run(self.journal.runs_in_state, RunState.RUNNING):
            run_id = run.run_id
            if run.driver_pid:
                kill_orphan(run.driver_pid, run_id)
            note = f"cao-server stopped while this run was being driven; resume it with: cao workflow resume {run_id}"
            generation = await self.store.run(
                functools.partial(
                    self.journal.bump_generation,
                    run_id,
                    state=RunState.FAILED,
                    kind=RunKind.INTERRUPTED,
                    finished_at=stamp(),
                    driver_pid=None,
                    warnings=list(run.warnings) + [note],
                )
            )
            await self._remove_step_terminals(run_id)
            await self.timeline.record(RunInterrupted(run_id=run_id, generation=generation, message=note))
        await self.store.run(self.journal.revoke_decisions, None)

    async def shutdown(self) -> None:
        """Server stop: end the scripts being driven. Their runs stay `running` in the
        journal and the next start marks them interrupted (the same path as a crash)."""
        for drive in list(self.registry.drives.values()):
            if drive.process is not None:
                await drive.process.stop()

    # --- a run's end of life, and its steps' structured output ------------------------
    async def delete_run(self, run_id: str) -> None:
        run = await self.store.run(self.journal.get_run, check_name(run_id, "run id"))
        if run is None:
            return
        if run.state == RunState.RUNNING or run_id in self.registry.drives:
            raise Conflict(f"run {run_id!r} is not finished; cancel it first")
        await self.store.run(self.journal.delete_run, run_id)
        snapshot_dir = self.settings.workflow_runs_dir / run_id
        for path in snapshot_dir.glob("*"):
            path.unlink(missing_ok=True)
        if snapshot_dir.exists():
            snapshot_dir.rmdir()

    async def wait_finished(self, run_id: str, timeout: float) -> bool:
        """Wait until nothing drives the run any more (the drive's `done` event, no polling);
        False on timeout. A run found without a drive is finished: nothing will change it
        until someone resumes it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if await self.store.run(self.journal.get_run, check_name(run_id, "run id")) is None:
            raise NotFound(f"unknown workflow run {run_id!r}")
        while True:
            drive = self.registry.drives.get(run_id)
            if drive is None:
                return True
            try:
                await asyncio.wait_for(drive.done.wait(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                return False

    async def record_step_output(
        self,
        run_id: str,
        step_id: str,
        output: dict,
        generation: str | None = None,
        schema: dict[str, Any] | None = None,
    ) -> dict:
        """Structured output a step's agent returned (MCP `workflow_return`), kept whether or
        not it matches, and checked against the step's schema: a YAML step's own
        output_schema, else the `schema` the caller sent (a script's step)."""
        check_name(run_id, "run id")
        check_name(step_id, "step id")
        if schema is not None and (problems := output_schema.schema_problems(schema)):
            raise InvalidInput("; ".join(problems))
        try:
            size = len(dumps(output).encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidInput("step output is not valid text: it holds a lone UTF-16 surrogate") from None
        if size > MAX_STEP_OUTPUT_BYTES:
            raise InvalidInput(f"step output is {size} bytes; the limit is {MAX_STEP_OUTPUT_BYTES}")
        step = await self.store.run(self.journal.get_step, run_id, step_id)
        if step is None:
            raise NotFound(f"run {run_id!r} has no step {step_id!r}")
        if generation is not None and step.generation is not None and str(step.generation) != generation:
            raise WorkflowConflict(
                f"run '{run_id}' step '{step_id}': output from generation '{generation}' "
                f"but the step's attempt is generation '{step.generation}'",
                "stale_generation",
                run_id=run_id,
                step_id=step_id,
            )
        schema = await self._declared_schema(run_id, step_id) or schema
        await self.store.run(lambda: self.journal.update_step(run_id, step_id, output=output))
        await self.timeline.record(StepOutputReceived(run_id=run_id, generation=step.generation, step_id=step_id))
        found = await asyncio.to_thread(output_schema.violations, output, schema) if schema else []
        return {"validated": not found, "errors": [str(v) for v in found], "state": step.state}

    async def _declared_schema(self, run_id: str, step_id: str) -> dict[str, Any] | None:
        """A YAML step's own output_schema: it wins over one an agent sends (which could
        otherwise loosen it)."""
        run = await self.store.run(self.journal.get_run, run_id)
        if run is None or run.tier != Tier.YAML or not run.source:
            return None
        try:
            spec = yaml_spec.parse_spec(run.source)
        except CaoError:
            return None
        declared = next((s.output_schema for s in spec.steps if s.id == step_id), None)
        return dict(declared) if declared is not None else None


def _check_decisions(run_id: str, decisions: Mapping[str, Any], steps: Mapping[str, StepRecord]) -> None:
    """All-or-nothing: every decision must name a halted step and fit its halt."""
    for step_id, value in decisions.items():
        if value not in resume_gate.DECISIONS:
            raise InvalidInput(f"decision for step {step_id!r} must be 'rerun' or 'skip'")
        step = steps.get(step_id)
        if step is None:
            raise InvalidInput(f"run {run_id!r} has no step {step_id!r}")
        rule = step.halt_rule
        if rule is None:
            raise InvalidInput(f"step {step_id!r} did not halt; decisions are only for halted steps")
        if rule == resume_gate.DIVERGED:
            raise InvalidInput(
                f"step {step_id!r} diverged: the script changed at that step key; "
                "no decision can fix that, restore the call or start a new run"
            )
        if value == Decision.SKIP and rule not in SKIPPABLE_RULES:
            raise InvalidInput(
                f"step {step_id!r} halted with {rule}: it has no stored result to "
                "accept, so 'skip' cannot apply; decide 'rerun'"
            )
