"""The CLI's own signals, as the status monitor reads them: a hook the CLI fired (`cao-hook`,
an HTTP hook) and the terminal title it set (OSC 0/2). Once a terminal has sent one, its
busy/done/idle come from its signals; the screen still decides dialogs and errors. A signal's
"turn done" is held while the screen still reads busy (the CLIs fire it before they draw the
end), released by the first screen that does not, or by HELD_COMPLETION_LIMIT_S.

A mixin of StatusMonitor (monitor.py): the one owner of what a screen, a hook or a title means.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...models import TerminalStatus
from ...providers.base import StatusReading
from .screen import render
from .watched import SETTLED, WatchedTerminal

if TYPE_CHECKING:
    from ...tasks import TaskGroup

log = logging.getLogger(__name__)

# A signal's "turn done" waits while the screen still reads busy: the CLIs fire their turn-end hook
# before they draw the end (Claude Code's Stop comes before its last draw), and a hook that reports
# in a few ms gets here first. "completed" then means the CLI shows it. The first screen reading
# that is not busy releases it; this bound is the safety net for a screen that never stops
# reading busy.
HELD_COMPLETION_LIMIT_S = 2.0


@dataclass(frozen=True)
class HeldCompletion:
    """A signal's completion, waiting for the screen to stop reading busy."""

    serial: int
    source: str  # the signal, as status_source will say it
    reading: StatusReading
    yields_to_screen: bool  # an error or a cancelled turn the screen then shows decides instead


class CliSignals:
    """Hooks and titles; needs the monitor's terminals, its held completions and `set_external`."""

    _terms: dict[str, WatchedTerminal]
    _held: dict[str, HeldCompletion]
    _held_serial: int
    tasks: TaskGroup

    async def set_external(self, terminal_id: str, status: TerminalStatus, source: str, reason: str = "") -> None:
        raise NotImplementedError  # StatusMonitor's

    async def on_hook(self, terminal_id: str, event: str, payload: dict) -> TerminalStatus | None:
        """A CLI hook arrived (`cao-hook`): the provider says what it means."""
        term = self._terms.get(terminal_id)
        if term is None or term.exited:
            return None
        reading = term.provider.status_from_hook(event, payload, term.last_hook)
        if reading is None:
            return None
        term.last_hook = event
        reply = term.provider.reply_from_hook(event, payload)
        if reply is None and reading.status == TerminalStatus.COMPLETED and term.provider.hook_reply_wait_s > 0:
            reply = await self._late_hook_reply(term, event, payload)
        return await self._signal(terminal_id, term, f"hook:{event}", reading, reply)

    @staticmethod
    async def _late_hook_reply(term: WatchedTerminal, event: str, payload: dict) -> str | None:
        """The answer the hook names, once the CLI has written it (its file is written by another
        process that sends no signal when done: it is read again, briefly, on this terminal's
        worker only)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + term.provider.hook_reply_wait_s
        while loop.time() < deadline:
            await asyncio.sleep(0.1)
            reply = await asyncio.to_thread(term.provider.reply_from_hook, event, payload)
            if reply is not None:
                return reply
        return None

    async def _on_titles(self, terminal_id: str, term: WatchedTerminal) -> None:
        """The CLI set its title (in the output just emulated, or as a snapshot found it): the
        provider says what each new one means, in order."""
        for title in term.screen.take_titles():
            if title == term.title or term.exited:
                continue
            previous, term.title = term.title, title
            reading = term.provider.status_from_title(title, previous)
            if reading is not None:
                # A title says only that a turn is done, not how: the screen's error or
                # cancelled turn decides that (yields_to_screen).
                await self._signal(terminal_id, term, "title", reading, yields_to_screen=True)

    async def _signal(
        self,
        terminal_id: str,
        term: WatchedTerminal,
        source: str,
        reading: StatusReading,
        reply: str | None = None,
        yields_to_screen: bool = False,
    ) -> TerminalStatus | None:
        """The CLI's own signal (a hook, its title) says the status; from now on it decides
        busy/done/idle. A completion waits while the screen still reads busy."""
        term.signals_seen = True
        if term.phase != SETTLED and reading.status in (TerminalStatus.COMPLETED, TerminalStatus.IDLE):
            # A turn is pending and this is the end of the previous one (a message queued
            # during a turn): only a busy signal can settle the new turn.
            return None
        if reply is not None:
            term.hook_reply = reply
        self._held.pop(terminal_id, None)  # a later signal supersedes a held one
        if reading.status == TerminalStatus.COMPLETED:
            shown = self._screen_reading(term)
            if shown is not None and shown.status == TerminalStatus.PROCESSING:
                self._held_serial += 1
                self._held[terminal_id] = HeldCompletion(self._held_serial, source, reading, yields_to_screen)
                self.tasks.spawn(self._release_held_late(terminal_id, self._held_serial), f"status:{terminal_id}:held")
                return reading.status
            if yields_to_screen and shown is not None and (shown.status == TerminalStatus.ERROR or shown.definite):
                await self.set_external(terminal_id, shown.status, "screen", shown.reason)
                return shown.status
        await self.set_external(terminal_id, reading.status, source, reading.reason)
        return reading.status

    @staticmethod
    def _screen_reading(term: WatchedTerminal) -> StatusReading | None:
        try:
            return term.provider.read_status(render(term.screen))
        except Exception:
            log.exception("provider %s read_status failed", term.provider.name)
            return None

    @classmethod
    def _reads_busy(cls, term: WatchedTerminal) -> bool:
        shown = cls._screen_reading(term)
        return shown is not None and shown.status == TerminalStatus.PROCESSING

    async def _release_held(self, terminal_id: str, serial: int) -> None:
        held = self._held.get(terminal_id)
        if held is None or held.serial != serial:
            return  # released already, or superseded by a later signal or a new turn
        del self._held[terminal_id]
        await self.set_external(terminal_id, held.reading.status, held.source, held.reading.reason)

    async def _release_held_late(self, terminal_id: str, serial: int) -> None:
        """The safety net: a held completion goes out after HELD_COMPLETION_LIMIT_S at the latest."""
        await asyncio.sleep(HELD_COMPLETION_LIMIT_S)
        await self._release_held(terminal_id, serial)
