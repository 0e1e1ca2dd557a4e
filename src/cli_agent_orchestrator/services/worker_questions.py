"""A worker that asks anyway: an agent started by another (handoff, assign) that stops at a
question nobody in cao can answer is reported to its caller — which worker, the question on
its screen, how to answer it (`answer_user_prompt`) — instead of being torn down or left hanging.

Invariants: each question is reported once (the handoff's own result reports the first of a
handed-off worker; the caller's inbox gets every other); a handed-off worker that asked is kept
for the grace period, and its reply, if one comes, reaches the caller's inbox before it is
removed (a restart ends the grace period: the next start removes it, handoffs.py). Every wait
here is driven by status events.
"""

from __future__ import annotations

import asyncio
import logging
import re

from ..bus import EventBus
from ..errors import CaoError
from ..models import TerminalStatus
from .inbox import SYSTEM_SENDER, InboxService
from .status.monitor import StatusMonitor
from .terminals.service import TerminalService
from .waiting import TerminalVanished, wait_for

log = logging.getLogger(__name__)

QUESTION_ROWS = 15
MAX_QUESTION_CHARS = 2000
FOREVER = 30 * 86400.0  # an assigned worker is followed for as long as it lives
_DECORATION = re.compile(r"^[\s─━═│┃╭╮╰╯┌┐└┘├┤┬┴┼▔▁-]*$")
WAITING = TerminalStatus.WAITING_USER_ANSWER


def question_on_screen(monitor: StatusMonitor, terminal_id: str) -> str:
    """The bottom of the worker's screen, where a CLI draws its question or menu (rules and
    box edges left out)."""
    view = monitor.view(terminal_id)
    if view is None:
        return "(the worker's screen is not known)"
    screen = view.known_screen or view.screen  # (not a frame caught mid-redraw)
    rows = [row.rstrip() for row in screen.lines if row.strip() and not _DECORATION.match(row)]
    text = "\n".join(rows[-QUESTION_ROWS:]).strip()
    if len(text) > MAX_QUESTION_CHARS:
        text = "…" + text[-MAX_QUESTION_CHARS:]
    return text or view.reason or "(the screen shows no text)"


def how_to_answer(terminal_id: str) -> str:
    return (
        f"Answer it with answer_user_prompt(terminal_id='{terminal_id}', answer='...') — the text is typed "
        "into the worker as a user would (a menu takes the option's number or key)"
    )


def _not_waiting(status: TerminalStatus, _turn: int, _settled: bool) -> bool:
    return status != WAITING


def _ended_or_asks(status: TerminalStatus, _turn: int, settled: bool) -> bool:
    return settled and status in (TerminalStatus.COMPLETED, TerminalStatus.ERROR, TerminalStatus.IDLE, WAITING)


def _asks(status: TerminalStatus, _turn: int, settled: bool) -> bool:
    return settled and status == WAITING


class QuestionWatch:
    """Follows workers that asked (or may ask) on behalf of their callers."""

    def __init__(
        self,
        bus: EventBus,
        monitor: StatusMonitor,
        terminals: TerminalService,
        inbox: InboxService,
        grace_seconds: float,
    ):
        self.bus = bus
        self.monitor = monitor
        self.terminals = terminals
        self.inbox = inbox
        self.grace_seconds = grace_seconds

    async def _tell(self, caller_id: str | None, text: str) -> None:
        if caller_id is None:
            return
        try:
            await self.inbox.post(caller_id, SYSTEM_SENDER, text)
        except CaoError as exc:
            log.warning("could not tell %s: %s", caller_id, exc)

    def _question_note(self, terminal_id: str, agent: str, after: str) -> str:
        question = question_on_screen(self.monitor, terminal_id)
        return (
            f"[cao] Worker {terminal_id} ({agent}) {after} is waiting for an answer. Its screen shows:\n"
            f"{question}\n{how_to_answer(terminal_id)}."
        )

    async def linger(self, terminal_id: str, caller_id: str | None, agent: str) -> str | None:
        """A handed-off worker whose question the handoff result reported: keep it for the grace
        period; once answered, its reply (or the next question) goes to the caller's inbox. It
        is removed when it finishes or the grace period ends. Returns None when its reply went
        to the caller, else why none did (the handoff's record keeps it)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.grace_seconds
        why: str | None = None
        try:
            while True:
                answered = await wait_for(self.bus, self.monitor, terminal_id, _not_waiting, deadline - loop.time())
                if answered is None:
                    why = f"still waiting for an answer after {self.grace_seconds:.0f}s"
                    await self._tell(caller_id, f"[cao] Worker {terminal_id} ({agent}) was {why} and has been removed.")
                    break
                ended = await wait_for(self.bus, self.monitor, terminal_id, _ended_or_asks, deadline - loop.time())
                if ended is None:
                    why = f"did not finish within the {self.grace_seconds:.0f}s grace period after your answer"
                    await self._tell(caller_id, f"[cao] Worker {terminal_id} ({agent}) {why} and has been removed.")
                    break
                if ended == WAITING:
                    await self._tell(caller_id, self._question_note(terminal_id, agent, "(your handoff)"))
                    continue
                await self._tell(caller_id, await self._outcome(terminal_id, agent, ended))
                why = None if ended == TerminalStatus.COMPLETED else f"ended without a reply ({ended.value})"
                break
        except TerminalVanished:
            return "removed before it finished"  # by someone else: nothing left to keep
        await self._remove(terminal_id)
        return why

    async def _outcome(self, terminal_id: str, agent: str, status: TerminalStatus) -> str:
        if status == TerminalStatus.COMPLETED:
            try:
                reply = await self.terminals.output(terminal_id, "last")
            except CaoError as exc:
                reply = f"(its reply could not be read: {exc})"
            return f"[cao] Result of your handoff to {agent} (worker {terminal_id}), after your answer:\n{reply}"
        view = self.monitor.view(terminal_id)
        why = (view.reason if view else "") or status.value
        return f"[cao] Your handoff to {agent} (worker {terminal_id}) ended without a reply after your answer: {why}"

    async def _remove(self, terminal_id: str) -> None:
        try:
            await self.terminals.delete(terminal_id)
        except CaoError as exc:
            log.warning("removing %s after its grace period: %s", terminal_id, exc)

    async def follow(self, terminal_id: str, caller_id: str, agent: str) -> None:
        """An assigned worker, for as long as it lives: each time it stops at a question, its
        caller's inbox is told once."""
        try:
            while True:
                if await wait_for(self.bus, self.monitor, terminal_id, _asks, FOREVER) is None:
                    continue
                await self._tell(caller_id, self._question_note(terminal_id, agent, "(your assign)"))
                while await wait_for(self.bus, self.monitor, terminal_id, _not_waiting, FOREVER) is None:
                    pass
        except TerminalVanished:
            return
