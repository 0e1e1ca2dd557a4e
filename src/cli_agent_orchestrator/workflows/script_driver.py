"""Supervising one drive of a workflow script: its frozen source written to a private
snapshot, the process started with its constructed environment and watched to its end
or its timeout, and that end read as the run's. A step that halted or diverged in the
drive fails the run even when the script exits 0.
"""

from __future__ import annotations

import logging

from ..auth_token import read_token
from ..errors import StoreBusy
from ..private_files import private_dir, write_private
from ..settings import Settings
from ..store import Store
from ..store.journal import dumps
from .drives import Drive, DriveEnd
from .records import RunKind, RunState
from .script_process import ScriptProcess, script_env

log = logging.getLogger(__name__)

STDERR_WARNING_BYTES = 4000


class ScriptDriver:
    def __init__(self, settings: Settings, store: Store):
        self.settings, self.store = settings, store
        self.journal = store.journal

    async def drive(self, drive: Drive, resume: bool) -> DriveEnd | None:
        """Run the script to its end; None when the drive was cancelled (the cancel has
        written the run's final state)."""
        run = await self.store.run(self.journal.get_run, drive.run_id)
        assert run is not None  # a run is journaled before it is driven
        snapshot = self.settings.workflow_runs_dir / drive.run_id / f"{run.workflow_name}.py"
        private_dir(self.settings.workflow_runs_dir)
        private_dir(snapshot.parent)
        write_private(snapshot, run.source)
        # Through a non-loopback address the server cannot see who the script is: it needs the token.
        env = script_env(
            run_id=drive.run_id,
            generation=drive.generation,
            base_url=self.settings.base_url,
            inputs_json=run.inputs_json,
            resume=resume,
            auth_token=None if self.settings.base_url_is_loopback else read_token(self.settings.auth_token_path),
        )
        proc = ScriptProcess(snapshot, env)
        drive.process = proc
        if drive.cancelled:
            return None
        try:
            await proc.start()
        except OSError as exc:
            return DriveEnd(RunState.FAILED, RunKind.ERROR, warnings=[f"could not start the script: {exc}"])
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
            return None
        if outcome.returncode != 0 and not timed_out:
            code = outcome.returncode
            how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
            tail = outcome.stderr_tail[-STDERR_WARNING_BYTES:].strip()
            warnings += [f"the script {how}"] + ([f"stderr: {tail}"] if tail else [])
        if timed_out:
            await self.store.run(self.journal.bump_generation, drive.run_id)
            return DriveEnd(
                RunState.FAILED,
                RunKind.TIMEOUT,
                output,
                warnings + [f"the script ran longer than {self.settings.workflow_script_timeout:.0f}s and was stopped"],
            )
        if drive.halts:
            if outcome.returncode == 0:
                warnings.append(
                    "the script finished after a step halted or diverged; the run is not "
                    "completed until that step is resolved"
                )
            return DriveEnd(RunState.FAILED, RunKind.DIVERGED if drive.diverged else RunKind.HALTED, output, warnings)
        if outcome.returncode == 0:
            return DriveEnd(RunState.COMPLETED, None, output, warnings)
        return DriveEnd(RunState.FAILED, RunKind.ERROR, output, warnings)
