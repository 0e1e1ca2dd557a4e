"""Status monitor: terminal output in, `terminal.{id}.status` out (seed 003).

Each terminal's output is fed to a terminal emulator (pyte), so providers read
the screen a human would see rather than raw escape bytes. The provider's
`read_status` runs at most once per event-loop turn per terminal (bursts of
output are coalesced), and a status is published only when it changes.

Turns: when cao submits input (`InputSubmitted`), the screen still shows the
previous turn. The monitor only accepts a ready reading for the new turn after
it has seen the typed text in the composer or a busy/waiting/error state, so a
stale "completed" is never mistaken for the new answer; the first accepted
reading is published even when its value equals the old one.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Callable

import pyte

from ..bus import EventBus
from ..events import (Event, HookReceived, InputSubmitted, ScreenSnapshot, StatusChanged, TerminalExited, TerminalOutput,
                      TerminalRemoved, TerminalResized)
from ..models import TerminalStatus
from ..providers.base import Provider, Screen
from ..store import Store

log = logging.getLogger(__name__)

_HOOK_DECIDED = (TerminalStatus.PROCESSING, TerminalStatus.COMPLETED, TerminalStatus.IDLE)

# Turn phases after InputSubmitted.
_SETTLED, _SENT, _COMPOSER_SEEN = "settled", "sent", "composer_seen"


@dataclass
class _Watched:
    provider: Provider
    screen: pyte.Screen
    stream: pyte.ByteStream
    status: TerminalStatus = TerminalStatus.UNKNOWN
    status_source: str = ""
    reason: str = ""
    turn: int = 0
    phase: str = _SETTLED
    dirty: bool = False
    exited: bool = False
    composer_has_text: bool = False
    status_at_submit: TerminalStatus = TerminalStatus.UNKNOWN
    upper_at_submit: tuple[str, ...] = ()
    hooks_seen: bool = False  # the CLI reports its own turns; the screen then only sees dialogs and errors
    hook_reply: str | None = None  # the current turn's answer as the CLI's turn-end hook gave it


class StatusMonitor:
    def __init__(self, bus: EventBus, store: Store):
        self.bus = bus
        self.store = store
        self._terms: dict[str, _Watched] = {}
        # Set by the composition root: asks the output source for a ScreenSnapshot,
        # which arrives in stream order (backend.request_snapshot).
        self.request_snapshot: Callable[[str], bool] | None = None
        self._snapshot_pending: set[str] = set()
        self._resync_after: set[str] = set()

    # --- registration -----------------------------------------------------------
    def watch(self, terminal_id: str, provider: Provider, width: int = 220, height: int = 50,
              initial: TerminalStatus = TerminalStatus.UNKNOWN) -> None:
        screen = pyte.Screen(width, height)
        self._terms[terminal_id] = _Watched(provider, screen, pyte.ByteStream(screen), status=initial)

    def forget(self, terminal_id: str) -> None:
        self._terms.pop(terminal_id, None)

    def resync(self, terminal_id: str) -> None:
        """Our copy of the screen may be stale (drops, resize, restart): re-read it from tmux."""
        if terminal_id not in self._terms or self.request_snapshot is None:
            return
        if terminal_id in self._snapshot_pending:
            # Output lost after the pending snapshot was taken is not in it: take another.
            self._resync_after.add(terminal_id)
        elif self.request_snapshot(terminal_id):
            self._snapshot_pending.add(terminal_id)

    # --- queries ----------------------------------------------------------------
    def status(self, terminal_id: str) -> TerminalStatus | None:
        term = self._terms.get(terminal_id)
        return term.status if term else None

    def snapshot(self, terminal_id: str) -> tuple[TerminalStatus, int, bool, str] | None:
        """(status, turn, turn settled?, reason)"""
        term = self._terms.get(terminal_id)
        if term is None:
            return None
        return term.status, term.turn, term.phase == _SETTLED, term.reason

    def screen(self, terminal_id: str) -> Screen | None:
        term = self._terms.get(terminal_id)
        return _render(term.screen) if term else None

    def provider_of(self, terminal_id: str) -> Provider | None:
        term = self._terms.get(terminal_id)
        return term.provider if term else None

    def hook_reply(self, terminal_id: str) -> str | None:
        """The last turn's answer as the CLI's own hook reported it, if it did."""
        term = self._terms.get(terminal_id)
        return term.hook_reply if term is not None else None

    def exited(self, terminal_id: str) -> bool:
        term = self._terms.get(terminal_id)
        return term is None or term.exited

    def composer_has_text(self, terminal_id: str) -> bool:
        term = self._terms.get(terminal_id)
        return bool(term and term.composer_has_text)

    # --- consumers (registered in bootstrap) ------------------------------------
    async def handle(self, event: Event) -> None:
        """One subscription for all terminal facts, so input and output stay in order."""
        if isinstance(event, TerminalOutput):
            self.on_output(event)
        elif isinstance(event, InputSubmitted):
            await self.on_input(event)
        elif isinstance(event, TerminalExited):
            await self.on_exited(event)
        elif isinstance(event, TerminalRemoved):
            self.on_removed(event)
        elif isinstance(event, TerminalResized):
            self.on_resized(event)
        elif isinstance(event, ScreenSnapshot):
            self.on_snapshot(event)
        elif isinstance(event, HookReceived):
            await self.on_hook(event.terminal_id, event.event, event.payload)

    def on_snapshot(self, event: ScreenSnapshot) -> None:
        self._snapshot_pending.discard(event.terminal_id)
        term = self._terms.get(event.terminal_id)
        if term is not None:
            _load_screen(term, event.text, (event.cursor_x, event.cursor_y))
            self._schedule(event.terminal_id, term)
        if event.terminal_id in self._resync_after:
            self._resync_after.discard(event.terminal_id)
            self.resync(event.terminal_id)

    def on_resized(self, event: TerminalResized) -> None:
        """Keep the emulator's geometry equal to the pane's, then re-read the screen."""
        term = self._terms.get(event.terminal_id)
        if term is None or (term.screen.columns, term.screen.lines) == (event.width, event.height):
            return
        term.screen.resize(event.height, event.width)
        self.resync(event.terminal_id)

    def on_dropped(self, event: Event) -> None:
        """Output was dropped under back-pressure: this screen is no longer exact."""
        if isinstance(event, TerminalOutput):
            self.resync(event.terminal_id)

    def on_output(self, event: Event) -> None:
        assert isinstance(event, TerminalOutput)
        term = self._terms.get(event.terminal_id)
        if term is None:
            return
        term.stream.feed(event.data)
        self._schedule(event.terminal_id, term)

    async def on_input(self, event: Event) -> None:
        assert isinstance(event, InputSubmitted)
        term = self._terms.get(event.terminal_id)
        if term is not None:
            term.hook_reply = None  # a new turn: the last hook's answer is the previous one's
        if term is not None and term.exited:
            # Typed into a pane whose agent already died (the death was seen first):
            # that turn can only end in error, and nothing on screen will say so.
            term.turn = event.turn
            term.phase = _SETTLED
            await self._publish(event.terminal_id, term, TerminalStatus.ERROR, "pane", term.reason, force=True)
        elif term is not None:
            term.turn = event.turn
            term.phase = _SENT
            term.status_at_submit = term.status
            term.upper_at_submit = _upper_rows(term.screen)

    async def on_exited(self, event: Event) -> None:
        assert isinstance(event, TerminalExited)
        term = self._terms.get(event.terminal_id)
        if term is None or term.exited:
            return
        term.exited = True
        if event.window_gone:
            reason = "the agent's tmux window was closed"
        else:
            reason = f"the agent process exited (code {event.exit_code})"
        await self._publish(event.terminal_id, term, TerminalStatus.ERROR, "pane", reason)

    def on_removed(self, event: Event) -> None:
        assert isinstance(event, TerminalRemoved)
        self.forget(event.terminal_id)

    # --- evaluation -------------------------------------------------------------
    def _schedule(self, terminal_id: str, term: _Watched) -> None:
        if not term.dirty:
            term.dirty = True
            asyncio.get_running_loop().call_soon(self._spawn_evaluate, terminal_id)

    def _spawn_evaluate(self, terminal_id: str) -> None:
        asyncio.get_running_loop().create_task(self._evaluate(terminal_id))

    async def _evaluate(self, terminal_id: str) -> None:
        term = self._terms.get(terminal_id)
        if term is None or term.exited:
            return
        term.dirty = False
        try:
            reading = term.provider.read_status(_render(term.screen))
        except Exception:
            log.exception("provider %s read_status failed", term.provider.name)
            return
        term.composer_has_text = reading.composer_has_text
        new = reading.status
        if term.hooks_seen and term.phase == _SETTLED and new in _HOOK_DECIDED and not reading.definite and not (
                new == TerminalStatus.PROCESSING and term.status_source == "screen"
                and term.status in (TerminalStatus.WAITING_USER_ANSWER, TerminalStatus.ERROR)):
            # Busy/done/idle come from the CLI's hooks; the screen may only end a
            # dialog or an error that it detected itself.
            return
        if term.phase != _SETTLED:
            if new == TerminalStatus.UNKNOWN:
                return
            if (new.is_ready and term.hooks_seen and not reading.definite
                    and term.status_at_submit != TerminalStatus.WAITING_USER_ANSWER):
                # A CLI that reports its turns by hooks says itself when the new one starts;
                # until then a ready screen is the previous answer with the new echo above.
                return
            if new.is_ready:
                if reading.composer_has_text:
                    term.phase = _COMPOSER_SEEN
                    return
                if term.phase == _SENT and not self._new_turn_on_screen(term):
                    return  # still the previous turn's screen
            term.phase = _SETTLED
            await self._publish(terminal_id, term, new, "screen", reading.reason, force=True)
            return
        if new == TerminalStatus.UNKNOWN and term.status != TerminalStatus.UNKNOWN:
            return  # unknown never overwrites a known status
        if term.status == TerminalStatus.COMPLETED and new == TerminalStatus.IDLE and not reading.composer_has_text:
            return  # a finished turn stays completed until new input (typed text counts)
        if new != term.status or reading.reason != term.reason:
            await self._publish(terminal_id, term, new, "screen", reading.reason)

    @staticmethod
    def _new_turn_on_screen(term: _Watched) -> bool:
        """A ready screen right after a submit belongs to the new turn when the echo and the
        answer arrived together (nothing in between to see): the screen above its last two
        rows (prompt and footer redraws) changed, or the agent was waiting for this answer."""
        return (term.status_at_submit == TerminalStatus.WAITING_USER_ANSWER
                or _upper_rows(term.screen) != term.upper_at_submit)

    async def _publish(self, terminal_id: str, term: _Watched, status: TerminalStatus, source: str,
                       reason: str, force: bool = False) -> None:
        previous = term.status
        if status == previous and reason == term.reason and not force:
            return
        term.status, term.reason, term.status_source = status, reason, source
        await self.store.run(self.store.set_status, terminal_id, status, source, reason)
        self.bus.publish(StatusChanged(terminal_id, status, previous, source, reason, term.turn))

    async def set_external(self, terminal_id: str, status: TerminalStatus, source: str, reason: str = "") -> None:
        """A status decided outside the screen (a restart, a start-up dialog answered)."""
        term = self._terms.get(terminal_id)
        if term is not None:
            force = term.phase != _SETTLED and status != TerminalStatus.IDLE
            if force:
                term.phase = _SETTLED  # a busy/done/waiting signal confirms the pending turn
            await self._publish(terminal_id, term, status, source, reason, force=force)

    async def on_hook(self, terminal_id: str, event: str, payload: dict) -> TerminalStatus | None:
        """A CLI hook arrived (`cao-hook`): the provider says what it means."""
        term = self._terms.get(terminal_id)
        if term is None or term.exited:
            return None
        reading = term.provider.status_from_hook(event, payload)
        if reading is None:
            return None
        term.hooks_seen = True
        if term.phase != _SETTLED and reading.status in (TerminalStatus.COMPLETED, TerminalStatus.IDLE):
            # A turn is pending and this is the end of the previous one (a message queued
            # during a turn): only a busy signal can settle the new turn.
            return None
        text = term.provider.reply_from_hook(event, payload)
        if text is not None:
            term.hook_reply = text
        await self.set_external(terminal_id, reading.status, f"hook:{event}", reading.reason)
        return reading.status


def _load_screen(term: _Watched, captured: str, cursor: tuple[int, int] | None) -> None:
    term.screen.reset()
    term.stream.feed(captured.rstrip("\n").replace("\n", "\r\n").encode())
    if cursor is not None:
        term.stream.feed(f"\x1b[{cursor[1] + 1};{cursor[0] + 1}H".encode())


def _upper_rows(screen: pyte.Screen) -> tuple[str, ...]:
    """The screen's non-blank rows but the last two (where prompts and footers redraw)."""
    rows = [line.rstrip() for line in screen.display if line.strip()]
    return tuple(rows[:-2])


def _render(screen: pyte.Screen) -> Screen:
    return Screen([line.rstrip() for line in screen.display], screen.cursor.y, screen.cursor.x)
