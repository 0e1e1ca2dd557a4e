"""The status monitor: terminal facts in, `terminal.{id}.status` out (seed 003), published the
moment a status changes. It alone asks a provider what a screen, a hook or a title the CLI set
means. Every terminal has its own queue and worker, so one agent printing a flood delays nobody else.

Turns: when cao submits input (`InputSubmitted`), the screen still shows the
previous turn. The monitor only accepts a ready reading for the new turn after
it has seen the typed text in the composer or a busy/waiting/error state, so a
stale "completed" is never mistaken for the new answer; the first accepted
reading is published even when its value equals the old one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import pyte

from ...bus import EventBus
from ...events import (
    ComposerChanged,
    EnterPressed,
    Event,
    HookReceived,
    InputSubmitted,
    McpListed,
    ScreenSnapshot,
    StatusChanged,
    TerminalExited,
    TerminalOutput,
    TerminalRemoved,
    TerminalResized,
    TerminalUnreachable,
)
from ...models import TerminalStatus
from ...providers.base import Provider
from ...store import Store
from ...tasks import TaskGroup
from .screen import EmulatedScreen, render, upper_rows
from .signals import CliSignals, HeldCompletion
from .view import TerminalView
from .watched import COMPOSER_SEEN, SENT, SETTLED, WatchedTerminal
from .writer import StatusWriter

log = logging.getLogger(__name__)

_SIGNAL_DECIDED = (TerminalStatus.PROCESSING, TerminalStatus.COMPLETED, TerminalStatus.IDLE)
# The status reason while a ready agent's CLI has not yet listed cao's tools on cao's MCP endpoint.
TOOLS_PENDING = "its CLI has not yet listed cao's tools on cao's MCP endpoint (/mcp)"


class StatusMonitor(CliSignals):
    def __init__(
        self, bus: EventBus, store: Store, tasks: TaskGroup, request_snapshot: Callable[[str], bool] | None = None
    ):
        self.bus = bus
        self.store = store
        self.tasks = tasks
        self._terms: dict[str, WatchedTerminal] = {}
        # Asks the output source for a ScreenSnapshot, which arrives in stream order
        # (the backend's request_snapshot).
        self.request_snapshot = request_snapshot
        self._writer = StatusWriter(store, tasks)
        # terminal id → a signal's completion waiting for the screen
        self._held: dict[str, HeldCompletion] = {}
        self._held_serial = 0

    # --- registration -----------------------------------------------------------
    def watch(
        self,
        terminal_id: str,
        provider: Provider,
        width: int = 220,
        height: int = 50,
        initial: TerminalStatus = TerminalStatus.UNKNOWN,
        awaiting_tools: bool = False,
    ) -> None:
        """`awaiting_tools`: the agent is ready only once its CLI has listed cao's tools."""
        self.forget(terminal_id)
        screen = EmulatedScreen(width, height)
        term = WatchedTerminal(
            terminal_id,
            provider,
            screen,
            pyte.ByteStream(screen),
            self.request_snapshot,
            status=initial,
            listings_pending=frozenset(provider.mcp_ready_after) if awaiting_tools else frozenset(),
        )
        self._terms[terminal_id] = term
        term.worker = self.tasks.spawn(self._work(terminal_id, term), f"status:{terminal_id}")

    def forget(self, terminal_id: str) -> None:
        term = self._terms.pop(terminal_id, None)
        self._held.pop(terminal_id, None)
        if term is not None:
            term.forget()

    async def stop(self) -> None:
        workers = [t.worker for t in self._terms.values() if t.worker is not None]
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        await self._writer.stop()

    def resync(self, terminal_id: str, lost: bool = False) -> None:
        """Our copy of the screen may be stale (drops, resize, restart): re-read it from tmux.
        `lost`: output never reached the emulator."""
        term = self._terms.get(terminal_id)
        if term is not None:
            term.resync(lost)

    # --- queries ----------------------------------------------------------------
    def stats(self) -> dict[str, dict]:
        """Per terminal: output waiting to be emulated, output skipped in favour of tmux
        snapshots (floods), snapshots applied. Served by /diagnostics."""
        return {tid: t.stats() for tid, t in self._terms.items()}

    def view(self, terminal_id: str) -> TerminalView | None:
        """The one read model of a terminal; None when it is not watched (deleted, gone)."""
        term = self._terms.get(terminal_id)
        if term is None:
            return None
        if term.dirty:  # output arrived since the screen was last read: read it as it is now
            term.rendered = render(term.screen)
        return TerminalView(
            term.status,
            term.status_source,
            term.reason,
            term.turn,
            term.phase == SETTLED,
            term.exited,
            term.provider,
            term.rendered,
            term.composer_has_text,
            term.hook_reply,
            term.status_since,
            term.composer_rows,
            term.known if term.known.lines else term.rendered,
        )

    # --- consumers (registered in bootstrap) ------------------------------------
    def handle(self, event: Event) -> None:
        """One subscription for all terminal facts. It only routes each fact to its
        terminal's queue (cheap, so the bus never backs up); the terminal's worker
        applies them in order, so input and output stay in order."""
        terminal_id = getattr(event, "terminal_id", None)
        term = self._terms.get(terminal_id) if terminal_id is not None else None
        if term is None:
            return
        if isinstance(event, TerminalRemoved):
            self.forget(event.terminal_id)
            return
        if isinstance(
            event,
            (
                TerminalOutput,
                InputSubmitted,
                EnterPressed,
                TerminalExited,
                TerminalResized,
                ScreenSnapshot,
                HookReceived,
                TerminalUnreachable,
                McpListed,
            ),
        ):
            term.queue.append(event)
            if isinstance(event, TerminalOutput):
                term.queued_output += len(event.data)
            term.wake.set()

    def on_dropped(self, event: Event) -> None:
        """Output was dropped under back-pressure: this screen is no longer exact."""
        if isinstance(event, TerminalOutput):
            self.resync(event.terminal_id, lost=True)

    # --- the per-terminal worker ------------------------------------------------
    async def _work(self, terminal_id: str, term: WatchedTerminal) -> None:
        while True:
            if not term.queue:
                if term.dirty:
                    await self._guarded(terminal_id, self._evaluate(terminal_id), "evaluate")
                    continue
                term.wake.clear()
                await term.wake.wait()
                continue
            event = term.queue.popleft()
            if isinstance(event, TerminalOutput):
                term.queued_output -= len(event.data)
                await self._guarded(terminal_id, term.feed_output(event.data), event.topic)
            else:
                if term.dirty and not isinstance(event, (ScreenSnapshot, TerminalResized)):
                    # Judge the screen as it was before this fact (e.g. the end of a turn
                    # before the input that starts the next one).
                    await self._guarded(terminal_id, self._evaluate(terminal_id), "evaluate")
                await self._guarded(terminal_id, self._apply(terminal_id, term, event), event.topic)
            if term.screen.new_titles:
                await self._guarded(terminal_id, self._on_titles(terminal_id, term), "title")

    async def _guarded(self, terminal_id: str, step, what: str) -> None:
        """Run one step of a worker; a failure is recorded where /diagnostics shows it and
        the worker goes on with the next fact."""
        try:
            await step
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("status monitor: %s of %s failed", what, terminal_id)
            self.bus.record_failure("status-monitor", f"terminal.{terminal_id}", exc)

    async def _apply(self, terminal_id: str, term: WatchedTerminal, event: Event) -> None:
        if isinstance(event, InputSubmitted):
            await self.on_input(event)
        elif isinstance(event, EnterPressed):
            self.on_enter(event)
        elif isinstance(event, TerminalExited):
            await self.on_exited(event)
        elif isinstance(event, TerminalResized):
            self.on_resized(event)
        elif isinstance(event, ScreenSnapshot):
            self.on_snapshot(event)
        elif isinstance(event, HookReceived):
            await self.on_hook(event.terminal_id, event.event, event.payload)
        elif isinstance(event, TerminalUnreachable):
            await self.on_unreachable(event)
        elif isinstance(event, McpListed):
            await self.on_mcp_listed(event.terminal_id, event.method)

    async def on_mcp_listed(self, terminal_id: str, method: str) -> None:
        """The CLI listed one of what it lists at start; once it has all, it has cao's tools and
        the ready reading it was held at goes out."""
        term = self._terms.get(terminal_id)
        if term is None or method not in term.listings_pending:
            return
        term.listings_pending = term.listings_pending - {method}
        if term.listings_pending:
            return
        held, term.held_ready = term.held_ready, None
        if held is not None and not term.exited:
            status, source, reason = held
            await self._publish(terminal_id, term, status, source, reason, force=True)

    async def on_unreachable(self, event: TerminalUnreachable) -> None:
        """Its host dropped: nothing is known until the connection is back; then the screen,
        re-read from tmux, decides once even where hooks normally do (hooks sent meanwhile
        could not arrive)."""
        term = self._terms.get(event.terminal_id)
        if term is None or term.exited:
            return
        term.reread = True
        await self._publish(event.terminal_id, term, TerminalStatus.UNKNOWN, "host", event.reason)

    def on_snapshot(self, event: ScreenSnapshot) -> None:
        term = self._terms.get(event.terminal_id)
        if term is not None:
            term.apply_snapshot(event.text, (event.cursor_x, event.cursor_y), event.title)

    def on_resized(self, event: TerminalResized) -> None:
        """Keep the emulator's geometry equal to the pane's, then re-read the screen."""
        term = self._terms.get(event.terminal_id)
        if term is None or (term.screen.columns, term.screen.lines) == (event.width, event.height):
            return
        term.screen.resize(event.height, event.width)
        self.resync(event.terminal_id)

    async def on_input(self, event: Event) -> None:
        assert isinstance(event, InputSubmitted)
        term = self._terms.get(event.terminal_id)
        held = self._held.pop(event.terminal_id, None)  # a new turn: the previous one's end is moot
        if term is not None:
            term.hook_reply = None  # a new turn: the last hook's answer is the previous one's
        if term is not None and term.exited:
            # Typed into a pane whose agent already died (the death was seen first):
            # that turn can only end in error, and nothing on screen will say so.
            term.turn = event.turn
            term.phase = SETTLED
            await self._publish(event.terminal_id, term, TerminalStatus.ERROR, "pane", term.reason, force=True)
        elif term is not None:
            term.turn = event.turn
            term.phase = SENT
            term.awaiting_enter = event.enter_follows
            term.status_at_submit = term.status
            term.upper_at_submit = upper_rows(term.screen)
            # The signals ended the last turn but its busy screen is still up (input sent the
            # moment a turn completed): that screen must not pass for this turn's start.
            term.busy_at_submit = (
                term.signals_seen
                and (held is not None or term.status in (TerminalStatus.COMPLETED, TerminalStatus.IDLE))
                and self._reads_busy(term)
            )

    def on_enter(self, event: EnterPressed) -> None:
        term = self._terms.get(event.terminal_id)
        if term is not None:
            term.enter_pressed(event.turn)

    async def on_exited(self, event: Event) -> None:
        assert isinstance(event, TerminalExited)
        term = self._terms.get(event.terminal_id)
        if term is None or term.exited:
            return
        term.exited = True
        if event.reason:
            reason = event.reason
        elif event.window_gone:
            reason = "the agent's tmux window was closed"
        elif event.exit_code is None:
            # tmux 3.3a sometimes marks a pane dead and never learns its exit status (seen for
            # processes that exit at once, under load; asking tmux again later does not help).
            reason = "the agent process exited (tmux did not learn its exit code)"
        else:
            reason = f"the agent process exited (code {event.exit_code})"
        await self._publish(event.terminal_id, term, TerminalStatus.ERROR, "pane", reason)

    # --- evaluation -------------------------------------------------------------
    async def _evaluate(self, terminal_id: str) -> None:
        term = self._terms.get(terminal_id)
        if term is None:
            return
        term.dirty = False
        if term.exited:
            return
        term.rendered = render(term.screen)
        try:
            reading = term.provider.read_status(term.rendered)
        except Exception:
            log.exception("provider %s read_status failed", term.provider.name)
            return
        composer = (reading.composer_has_text, reading.composer_rows)
        # A screen that reads as nothing known says nothing about the composer either: it is
        # most often a frame caught mid-redraw (Gemini erases its whole frame before drawing the
        # next one, and a loaded machine hands the two halves over apart). Read as "empty", it
        # told the input service that an Enter was taken while the text still sat there.
        if reading.status != TerminalStatus.UNKNOWN:
            term.known = term.rendered
            if (term.composer_has_text, term.composer_rows) != composer:
                term.composer_has_text, term.composer_rows = composer
                self.bus.publish(ComposerChanged(terminal_id, *composer))
        new = reading.status
        if term.reread:
            # Back from an unreachable host: the screen as it is now is the status.
            if new == TerminalStatus.UNKNOWN:
                return
            term.reread = False
            term.phase = SETTLED
            await self._publish(terminal_id, term, new, "screen", reading.reason, force=True)
            return
        held = self._held.get(terminal_id)
        if held is not None and new not in (TerminalStatus.PROCESSING, TerminalStatus.UNKNOWN):
            if held.yields_to_screen and (new == TerminalStatus.ERROR or reading.definite):
                del self._held[terminal_id]  # how the turn ended is on the screen: it decides below
            else:
                await self._release_held(terminal_id, held.serial)  # the screen caught up with the signal
        if (
            term.signals_seen
            and term.phase == SETTLED
            and new in _SIGNAL_DECIDED
            and not reading.definite
            and not (
                new == TerminalStatus.PROCESSING
                and term.status_source == "screen"
                and term.status in (TerminalStatus.WAITING_USER_ANSWER, TerminalStatus.ERROR)
            )
        ):
            # Busy/done/idle come from the CLI's own signals; the screen may only end a
            # dialog or an error that it detected itself.
            return
        if term.phase != SETTLED:
            if new == TerminalStatus.UNKNOWN:
                return
            if new.is_ready and term.awaiting_enter:
                # Pasted, Enter not pressed yet: a ready screen is not this turn's doing (Gemini
                # redraws its start-up screen for seconds after it first takes input).
                if reading.composer_has_text:
                    term.phase = COMPOSER_SEEN
                return
            if (
                new == TerminalStatus.PROCESSING
                and term.signals_seen
                and not reading.definite
                and (term.busy_at_submit or reading.composer_has_text)
            ):
                # Busy, but not with this input: the previous turn's screen is still up, or the
                # text still waits in the composer (the CLI is settling the last turn; an Enter
                # now may be dropped). The CLI's own signal says when this turn starts, and until
                # then the verified submit still sees no effect of its Enter.
                return
            if (
                new.is_ready
                and term.signals_seen
                and not reading.definite
                and term.status_at_submit != TerminalStatus.WAITING_USER_ANSWER
            ):
                # A CLI that reports its turns (hooks, title) says itself when the new one starts;
                # until then a ready screen is the previous answer with the new echo above.
                return
            if new.is_ready:
                if reading.composer_has_text:
                    term.phase = COMPOSER_SEEN
                    return
                if term.phase == SENT and not term.new_turn_on_screen():
                    return  # still the previous turn's screen
            term.phase = SETTLED
            await self._publish(terminal_id, term, new, "screen", reading.reason, force=True)
            return
        if new == TerminalStatus.UNKNOWN and term.status != TerminalStatus.UNKNOWN:
            return  # unknown never overwrites a known status
        if term.status == TerminalStatus.COMPLETED and new == TerminalStatus.IDLE and not reading.composer_has_text:
            return  # a finished turn stays completed until new input (typed text counts)
        if new != term.status or reading.reason != term.reason:
            await self._publish(terminal_id, term, new, "screen", reading.reason)

    async def _publish(
        self,
        terminal_id: str,
        term: WatchedTerminal,
        status: TerminalStatus,
        source: str,
        reason: str,
        force: bool = False,
    ) -> None:
        if term.listings_pending and (status.is_ready or status == TerminalStatus.UNKNOWN):
            # A ready reading waits for the tools; an unknown one (a redraw) leaves a held one be.
            if status.is_ready:
                term.held_ready = (status, source, reason)
            status, source, reason = TerminalStatus.UNKNOWN, "tools", TOOLS_PENDING
        elif term.listings_pending:
            # A later reading that is not ready (a dialog, a turn) outdates the held one: it
            # must not be forced out over the dialog once the tools are listed.
            term.held_ready = None
        previous = term.status
        if status == previous and reason == term.reason and not force:
            return
        if status != previous:
            term.status_since = time.time()
        term.status, term.reason, term.status_source = status, reason, source
        self.bus.publish(StatusChanged(terminal_id, status, previous, source, reason, term.turn))
        self._writer.put(terminal_id, status, source, reason)

    async def set_external(self, terminal_id: str, status: TerminalStatus, source: str, reason: str = "") -> None:
        """A status decided outside the screen (a restart, a start-up dialog answered)."""
        term = self._terms.get(terminal_id)
        if term is not None:
            force = term.phase != SETTLED and status != TerminalStatus.IDLE
            if force:
                term.phase = SETTLED  # a busy/done/waiting signal confirms the pending turn
            await self._publish(terminal_id, term, status, source, reason, force=force)
