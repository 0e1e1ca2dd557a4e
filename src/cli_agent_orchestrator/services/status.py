"""Status monitor: terminal output in, `terminal.{id}.status` out (seed 003).

Each terminal's output is fed to a terminal emulator (pyte), so providers read
the screen a human would see rather than raw escape bytes. Every terminal has its
own queue and worker task: the bus consumer only routes facts, so one agent printing
a flood delays nobody else, and a worker that falls more than FLOOD_BYTES behind stops
emulating and asks tmux for the screen instead (the snapshot lands in stream order and
supersedes the output before it). A status is published when it changes, at once; the
database copy is written behind it and retried until the database takes it, so a
locked database never loses a status edge.

Turns: when cao submits input (`InputSubmitted`), the screen still shows the
previous turn. The monitor only accepts a ready reading for the new turn after
it has seen the typed text in the composer or a busy/waiting/error state, so a
stale "completed" is never mistaken for the new answer; the first accepted
reading is published even when its value equals the old one.
"""
from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import dataclass, field
from typing import Callable

import pyte

from ..bus import EventBus
from ..errors import StoreBusy
from ..events import (Event, HookReceived, InputSubmitted, ScreenSnapshot, StatusChanged, TerminalExited, TerminalOutput,
                      TerminalRemoved, TerminalResized)
from ..models import TerminalStatus
from ..providers.base import Provider, Screen
from ..store import Store

log = logging.getLogger(__name__)

_HOOK_DECIDED = (TerminalStatus.PROCESSING, TerminalStatus.COMPLETED, TerminalStatus.IDLE)

# Turn phases after InputSubmitted.
_SETTLED, _SENT, _COMPOSER_SEEN = "settled", "sent", "composer_seen"

# pyte emulates well under 1 MB/s: output queued beyond this is cheaper to replace by a
# snapshot of the screen from tmux than to emulate byte by byte. The terminal then stays in
# "flood mode" (output dropped, the screen re-read from tmux at most every
# FLOOD_SNAPSHOT_INTERVAL_S) until a snapshot finds no more output behind it.
FLOOD_BYTES = 16 * 1024
FLOOD_SNAPSHOT_INTERVAL_S = 0.1
# Emulate at most this much before letting other terminals' work run.
FEED_SLICE = 4 * 1024
# A snapshot asked for that has not come by then (its reply lost in a reconnect) is asked again.
SNAPSHOT_RETRY_S = 2.0
# Database writes of statuses that failed (locked database) are retried this often.
STATUS_WRITE_RETRY_S = 0.5
# Statuses are written this long after a change, in one batch: the writes of a burst of
# changes coalesce, and the work a change triggers (an inbox delivery) goes first.
STATUS_WRITE_DELAY_S = 0.1


class _Screen(pyte.Screen):
    """pyte's screen, tolerant of private SGR sequences (`CSI > 4 ; 2 m`, xterm's
    modifyOtherKeys, which Gemini CLI sends): pyte would raise on them and drop the rest
    of the output it was fed."""

    def select_graphic_rendition(self, *attrs: int, private: bool = False) -> None:
        if not private:
            super().select_graphic_rendition(*attrs)


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
    # this terminal's facts, in stream order, and the task that applies them
    queue: collections.deque = field(default_factory=collections.deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    worker: asyncio.Task | None = None
    queued_output: int = 0  # bytes of output waiting in `queue`
    # Screen snapshots from tmux: one asked for and not yet here; output not emulated since
    # the last one (it must be covered by another); another wanted once this one is here.
    snapshot_asked: bool = False
    unseen_output: bool = False
    snapshot_again: bool = False
    flooding: bool = False
    last_asked: float = 0.0
    skipped_bytes: int = 0  # output replaced by snapshots instead of emulated (diagnostics)
    snapshots: int = 0
    snapshot_timer: asyncio.TimerHandle | None = None


@dataclass(frozen=True)
class StatusView:
    """A terminal's live status as the monitor knows it (the database copy may lag)."""

    status: TerminalStatus
    source: str  # which signal decided it: "screen", "pane", "hook:<event>", ...
    reason: str
    turn: int  # input turns submitted so far
    settled: bool  # the latest turn's first status after its input has been seen


class _StatusWriter:
    """Writes the latest status of each terminal behind the published event; coalesces
    and retries while the database is locked (a status edge is never lost)."""

    def __init__(self, store: Store):
        self.store = store
        self._latest: dict[str, tuple[TerminalStatus, str, str]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def put(self, terminal_id: str, status: TerminalStatus, source: str, reason: str) -> None:
        self._latest[terminal_id] = (status, source, reason)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="status-writer")
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(STATUS_WRITE_DELAY_S)  # batching window, not synchronisation
            self._wake.clear()
            batch, self._latest = self._latest, {}
            try:
                await self.store.run(self.store.set_statuses, batch)
            except StoreBusy as exc:
                log.warning("status write deferred: %s", exc)
                self._latest = {**batch, **self._latest}  # newer readings win
                await asyncio.sleep(STATUS_WRITE_RETRY_S)  # safety net: retry a locked database
                self._wake.set()
            except Exception:
                log.exception("status write failed; retrying")
                self._latest = {**batch, **self._latest}
                await asyncio.sleep(STATUS_WRITE_RETRY_S)
                self._wake.set()

    async def flush(self) -> None:
        if self._latest:
            batch, self._latest = self._latest, {}
            await self.store.run(self.store.set_statuses, batch)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        try:
            await self.flush()
        except Exception:  # shutting down: the next start re-reads every screen anyway
            log.warning("could not write the last statuses at shutdown")


class StatusMonitor:
    def __init__(self, bus: EventBus, store: Store,
                 request_snapshot: Callable[[str], bool] | None = None):
        self.bus = bus
        self.store = store
        self._terms: dict[str, _Watched] = {}
        # Asks the output source for a ScreenSnapshot, which arrives in stream order
        # (the backend's request_snapshot).
        self.request_snapshot = request_snapshot
        self._writer = _StatusWriter(store)

    # --- registration -----------------------------------------------------------
    def watch(self, terminal_id: str, provider: Provider, width: int = 220, height: int = 50,
              initial: TerminalStatus = TerminalStatus.UNKNOWN) -> None:
        self.forget(terminal_id)
        screen = _Screen(width, height)
        term = _Watched(provider, screen, pyte.ByteStream(screen), status=initial)
        self._terms[terminal_id] = term
        term.worker = asyncio.get_running_loop().create_task(self._work(terminal_id, term),
                                                             name=f"status:{terminal_id}")

    def forget(self, terminal_id: str) -> None:
        term = self._terms.pop(terminal_id, None)
        if term is not None:
            if term.worker is not None:
                term.worker.cancel()
            if term.snapshot_timer is not None:
                term.snapshot_timer.cancel()

    async def stop(self) -> None:
        workers = [t.worker for t in self._terms.values() if t.worker is not None]
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        await self._writer.stop()

    def resync(self, terminal_id: str) -> None:
        """Our copy of the screen may be stale (drops, resize, restart): re-read it from tmux."""
        term = self._terms.get(terminal_id)
        if term is None:
            return
        if term.snapshot_asked:
            # Output lost after the pending snapshot was taken is not in it: take another.
            term.snapshot_again = True
        else:
            self._ask_snapshot(terminal_id, term)

    def _ask_snapshot(self, terminal_id: str, term: _Watched) -> None:
        """Ask tmux for the screen (at most one request at a time; in flood mode at most one
        per FLOOD_SNAPSHOT_INTERVAL_S)."""
        if term.snapshot_asked or self.request_snapshot is None:
            return
        loop = asyncio.get_running_loop()
        wait = term.last_asked + FLOOD_SNAPSHOT_INTERVAL_S - loop.time() if term.flooding else 0.0
        if wait > 0:
            if term.snapshot_timer is None:
                term.snapshot_timer = loop.call_later(wait, self._snapshot_due, terminal_id, term)
            return
        if not self.request_snapshot(terminal_id):
            term.flooding = False  # no snapshot can come: emulate the output instead
            return
        term.snapshot_asked, term.last_asked = True, loop.time()
        if term.snapshot_timer is not None:
            term.snapshot_timer.cancel()
        term.snapshot_timer = loop.call_later(SNAPSHOT_RETRY_S, self._snapshot_lost, terminal_id, term)

    def _snapshot_due(self, terminal_id: str, term: _Watched) -> None:
        term.snapshot_timer = None
        if self._terms.get(terminal_id) is term and term.unseen_output:
            self._ask_snapshot(terminal_id, term)

    def _snapshot_lost(self, terminal_id: str, term: _Watched) -> None:
        term.snapshot_timer = None
        if self._terms.get(terminal_id) is term and term.snapshot_asked:
            term.snapshot_asked = False
            self._ask_snapshot(terminal_id, term)

    # --- queries ----------------------------------------------------------------
    def stats(self) -> dict[str, dict]:
        """Per terminal: output waiting to be emulated, output skipped in favour of tmux
        snapshots (floods), snapshots applied. Served by /diagnostics."""
        return {tid: {"queued_bytes": t.queued_output, "skipped_bytes": t.skipped_bytes,
                      "snapshots": t.snapshots, "flooding": t.flooding}
                for tid, t in self._terms.items()}

    def status(self, terminal_id: str) -> TerminalStatus | None:
        term = self._terms.get(terminal_id)
        return term.status if term else None

    def view(self, terminal_id: str) -> StatusView | None:
        term = self._terms.get(terminal_id)
        if term is None:
            return None
        return StatusView(term.status, term.status_source, term.reason, term.turn, term.phase == _SETTLED)

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
        if isinstance(event, (TerminalOutput, InputSubmitted, TerminalExited, TerminalResized,
                              ScreenSnapshot, HookReceived)):
            term.queue.append(event)
            if isinstance(event, TerminalOutput):
                term.queued_output += len(event.data)
            term.wake.set()

    def on_dropped(self, event: Event) -> None:
        """Output was dropped under back-pressure: this screen is no longer exact."""
        if isinstance(event, TerminalOutput):
            self.resync(event.terminal_id)

    async def _work(self, terminal_id: str, term: _Watched) -> None:
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
                await self._guarded(terminal_id, self._on_output(terminal_id, term, event.data), event.topic)
                continue
            if term.dirty and not isinstance(event, (ScreenSnapshot, TerminalResized)):
                # Judge the screen as it was before this fact (e.g. the end of a turn
                # before the input that starts the next one).
                await self._guarded(terminal_id, self._evaluate(terminal_id), "evaluate")
            await self._guarded(terminal_id, self._apply(terminal_id, term, event), event.topic)

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

    async def _apply(self, terminal_id: str, term: _Watched, event: Event) -> None:
        if isinstance(event, InputSubmitted):
            await self.on_input(event)
        elif isinstance(event, TerminalExited):
            await self.on_exited(event)
        elif isinstance(event, TerminalResized):
            self.on_resized(event)
        elif isinstance(event, ScreenSnapshot):
            self.on_snapshot(event)
        elif isinstance(event, HookReceived):
            await self.on_hook(event.terminal_id, event.event, event.payload)

    async def _on_output(self, terminal_id: str, term: _Watched, data: bytes) -> None:
        """Emulate output, unless more is arriving than is worth emulating: then drop it
        and read the screen from tmux instead (flood mode)."""
        if not term.flooding and term.queued_output + len(data) > FLOOD_BYTES:
            term.flooding = True
        if term.flooding:
            term.unseen_output = True
            term.skipped_bytes += len(data)
            self._ask_snapshot(terminal_id, term)
            return
        for start in range(0, len(data), FEED_SLICE):
            if start:
                await asyncio.sleep(0)  # let other terminals' work run between slices
                if term.queued_output > FLOOD_BYTES:  # falling behind: the rest is skipped too
                    term.flooding = term.unseen_output = True
                    term.skipped_bytes += len(data) - start
                    self._ask_snapshot(terminal_id, term)
                    return
            term.stream.feed(data[start:start + FEED_SLICE])
        term.dirty = True

    def on_snapshot(self, event: ScreenSnapshot) -> None:
        term = self._terms.get(event.terminal_id)
        if term is None:
            return
        # Output before this point of the stream is in the snapshot; output after it is
        # still queued behind it.
        _load_screen(term, event.text, (event.cursor_x, event.cursor_y))
        term.dirty = True
        term.snapshots += 1
        term.snapshot_asked = term.unseen_output = False
        if term.snapshot_timer is not None:
            term.snapshot_timer.cancel()
            term.snapshot_timer = None
        if term.snapshot_again:
            term.snapshot_again = False
            self._ask_snapshot(event.terminal_id, term)
        elif term.flooding and term.queued_output == 0:
            term.flooding = False  # nothing more behind it: emulate again from here

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

    # --- evaluation -------------------------------------------------------------
    async def _evaluate(self, terminal_id: str) -> None:
        term = self._terms.get(terminal_id)
        if term is None:
            return
        term.dirty = False
        if term.exited:
            return
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
        self.bus.publish(StatusChanged(terminal_id, status, previous, source, reason, term.turn))
        self._writer.put(terminal_id, status, source, reason)

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
