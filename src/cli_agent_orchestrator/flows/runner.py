"""One run of a flow, after it was recorded: is the session holding its name its own, and is
the previous run's agent still busy? → the gate (if any) → the prompt → a fresh agent in
session `cao-flow-<name>` → its reply. Every outcome ends in the run's record, and
FlowRunFinished is published after that commit.

The agent's session is kept after the run, for a human to look at; the next run of the flow
replaces it, unless its agent is still processing (then that run is skipped). A session of that
name the flow did not start (ownership.py) is never replaced: the run is skipped, saying why.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from typing import Any

from ..bus import EventBus
from ..errors import CaoError, InvalidInput, NotFound
from ..events import FlowRunFinished
from ..models import TerminalStatus
from ..services.orchestration import OrchestrationService
from ..services.sessions import SessionService
from ..services.terminals.service import TerminalService
from ..services.terminals.spawn import CreateRequest, new_terminal_id
from ..store import Store
from ..store.flows import FlowTables, stamp
from .gate_script import GateDecision, GateFailed, run_gate
from .ownership import not_own_reason
from .records import FlowRun, FlowSpec, RunState
from .spec import session_name
from .template import render

log = logging.getLogger(__name__)

INTERRUPTED = "cao-server stopped during the run; the agent, if it was started, was left in its session"


class FlowRunner:
    def __init__(
        self,
        store: Store,
        tables: FlowTables,
        bus: EventBus,
        terminals: TerminalService,
        sessions: SessionService,
        orchestration: OrchestrationService,
        environ: Mapping[str, str],
    ):
        """`environ`: cao-server's environment, which gate scripts inherit."""
        self.store = store
        self.tables = tables
        self.bus = bus
        self.terminals = terminals
        self.sessions = sessions
        self.orchestration = orchestration
        self.environ = environ

    async def drive(self, run: FlowRun, spec: FlowSpec, decided: asyncio.Future[FlowRun]) -> FlowRun:
        """Run it to the end. `decided` is set as soon as it is known whether the agent gets
        the prompt (a manual run answers then)."""
        try:
            final = await self._drive(run, spec, decided)
        except asyncio.CancelledError:
            final = await self.finish(run, "interrupted", reason=INTERRUPTED)
            _settle(decided, final)
            raise
        except Exception as exc:  # a bug must still end the run's record, and be logged
            log.exception("flow %s run %d failed unexpectedly", spec.name, run.id)
            final = await self.finish(run, "failed", reason=f"internal error: {type(exc).__name__}: {exc}")
        _settle(decided, final)
        return final

    async def _drive(self, run: FlowRun, spec: FlowSpec, decided: asyncio.Future[FlowRun]) -> FlowRun:
        session = session_name(spec.name)
        not_own = await self._not_own(spec.name, session)
        if not_own is not None:
            return await self.finish(run, "skipped", reason=not_own)
        busy = await self._busy_terminal(session)
        if busy is not None:
            return await self.finish(
                run,
                "skipped",
                reason=f"the previous run's agent (terminal {busy} in session {session}) is still processing",
            )
        gate: dict[str, Any] = {}
        values: dict[str, Any] = {}
        if spec.script is not None:
            try:
                decision = await run_gate(spec.script, os.path.dirname(spec.script), self._gate_env(spec, run))
            except GateFailed as exc:
                return await self.finish(run, "failed", reason=str(exc))
            gate = {"execute": decision.execute, "gate_output": decision.output}
            if not decision.execute:
                return await self.finish(run, "skipped", reason=_skip_reason(decision), **gate)
            values = decision.output
        try:
            prompt = render(spec.prompt_template, values)
        except InvalidInput as exc:
            return await self.finish(run, "failed", reason=str(exc), **gate)
        not_own = await self._not_own(spec.name, session)  # again: the gate may have taken its time
        if not_own is not None:
            return await self.finish(run, "skipped", reason=not_own, **gate)
        run = await self._update(run, prompt=prompt, **gate)
        _settle(decided, run)
        try:  # a fresh session: the previous run's agent (done, idle or stuck at a question) goes
            await self.sessions.delete(session)
        except NotFound:
            pass
        # The agent's id is recorded before it exists: however this run ends from here (a server
        # stop included), the session it leaves is recognisably the flow's own.
        terminal_id = new_terminal_id()
        run = await self._update(run, terminal_id=terminal_id)
        try:
            term = await self.terminals.create(
                CreateRequest(
                    agent_profile=spec.agent_profile,
                    provider=spec.provider,
                    session_name=session,
                    new_session=True,
                    engine=spec.engine,
                    wait_ready=True,
                    host=spec.host,
                    terminal_id=terminal_id,
                    flow_session=True,
                )
            )
        except CaoError as exc:  # nothing of the agent is left
            return await self.finish(run, "failed", reason=f"the agent could not start: {exc}", terminal_id=None)
        try:
            first = await self.orchestration.first_task(term, prompt)  # with its memory block (issue 29)
            reply = await self.orchestration.run_turn(term.id, first, spec.timeout)
        except CaoError as exc:
            return await self.finish(run, "failed", reason=str(exc))
        return await self.finish(run, "completed", reply=reply)

    async def finish(self, run: FlowRun, state: RunState, **values: Any) -> FlowRun:
        values.update(state=state, finished_at=stamp())
        final = await self.store.run(self.tables.update_run, run.id, values) or run
        self.bus.publish(FlowRunFinished(run.flow_name, run.id, state, final.reason, final.terminal_id))
        return final

    async def _update(self, run: FlowRun, **values: Any) -> FlowRun:
        return await self.store.run(self.tables.update_run, run.id, values) or run

    async def _not_own(self, flow_name: str, session: str) -> str | None:
        """Why the session holding the flow's name may not be replaced; None: it may (or none exists)."""
        try:
            _, terms = await self.sessions.get(session)
        except NotFound:
            return None
        own = await self.store.run(self.tables.newest_agent_run, flow_name)
        return not_own_reason(session, terms, own.terminal_id if own else None)

    async def _busy_terminal(self, session: str) -> str | None:
        for term in await self.terminals.list(session):
            if term.status == TerminalStatus.PROCESSING:
                return term.id
        return None

    def _gate_env(self, spec: FlowSpec, run: FlowRun) -> dict[str, str]:
        return {**self.environ, "CAO_FLOW_NAME": spec.name, "CAO_FLOW_RUN_ID": str(run.id)}


def _skip_reason(decision: GateDecision) -> str:
    said = decision.output.get("reason") if isinstance(decision.output, dict) else None
    return "the gate script returned execute: false" + (f" ({str(said)[:500]})" if said else "")


def _settle(decided: asyncio.Future[FlowRun], run: FlowRun) -> None:
    if not decided.done():
        decided.set_result(run)
