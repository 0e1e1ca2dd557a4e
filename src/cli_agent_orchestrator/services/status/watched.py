"""One watched terminal: its status and turn state, its queue of facts, and its emulated screen,
which output reaches by emulation or, in a flood, by snapshots of the screen from tmux.

Flood mode: a terminal whose queue holds more than FLOOD_BYTES of output stops emulating and
asks tmux for the screen instead; the snapshot lands in stream order and supersedes the output
before it. The terminal emulates again once a snapshot finds no more output behind it.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyte

from ...models import TerminalStatus
from ...providers.base import Provider, Screen
from .screen import EmulatedScreen, load_capture, upper_rows

# Turn phases after InputSubmitted.
SETTLED, SENT, COMPOSER_SEEN = "settled", "sent", "composer_seen"

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


@dataclass
class WatchedTerminal:
    """The monitor's record of one terminal: what it knows of it, what is queued, how its screen is fed."""

    terminal_id: str
    provider: Provider
    screen: EmulatedScreen
    stream: pyte.ByteStream
    # Asks the output source for a ScreenSnapshot, which arrives in stream order
    # (the backend's request_snapshot).
    request_snapshot: Callable[[str], bool] | None
    status: TerminalStatus = TerminalStatus.UNKNOWN
    status_source: str = ""
    reason: str = ""
    status_since: float = field(default_factory=time.time)  # wall clock of the last status change
    turn: int = 0
    phase: str = SETTLED
    dirty: bool = False
    exited: bool = False
    reread: bool = False  # its host was unreachable: the next screen reading decides, once
    composer_has_text: bool = False
    composer_rows: int = 0
    status_at_submit: TerminalStatus = TerminalStatus.UNKNOWN
    upper_at_submit: tuple[str, ...] = ()
    awaiting_enter: bool = False  # the turn's text is pasted, its Enter not pressed yet (EnterPressed)
    busy_at_submit: bool = False  # the CLI's signals had ended the last turn, its busy screen was still up
    # the CLI reports its own turns (hooks, its title); the screen then only sees dialogs and errors
    signals_seen: bool = False
    title: str | None = None  # the last title the CLI set (OSC 0/2), as the monitor has taken it
    hook_reply: str | None = None  # the current turn's answer as the CLI's turn-end hook gave it
    last_hook: str | None = None  # the hook event of the last hook reading (providers read it)
    rendered: Screen = field(default_factory=lambda: Screen([]))  # the screen last read
    # The last screen that read as something known: a frame caught mid-redraw (read as unknown)
    # never replaces it, so a dialog the status reports is still there to be answered.
    known: Screen = field(default_factory=lambda: Screen([]))
    # What its CLI has yet to list on cao's MCP endpoint before it has cao's tools (McpListed; the
    # provider's `mcp_ready_after`): a ready reading waits here, and the status says "unknown" with
    # why, so that nobody types a task into an agent without its tools. Empty: nothing pending.
    listings_pending: frozenset[str] = frozenset()
    held_ready: tuple[TerminalStatus, str, str] | None = None  # (status, source, reason)
    # this terminal's facts, in stream order, and the task that applies them
    queue: collections.deque = field(default_factory=collections.deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    worker: asyncio.Task | None = None
    forgotten: bool = False  # no longer watched: its pending timers do nothing
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

    def forget(self) -> None:
        """Stop watching: the worker and any snapshot timer end here."""
        self.forgotten = True
        if self.worker is not None:
            self.worker.cancel()
        if self.snapshot_timer is not None:
            self.snapshot_timer.cancel()

    def stats(self) -> dict:
        return {
            "queued_bytes": self.queued_output,
            "skipped_bytes": self.skipped_bytes,
            "snapshots": self.snapshots,
            "flooding": self.flooding,
        }

    # --- the screen from tmux -----------------------------------------------------
    def resync(self, lost: bool = False) -> None:
        """Our copy of the screen may be stale (drops, resize, restart): re-read it from tmux.
        `lost`: output never reached the emulator (dropped on the bus)."""
        if lost:
            self.unseen_output = True
        if self.snapshot_asked:
            # Output lost after the pending snapshot was taken is not in it: take another.
            self.snapshot_again = True
        else:
            self.ask_snapshot()

    def ask_snapshot(self) -> None:
        """Ask tmux for the screen (at most one request at a time; in flood mode at most one
        per FLOOD_SNAPSHOT_INTERVAL_S)."""
        if self.snapshot_asked or self.request_snapshot is None:
            return
        loop = asyncio.get_running_loop()
        wait = self.last_asked + FLOOD_SNAPSHOT_INTERVAL_S - loop.time() if self.flooding else 0.0
        if wait > 0:
            if self.snapshot_timer is None:
                self.snapshot_timer = loop.call_later(wait, self._snapshot_due)
            return
        if not self.request_snapshot(self.terminal_id):
            self.flooding = False  # no snapshot can come: emulate the output instead
            return
        self.snapshot_asked, self.last_asked = True, loop.time()
        if self.snapshot_timer is not None:
            self.snapshot_timer.cancel()
        self.snapshot_timer = loop.call_later(SNAPSHOT_RETRY_S, self._snapshot_lost)

    def _snapshot_due(self) -> None:
        self.snapshot_timer = None
        if not self.forgotten and self.unseen_output:
            self.ask_snapshot()

    def _snapshot_lost(self) -> None:
        self.snapshot_timer = None
        if not self.forgotten and self.snapshot_asked:
            self.snapshot_asked = False
            self.ask_snapshot()

    def enter_pressed(self, turn: int) -> None:
        """The turn's Enter: what the screen shows from here on may be the turn. The screen as it
        is now (pasted text and all) is the one a new turn must change."""
        if turn == self.turn and self.awaiting_enter:
            self.awaiting_enter = False
            self.upper_at_submit = upper_rows(self.screen)

    def new_turn_on_screen(self) -> bool:
        """A ready screen right after a submit belongs to the new turn when the echo and the
        answer arrived together (nothing in between to see): the screen above its last two
        rows (prompt and footer redraws) changed, or the agent was waiting for this answer."""
        return (
            self.status_at_submit == TerminalStatus.WAITING_USER_ANSWER
            or upper_rows(self.screen) != self.upper_at_submit
        )

    def apply_snapshot(self, text: str, cursor: tuple[int, int], title: str | None = None) -> None:
        # Output before this point of the stream is in the snapshot; output after it is
        # still queued behind it. So is the title: one set by output this terminal skipped
        # (a flood) is taken from here.
        if self.unseen_output or self.snapshot_again:
            # Output was skipped (a flood, a drop on the bus) or may have been lost after this
            # snapshot was taken (snapshot_again), perhaps in the middle of an escape sequence:
            # the parser's state belongs to bytes it never got (a cut title would swallow what
            # follows).
            self.stream = pyte.ByteStream(self.screen)
        load_capture(self.screen, text, cursor)
        if title is not None:
            self.screen.set_title(title)
        self.dirty = True
        self.snapshots += 1
        self.snapshot_asked = self.unseen_output = False
        if self.snapshot_timer is not None:
            self.snapshot_timer.cancel()
            self.snapshot_timer = None
        if self.snapshot_again:
            self.snapshot_again = False
            self.ask_snapshot()
        elif self.flooding and self.queued_output == 0:
            self.flooding = False  # nothing more behind it: emulate again from here

    # --- output -------------------------------------------------------------------
    async def feed_output(self, data: bytes) -> None:
        """Emulate output, unless more is arriving than is worth emulating: then drop it
        and read the screen from tmux instead (flood mode)."""
        if not self.flooding and self.queued_output + len(data) > FLOOD_BYTES:
            self.flooding = True
        if self.flooding:
            self.unseen_output = True
            self.skipped_bytes += len(data)
            self.ask_snapshot()
            return
        for start in range(0, len(data), FEED_SLICE):
            if start:
                await asyncio.sleep(0)  # let other terminals' work run between slices
                if self.queued_output > FLOOD_BYTES:  # falling behind: the rest is skipped too
                    self.flooding = self.unseen_output = True
                    self.skipped_bytes += len(data) - start
                    self.ask_snapshot()
                    return
            self.stream.feed(data[start : start + FEED_SLICE])
        self.dirty = True
