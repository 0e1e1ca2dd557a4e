"""Workflow runs: start (journal first, then run), drive a script as its own process,
resume with decisions, cancel, recover after a server crash, and the views that
`status`, `result` and `events` show.

A run is journaled before anything runs; every drive has its own generation, and
only the drive holding the current generation can run steps (the fence lives in
`workflow_steps`). At most one drive per run exists at any time.
"""
from __future__ import annotations

import asyncio
import json
import logging
import secrets
from typing import Any

from ..bus import EventBus
from ..errors import CaoError, Conflict, InvalidInput, NotBuilt, NotFound, StoreBusy, Unprocessable, WorkflowConflict
from ..auth_token import read_token
from ..private_files import private_dir, write_private
from ..settings import Settings
from ..store import Store
from ..store.journal import dumps, stamp
from ..workflows import gate, yaml_spec
from ..workflows.inputs import encode_inputs, read_inputs_declaration, validate_inputs
from ..workflows.lint import lint_script
from ..workflows.runner import ScriptProcess, kill_orphan, script_env
from ..workflows.specs import SpecDirectory, SpecFile, check_name, content_hash
from .terminals import TerminalService
from . import workflow_reports
from .workflow_catalog import WorkflowCatalog
from .workflow_state import Drive, RunRegistry, Timeline
from .workflow_yaml import YamlDriver

log = logging.getLogger(__name__)

RUN_STATES = ("running", "completed", "failed", "cancelled")
STDERR_WARNING_BYTES = 4000
MAX_STEP_OUTPUT_BYTES = 1024 * 1024
CANCEL_SETTLE_S = 10.0
# Halt rules a `skip` can lift: the step has a stored result a human may accept.
SKIPPABLE_RULES = frozenset({gate.POLICY_MANUAL, gate.ENVELOPE_LOSSY, gate.OUTCOME_FAILED})


def mint_run_id() -> str:
    return "run-" + secrets.token_hex(8)


class WorkflowService:
    def __init__(self, settings: Settings, store: Store, bus: EventBus, terminals: TerminalService,
                 registry: RunRegistry, timeline: Timeline, yaml_driver: YamlDriver):
        self.settings, self.store, self.bus, self.terminals = settings, store, bus, terminals
        self.registry, self.timeline, self.yaml = registry, timeline, yaml_driver
        self.specs = SpecDirectory(settings.workflows_dir)
        self.catalog = WorkflowCatalog(self.specs)
        self.journal = store.journal

    # --- starting ---------------------------------------------------------------------
    async def start(self, name_or_path: str, inputs: dict[str, Any] | None, run_id: str | None) -> Drive:
        """Validate everything, journal the run, and start its first drive."""
        spec = self.specs.resolve(name_or_path)
        source = spec.read()
        if spec.tier == "script":
            resolved = validate_inputs(read_inputs_declaration(source), inputs)
        else:
            parsed = yaml_spec.parse_spec(source)
            problem = yaml_spec.runnable_problem(parsed)
            if problem:
                raise NotBuilt(problem)
            resolved = validate_inputs(parsed.inputs, inputs)
        run_id = check_name(run_id, "run id") if run_id is not None else mint_run_id()
        if await self.store.run(self.journal.get_run, run_id):
            raise Conflict(f"run id {run_id!r} is already taken")
        if spec.tier == "script":
            lint = lint_script(source)
            if lint["status"] == "fail":
                raise Unprocessable(f"{spec.path.name} fails validation: " + "; ".join(lint["errors"]),
                                    findings=lint["findings"])
        if run_id in self.registry.drives:
            raise Conflict(f"run id {run_id!r} is already taken")
        # Claimed before the row is visible, so nobody sees a running run without a drive.
        drive = Drive(run_id, 1, spec.tier)
        self.registry.claim(drive)
        try:
            await self._journal_new_run(run_id, spec, source, resolved,
                                        [s.id for s in parsed.steps] if spec.tier == "yaml" else [])
        except BaseException:
            self.registry.release(drive)
            raise
        drive.task = asyncio.ensure_future(self._drive(drive, resume=False))
        return drive

    async def _journal_new_run(self, run_id: str, spec: SpecFile, source: str, resolved: dict,
                               yaml_steps: list[str]) -> None:
        await self.store.run(self.journal.create_run, {
            "run_id": run_id, "workflow_name": spec.name, "tier": spec.tier, "state": "running",
            "generation": 1, "source": source, "source_path": str(spec.path),
            "content_hash": content_hash(source), "inputs_json": encode_inputs(resolved),
            "warnings": [], "halts": [], "drives": 1, "started_at": stamp()})
        if yaml_steps:
            await self.store.run(self.journal.seed_steps, run_id, yaml_steps)
        await self.timeline.record(run_id, "run.started", None, 1, workflow_name=spec.name,
                                   tier=spec.tier, inputs=resolved)

    async def _drive(self, drive: Drive, resume: bool) -> None:
        try:
            if drive.tier == "script":
                await self._drive_script(drive, resume)
            else:
                await self.yaml.drive(drive)
        except Exception as exc:  # the run must end in a state, whatever broke
            log.exception("drive of %s failed", drive.run_id)
            await self._finish(drive, "failed", "error", warnings=[f"cao-server error: {exc}"])
        finally:
            await self.store.run(self.journal.revoke_decisions, drive.run_id)  # consent lasts one drive
            self.registry.release(drive)

    async def _drive_script(self, drive: Drive, resume: bool) -> None:
        run = await self.store.run(self.journal.get_run, drive.run_id)
        snapshot = self.settings.workflow_runs_dir / drive.run_id / f"{run['workflow_name']}.py"
        private_dir(self.settings.workflow_runs_dir)
        private_dir(snapshot.parent)
        write_private(snapshot, run["source"])
        # Through a non-loopback address the server cannot see who the script is: it needs the token.
        env = script_env(run_id=drive.run_id, generation=drive.generation, base_url=self.settings.base_url,
                         inputs_json=run["inputs_json"], resume=resume,
                         auth_token=None if self.settings.base_url_is_loopback
                         else read_token(self.settings.auth_token_path))
        proc = ScriptProcess(snapshot, env)
        drive.process = proc
        if drive.cancelled:
            return
        try:
            await proc.start()
        except OSError as exc:
            await self._finish(drive, "failed", "error", warnings=[f"could not start the script: {exc}"])
            return
        if drive.cancelled:  # cancelled while the process was being spawned
            await proc.stop()
        try:
            await self.store.run(lambda: self.journal.update_run(drive.run_id, driver_pid=proc.pid))
        except StoreBusy as exc:  # the script runs anyway; only a crash-time cleanup loses its pid
            log.warning("run %s: could not record the script's pid: %s", drive.run_id, exc)
        outcome, timed_out = await proc.wait(self.settings.workflow_script_timeout)
        warnings = list(outcome.warnings)
        # Only a clean exit's sentinel is the run's output: a crashed script's last line
        # is not a result anyone decided on.
        clean = outcome.returncode == 0 and not timed_out and not drive.halts
        output = dumps(outcome.output) if outcome.has_output and clean else None
        if drive.cancelled:
            return  # cancel() has written the final state
        if outcome.returncode != 0 and not timed_out:
            code = outcome.returncode
            how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
            tail = outcome.stderr_tail[-STDERR_WARNING_BYTES:].strip()
            warnings += [f"the script {how}"] + ([f"stderr: {tail}"] if tail else [])
        if timed_out:
            await self.store.run(self.journal.bump_generation, drive.run_id)
            await self._finish(drive, "failed", "timeout", output, warnings + [
                f"the script ran longer than {self.settings.workflow_script_timeout:.0f}s and was stopped"])
        elif drive.halts:
            if outcome.returncode == 0:
                warnings.append("the script finished after a step halted or diverged; the run is not "
                                "completed until that step is resolved")
            await self._finish(drive, "failed", "diverged" if drive.diverged else "halted", output, warnings)
        elif outcome.returncode == 0:
            await self._finish(drive, "completed", None, output, warnings)
        else:
            await self._finish(drive, "failed", "error", output, warnings)

    async def _finish(self, drive: Drive, state: str, kind: str | None, output: str | None = None,
                      warnings: list[str] | None = None) -> None:
        run = await self.store.run(self.journal.get_run, drive.run_id)
        if run is None or run["state"] != "running":  # cancelled (or deleted) meanwhile
            return
        all_warnings = list(run["warnings"] or []) + list(warnings or [])
        await self.store.run(lambda: self.journal.update_run(
            drive.run_id, state=state, kind=kind, output_json=output, warnings=all_warnings,
            finished_at=stamp(), driver_pid=None))
        await self.timeline.record(drive.run_id, f"run.{state}", None, drive.generation, kind=kind,
                                   halts=drive.halts, warnings=warnings or [])

    # --- resume and cancel ------------------------------------------------------------
    async def resume(self, run_id: str, decisions: dict[str, str] | None) -> Drive:
        check_name(run_id, "run id")
        decisions = dict(decisions or {})
        run = await self.store.run(self.journal.get_run, run_id)
        if run is None:
            raise NotFound(f"unknown workflow run {run_id!r}")
        if run_id in self.registry.drives:
            raise Conflict(f"run {run_id!r} is currently executing; wait for it or cancel it first")
        if run["state"] == "completed":
            raise Conflict(f"run {run_id!r} is completed; there is nothing to resume")
        if run["tier"] == "yaml":
            if decisions:
                raise InvalidInput("decisions apply to script runs only; a YAML run resumes from its "
                                   "first unfinished step")
            if run["state"] == "cancelled":
                raise Conflict(f"run {run_id!r} is a cancelled YAML run; start a new run instead")
        if not run["source"]:
            raise Unprocessable(f"run {run_id!r} has no source snapshot to resume from")
        steps = {s["step_id"]: s for s in await self.store.run(self.journal.list_steps, run_id)}
        self._check_decisions(run_id, decisions, steps)
        if run_id in self.registry.drives:  # re-check after the awaits above
            raise Conflict(f"run {run_id!r} is currently executing; wait for it or cancel it first")
        drive = Drive(run_id, run["generation"] + 1, run["tier"])
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
        await self.timeline.record(run_id, "run.resumed", None, drive.generation, decisions=decisions)
        drive.task = asyncio.ensure_future(self._drive(drive, resume=True))
        return drive

    @staticmethod
    def _check_decisions(run_id: str, decisions: dict[str, Any], steps: dict[str, dict]) -> None:
        """All-or-nothing: every decision must name a halted step and fit its halt."""
        for step_id, value in decisions.items():
            if value not in gate.DECISIONS:
                raise InvalidInput(f"decision for step {step_id!r} must be 'rerun' or 'skip'")
            step = steps.get(step_id)
            if step is None:
                raise InvalidInput(f"run {run_id!r} has no step {step_id!r}")
            rule = step["halt_rule"]
            if rule is None:
                raise InvalidInput(f"step {step_id!r} did not halt; decisions are only for halted steps")
            if rule == gate.DIVERGED:
                raise InvalidInput(f"step {step_id!r} diverged: the script changed at that step key; "
                                   "no decision can fix that, restore the call or start a new run")
            if value == "skip" and rule not in SKIPPABLE_RULES:
                raise InvalidInput(f"step {step_id!r} halted with {rule}: it has no stored result to "
                                   "accept, so 'skip' cannot apply; decide 'rerun'")

    async def cancel(self, run_id: str) -> None:
        check_name(run_id, "run id")
        run = await self.store.run(self.journal.get_run, run_id)
        if run is None:
            raise NotFound(f"unknown workflow run {run_id!r}")
        drive = self.registry.drives.get(run_id)
        if run["state"] != "running":
            raise Conflict(f"run {run_id!r} is already finished ({run['state']})")
        if drive is not None:
            drive.cancelled = True
        generation = await self.store.run(lambda: self.journal.bump_generation(
            run_id, state="cancelled", kind="cancelled", finished_at=stamp(), driver_pid=None))
        await self.timeline.record(run_id, "run.cancelled", None, generation)
        if drive is not None:
            if drive.process is not None:
                await drive.process.stop()
            if drive.task is not None and drive.tier == "yaml":
                drive.task.cancel()
        await self._remove_step_terminals(run_id)
        # Their executions now fail and settle as cancelled; answer once they have, so
        # that a status read after the cancel shows the final journal.
        pending = self.registry.inflight(run_id)
        if pending:
            await asyncio.wait(pending, timeout=CANCEL_SETTLE_S)

    async def _remove_step_terminals(self, run_id: str) -> None:
        for step in await self.store.run(self.journal.list_steps, run_id):
            if step["state"] == "running" and step["terminal_id"]:
                try:
                    await self.terminals.delete(step["terminal_id"])
                except CaoError:
                    pass  # already gone

    async def recover(self) -> None:
        """After a restart: a run whose drive died with the old server is interrupted
        (its generation bumped so any orphan call is fenced), its orphan script ended,
        and the terminals of its unsettled steps removed. Resume decides the rest."""
        for run in await self.store.run(self.journal.runs_in_state, "running"):
            run_id = run["run_id"]
            if run["driver_pid"]:
                kill_orphan(run["driver_pid"], run_id)
            note = (f"cao-server stopped while this run was being driven; resume it with: "
                    f"cao workflow resume {run_id}")
            generation = await self.store.run(lambda: self.journal.bump_generation(
                run_id, state="failed", kind="interrupted", finished_at=stamp(), driver_pid=None,
                warnings=list(run["warnings"] or []) + [note]))
            await self._remove_step_terminals(run_id)
            await self.timeline.record(run_id, "run.interrupted", None, generation, message=note)
        await self.store.run(self.journal.revoke_decisions, None)

    async def shutdown(self) -> None:
        """Server stop: end the scripts being driven. Their runs stay `running` in the
        journal and the next start marks them interrupted (the same path as a crash)."""
        for drive in list(self.registry.drives.values()):
            if drive.process is not None:
                await drive.process.stop()

    # --- views ------------------------------------------------------------------------
    async def get_run(self, run_id: str) -> dict:
        run = await self.store.run(self.journal.get_run, check_name(run_id, "run id"))
        if run is None:
            raise NotFound(f"unknown workflow run {run_id!r}")
        return run

    async def status(self, run_id: str) -> dict:
        run = await self.get_run(run_id)
        steps = await self.store.run(self.journal.list_steps, run_id)
        return {**_run_summary(run), "generation": run["generation"], "kind": run["kind"],
                "halts": run["halts"], "driving": run_id in self.registry.drives,
                "steps": [_step_view(s) for s in steps]}

    async def result(self, run_id: str) -> dict:
        run = await self.get_run(run_id)
        steps = await self.store.run(self.journal.list_steps, run_id)
        out = {**_run_summary(run), "kind": run["kind"], "generation": run["generation"],
               "inputs": json.loads(run["inputs_json"]), "halts": run["halts"],
               "steps": [_step_view(s) for s in steps], "warnings": run["warnings"],
               "output": json.loads(run["output_json"]) if run["output_json"] is not None else None}
        if run["state"] in ("failed", "cancelled"):
            out["failure_envelope"] = _failure_envelope(run, steps)
        return out

    async def compare(self, run_id: str, against: str) -> dict:
        base, other = await self.get_run(run_id), await self.get_run(against)
        base_steps = await self.store.run(self.journal.list_steps, run_id)
        other_steps = await self.store.run(self.journal.list_steps, against)
        return workflow_reports.compare(base, base_steps, other, other_steps)

    async def diagnostics(self, run_id: str) -> dict:
        run = await self.get_run(run_id)
        steps = await self.store.run(self.journal.list_steps, run_id)
        events = await self.store.run(self.journal.events, run_id, 0, 100000)
        return workflow_reports.diagnostics(run, steps, events)

    async def list_runs(self, state: str | None, limit: int) -> list[dict]:
        if state is not None and state not in RUN_STATES:
            raise InvalidInput(f"invalid state {state!r}: use one of {', '.join(RUN_STATES)}")
        if not 1 <= limit <= 500:
            raise InvalidInput("limit must be between 1 and 500")
        return [_run_summary(r) for r in await self.store.run(self.journal.list_runs, state, limit)]

    async def delete_run(self, run_id: str) -> None:
        run = await self.store.run(self.journal.get_run, check_name(run_id, "run id"))
        if run is None:
            return
        if run["state"] == "running" or run_id in self.registry.drives:
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
        await self.get_run(run_id)  # 404 for an unknown run
        while True:
            drive = self.registry.drives.get(run_id)
            if drive is None:
                return True
            try:
                await asyncio.wait_for(drive.done.wait(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                return False

    async def record_step_output(self, run_id: str, step_id: str, output: dict,
                                 generation: str | None = None) -> dict:
        """Structured output a step's agent returned (MCP `workflow_return`)."""
        check_name(run_id, "run id")
        check_name(step_id, "step id")
        if len(dumps(output).encode("utf-8")) > MAX_STEP_OUTPUT_BYTES:
            raise InvalidInput(f"step output exceeds {MAX_STEP_OUTPUT_BYTES} bytes")
        step = await self.store.run(self.journal.get_step, run_id, step_id)
        if step is None:
            raise NotFound(f"run {run_id!r} has no step {step_id!r}")
        if generation is not None and step["generation"] is not None and str(step["generation"]) != generation:
            raise WorkflowConflict(f"run '{run_id}' step '{step_id}': output from generation '{generation}' "
                                   f"but the step's attempt is generation '{step['generation']}'",
                                   "stale_generation", run_id=run_id, step_id=step_id)
        await self.store.run(lambda: self.journal.update_step(run_id, step_id, output=output))
        await self.timeline.record(run_id, "step.output.received", step_id, step["generation"])
        return {"validated": True, "errors": [], "state": step["state"]}


def _run_summary(run: dict) -> dict:
    return {"run_id": run["run_id"], "workflow_name": run["workflow_name"], "state": run["state"],
            "tier": run["tier"], "started_at": run["started_at"], "finished_at": run["finished_at"],
            "current_step_id": run["current_step_id"], "kind": run["kind"]}


def _step_view(step: dict) -> dict:
    envelope = step["envelope"] if isinstance(step["envelope"], dict) else None
    output = step["output"] if step["output"] is not None else (envelope or {}).get("last_message")
    return {"id": step["step_id"], "state": step["state"], "attempts": step["attempts"],
            "output": output, "output_json": step["output"], "error": step["error"],
            "error_kind": step["error_kind"], "terminal_id": step["terminal_id"], "policy": step["policy"],
            "call_fingerprint": step["fingerprint"], "generation": step["generation"],
            "reprompted": False,  # output_schema reprompts are not built (reserved)
            "truncated": bool(envelope and envelope.get("truncated")),
            "halt": {"rule": step["halt_rule"], "message": step["halt_message"]} if step["halt_rule"] else None,
            "started_at": step["started_at"], "finished_at": step["finished_at"]}


def _failure_envelope(run: dict, steps: list[dict]) -> dict:
    failing = None
    if run["halts"]:
        failing = next((s for s in steps if s["step_id"] == run["halts"][-1]["step_id"]), None)
    if failing is None:
        failing = next((s for s in reversed(steps) if s["state"] in ("failed", "running")), None)
    return {"failing_step": failing["step_id"] if failing else None,
            "attempt": failing["attempts"] if failing else None,
            "error_kind": (failing["error_kind"] if failing and failing["error_kind"] else run["kind"]),
            "halt": run["halts"][-1] if run["halts"] else None,
            "terminal_reference": failing["terminal_id"] if failing else None,
            "next_command": f"cao workflow result {run['run_id']}"}
