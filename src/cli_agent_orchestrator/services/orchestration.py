"""Orchestration: one agent step (create → wait ready → task → wait done → reply →
tear down), the substrate of MCP `handoff` and of workflow steps; and the
deferred first task of an `assign`ed worker.

Every wait here is driven by status events with a deadline. A failed or timed
out step tears its worker down unless the caller asked to keep it; a worker that
stops at a question is kept for a grace period instead (worker_questions.py). A
handoff's worker is recorded before it exists, so a crash cannot orphan it (handoffs.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ..actor import acting_as
from ..bus import EventBus
from ..errors import CaoError, InvalidInput, WaitTimeout, WorkerAsks, WorkerError
from ..events import AssignFinished, AssignStarted, HandoffFinished, HandoffStarted
from ..models import OrchestrationType, Terminal, TerminalStatus, Worktree
from ..providers.registry import get_provider
from ..store.handoffs import HandoffRecord
from .handoffs import HandoffJobs
from .inbox import SYSTEM_SENDER, InboxService
from .status.monitor import StatusMonitor
from .terminals.service import TerminalService
from .terminals.spawn import CreateRequest, new_terminal_id
from .waiting import TerminalVanished, turn_finished, wait_for
from .worker_questions import QuestionWatch, how_to_answer, question_on_screen

log = logging.getLogger(__name__)
FORWARD_WAIT_S = 24 * 3600.0  # how long a worker without MCP may work on an assigned task


@dataclass
class StepRequest:
    provider: str | None
    agent: str
    prompt: str
    session_name: str | None = None
    teardown: bool = True
    timeout: float = 600.0
    working_directory: str | None = None
    caller_id: str | None = None
    allowed_tools: list[str] | None = None
    model: str | None = None
    env: dict[str, str] | None = None
    reuse_terminal_id: str | None = None  # run the turn in this ready terminal; never torn down
    use_worktree: bool = False  # the worker gets its own git worktree on a new branch
    engine: str | None = None  # Kiro CLI's agent engine (ignored for other CLIs)
    host: str | None = None  # a registered host's name, "local", or None (the placement policy)
    description: str | None = None  # the worker's description (services/terminals/labels.py)
    # Told the worker's id as soon as it exists (the workflow journal records it).
    on_terminal: Callable[[str], Awaitable[None]] | None = None
    # A workflow step: after a crash the workflow journal recovers its worker (workflows.recover()),
    # so it gets no handoff record. One owner for each worker's fate.
    journaled: bool = False
    # The handoff's id, chosen by its caller (a durable handoff names its job before it starts).
    job_id: str | None = None


@dataclass
class StepResult:
    terminal_id: str
    last_message: str
    status: str
    elapsed: float
    provider: str = ""
    worktree: Worktree | None = None  # the worker's worktree: its branch, and removed or kept
    host: str | None = None  # the registered host the worker ran on; None: this machine


class OrchestrationService:
    def __init__(
        self,
        bus: EventBus,
        monitor: StatusMonitor,
        terminals: TerminalService,
        inbox: InboxService,
        questions: QuestionWatch,
        jobs: HandoffJobs,
        spawn: Callable[[Coroutine[Any, Any, Any], str], object],
        memory_block: Callable[[Terminal | None, str], Awaitable[str]] | None = None,
    ):
        self.bus = bus
        self.monitor = monitor
        self.terminals = terminals
        self.inbox = inbox
        self.questions = questions
        self.jobs = jobs
        self.spawn = spawn  # background work that outlives the request (the task group's)
        # Memory (issue 29): a new agent's first task, with its `<cao-memory>` block in front.
        self.memory_block = memory_block

    async def first_task(self, term: Terminal | None, task: str) -> str:
        """The first message a new agent gets: `task`, after its memory block if it has one."""
        return await self.memory_block(term, task) if self.memory_block is not None else task

    async def run_step(self, req: StepRequest) -> StepResult:
        """One agent step, bracketed by HandoffStarted and HandoffFinished on the bus; what
        it causes (its worker's creation and removal) is credited to its caller."""
        handoff_id = req.job_id or uuid.uuid4().hex[:12]
        terminal_id: str | None = None
        ok, error = False, "cancelled"
        with acting_as(req.caller_id):
            self.bus.publish(HandoffStarted(handoff_id, req.agent, req.caller_id))
            try:
                result = await self._run_step(req, handoff_id)
                ok, error, terminal_id = True, "", result.terminal_id
                return result
            except Exception as exc:
                error, terminal_id = str(exc), getattr(exc, "terminal_id", None)
                raise
            finally:
                self.bus.publish(HandoffFinished(handoff_id, req.agent, req.caller_id, terminal_id, ok, error))

    async def recover(self, adopt: Callable[[HandoffRecord], None] | None = None) -> list[str]:
        """After a restart, once surviving terminals are adopted: a handoff whose worker still
        runs is given to `adopt` (its result is still delivered: handoff_results.py); the worker
        of every other handoff whose answer no caller can receive any more is torn down."""
        return await self.jobs.tear_down_orphans(adopt)

    async def _run_step(self, req: StepRequest, handoff_id: str) -> StepResult:
        if not req.prompt:
            raise InvalidInput("prompt must not be empty")
        if not (0 < req.timeout <= 86400):
            raise InvalidInput("timeout must be > 0 and at most 86400 seconds")
        started = time.monotonic()
        if req.reuse_terminal_id is not None:
            await self.terminals.get(req.reuse_terminal_id)  # 404 for an unknown id
            if req.on_terminal:
                await req.on_terminal(req.reuse_terminal_id)
            reply = await self.run_turn(req.reuse_terminal_id, req.prompt, req.timeout)
            return StepResult(req.reuse_terminal_id, reply, "completed", time.monotonic() - started)
        session = req.session_name
        new_session = session is None
        if session is None and req.caller_id is not None:
            caller = await self.terminals.get(req.caller_id)
            session, new_session = caller.session_name, False
        terminal_id = new_terminal_id()
        # A worker created for this call and torn down after it; None: no record (kept, or journaled).
        job = handoff_id if req.teardown and not req.journaled else None
        await self.jobs.open(job, req.caller_id, terminal_id, req.agent, req.timeout, durable=req.job_id is not None)
        try:
            term = await self.terminals.create(
                CreateRequest(
                    agent_profile=req.agent,
                    provider=req.provider,
                    session_name=session,
                    new_session=new_session,
                    working_directory=req.working_directory,
                    caller_id=req.caller_id,
                    model=req.model,
                    allowed_tools=req.allowed_tools,
                    wait_ready=True,
                    env=req.env,
                    use_worktree=req.use_worktree,
                    engine=req.engine,
                    host=req.host,
                    terminal_id=terminal_id,
                    description=req.description,
                )
            )
        except CaoError as exc:  # a worker that cannot start is removed by create itself
            await self.jobs.close(job, str(exc))
            raise
        keep = not req.teardown
        try:
            if req.on_terminal:
                await req.on_terminal(term.id)
            remaining = max(0.1, req.timeout - (time.monotonic() - started))
            reply = await self.run_turn(term.id, await self.first_task(term, req.prompt), remaining)
        except WorkerAsks:
            if not keep:  # kept for its caller to answer; removed after the grace period
                self.spawn(self._linger(job, term.id, req.caller_id, req.agent), f"linger:{term.id}")
                await self.jobs.asking(job, self.questions.grace_seconds)  # a no-op if the linger closed it
            raise
        except CaoError as exc:
            if not keep:
                await self._teardown(term.id)
                await self.jobs.close(job, str(exc))
            raise
        worktree = await self._teardown(term.id) if not keep else None
        await self.jobs.close(job)
        return StepResult(
            term.id, reply, "completed", time.monotonic() - started, term.provider, worktree or term.worktree, term.host
        )

    async def run_turn(self, terminal_id: str, prompt: str, timeout: float) -> str:
        """Send one task to a ready agent and return its reply."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        turn = await self.terminals.send_input(terminal_id, prompt)
        try:
            status = await wait_for(
                self.bus, self.monitor, terminal_id, turn_finished(turn), max(0.0, deadline - loop.time())
            )
        except TerminalVanished as gone:
            raise WorkerError(f"worker {terminal_id} was removed before it finished ({gone})", terminal_id) from None
        if status is None:
            raise WaitTimeout(f"worker {terminal_id} did not finish within {timeout:.0f}s", terminal_id)
        if status == TerminalStatus.ERROR:
            view = self.monitor.view(terminal_id)
            raise WorkerError(f"worker {terminal_id} reached error: {view.reason if view else 'unknown'}", terminal_id)
        if status == TerminalStatus.WAITING_USER_ANSWER:
            question = question_on_screen(self.monitor, terminal_id)
            grace = self.questions.grace_seconds
            raise WorkerAsks(
                f"worker {terminal_id} stopped at a question and is waiting for an answer. Its screen shows:\n"
                f"{question}\n{how_to_answer(terminal_id)}; its reply then comes to you as a message. "
                f"The worker is kept for {grace:.0f}s, then removed.",
                terminal_id,
                question,
                grace,
            )
        return await self.terminals.output(terminal_id, "last")

    async def _linger(self, job: str | None, terminal_id: str, caller_id: str | None, agent: str) -> None:
        # Cancelled with the server, this leaves the record open: the next start removes the worker.
        await self.jobs.close(job, await self.questions.linger(terminal_id, caller_id, agent))

    async def _teardown(self, terminal_id: str) -> Worktree | None:
        """Delete the worker; what became of its worktree, if it had one."""
        try:
            return await self.terminals.delete(terminal_id)
        except CaoError as exc:
            log.warning("teardown of %s: %s", terminal_id, exc)
            return None

    async def deliver_initial(self, terminal_id: str, message: str, kind: object | None) -> None:
        """Background part of a deferred create (assign): wait ready, then type the task.

        If the worker cannot start, it is removed and its caller is told by message.
        """
        term = await self.terminals.store.run(self.terminals.store.get_terminal, terminal_id)
        caller = term.caller_id if term else None
        assign = kind == OrchestrationType.ASSIGN
        agent = term.agent_profile if term else ""
        if assign:
            self.bus.publish(AssignStarted(terminal_id, caller, agent))
        # The memory block (issue 29) is made while the agent starts, not after.
        first = asyncio.ensure_future(self.first_task(term, message))
        try:
            await self.terminals.wait_until_ready(terminal_id)
            if caller and term is not None:  # a question the worker stops at reaches its caller
                self.spawn(self.questions.follow(terminal_id, caller, term.agent_profile), f"questions:{terminal_id}")
            turn = await self.terminals.send_input(terminal_id, await first)
            if assign:
                self.bus.publish(AssignFinished(terminal_id, caller, agent, True))
            if assign and caller and term is not None and get_provider(term.provider).mcp == "none":
                self.spawn(self._forward_reply(terminal_id, caller, turn), f"forward:{terminal_id}")
        except CaoError as exc:
            if assign:
                self.bus.publish(AssignFinished(terminal_id, caller, agent, False, str(exc)))
            log.warning("deferred start of %s failed: %s", terminal_id, exc)
            if caller:
                note = f"[cao] The worker {terminal_id} you assigned could not start and was removed: {exc}"
                try:
                    await self.inbox.post(caller, SYSTEM_SENDER, note)
                except CaoError:
                    log.warning("could not tell caller %s about %s", caller, terminal_id)
        finally:
            first.cancel()  # a no-op once it was typed; never left running when the agent did not start

    async def _forward_reply(self, terminal_id: str, caller: str, turn: int) -> None:
        """An assigned worker whose CLI has no MCP cannot `send_message` its result: once its task's
        turn has ended (after any question it stopped at was answered), cao posts its reply to the
        caller's inbox in its name, as the worker would have."""

        def ended(status: TerminalStatus, current: int, settled: bool) -> bool:
            return current >= turn and settled and status in (TerminalStatus.COMPLETED, TerminalStatus.ERROR)

        try:
            status = await wait_for(self.bus, self.monitor, terminal_id, ended, FORWARD_WAIT_S)
            if status == TerminalStatus.COMPLETED:
                text = await self.terminals.output(terminal_id, "last")
            elif status == TerminalStatus.ERROR:
                view = self.monitor.view(terminal_id)
                text = f"[cao] The worker ended its task in error: {view.reason if view else 'unknown'}"
            else:
                return  # still busy after FORWARD_WAIT_S: nothing truthful to forward
            await self.inbox.post(caller, terminal_id, text or "[cao] The worker finished with an empty reply.")
        except TerminalVanished:
            return  # removed before it finished: its caller removed it, or sees it gone
        except CaoError as exc:
            log.warning("could not forward the reply of %s to %s: %s", terminal_id, caller, exc)
