"""Typing into an agent: neutralising control characters, pasting, and a
verified submit.

Every piece of text (API input, inbox delivery, handoff task) goes in through
`InputService.submit`, under a per-terminal lock, so two deliveries can never
interleave inside one composer.

Control characters: a message must never inject keystrokes. Before pasting,
CR LF and lone CR become LF; tab and LF pass through; every other C0 control
(U+0000–U+001F) becomes its Unicode "control picture" (U+2400 + code, e.g. ESC
→ ␛), DEL becomes ␡ (U+2421) and the C1 controls (U+0080–U+009F) become U+FFFD.
So a fake end-of-paste marker `ESC[201~` arrives as the inert text `␛[201~`
inside the same message.
"""

from __future__ import annotations

import asyncio
import logging
import re

from ..backends.base import TerminalBackend
from ..bus import EventBus
from ..errors import AgentExited
from ..events import ComposerChanged, EnterPressed, InputSubmitted, StatusChanged
from ..models import TerminalStatus
from .status.monitor import StatusMonitor

log = logging.getLogger(__name__)

SUBMIT_CONFIRM_S = 1.5  # how long one Enter may take to show any effect
SUBMIT_RETRIES = 3
SLOW_RETRIES = 2  # more, at SUBMIT_CONFIRM_S, after the retries of a CLI's shorter confirm wait
# What an Enter did, as the screen and the hooks tell.
_STARTED, _NEWLINE, _CLEARED, _NO_EFFECT = "started", "newline", "cleared", "no effect"

_C0_OR_C1 = re.compile("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")


def _picture(match: re.Match) -> str:
    code = ord(match.group(0))
    if code < 0x20:
        return chr(0x2400 + code)
    if code == 0x7F:
        return "\u2421"
    return "\ufffd"


def neutralise(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _C0_OR_C1.sub(_picture, text)


# Keys accepted by POST /terminals/{id}/key: named keys, one character, or a modifier chord.
NAMED_KEYS = {
    "Enter",
    "Escape",
    "Tab",
    "BTab",
    "Space",
    "BSpace",
    "Up",
    "Down",
    "Left",
    "Right",
    "Home",
    "End",
    "PageUp",
    "PageDown",
    "PPage",
    "NPage",
    "DC",
    "IC",
}
_KEY_RE = re.compile(r"\A(?:[A-Za-z0-9]|[CMS]-[A-Za-z0-9]|F(?:[1-9]|1[0-2]))\Z")


def valid_key(key: str) -> bool:
    return key in NAMED_KEYS or bool(_KEY_RE.match(key))


class InputService:
    def __init__(self, backend: TerminalBackend, bus: EventBus, monitor: StatusMonitor):
        self.backend = backend
        self.bus = bus
        self.monitor = monitor
        self._locks: dict[str, asyncio.Lock] = {}
        self._turns: dict[str, int] = {}

    def lock(self, terminal_id: str) -> asyncio.Lock:
        return self._locks.setdefault(terminal_id, asyncio.Lock())

    def forget(self, terminal_id: str) -> None:
        self._locks.pop(terminal_id, None)
        self._turns.pop(terminal_id, None)

    async def submit(self, terminal_id: str, window_id: str, text: str) -> int:
        """Paste `text` and press Enter until the agent shows it started; returns the turn number.

        The caller holds `lock(terminal_id)`.
        """
        turn = self._turns.get(terminal_id, 0) + 1
        self._turns[terminal_id] = turn
        stream = self.bus.open_stream(
            f"submit:{terminal_id}", f"terminal.{terminal_id}.*", 1 << 20, kinds=(StatusChanged, ComposerChanged)
        )
        try:
            self.bus.publish(InputSubmitted(terminal_id, turn, enter_follows=True))
            view = self.monitor.view(terminal_id)
            echo = (
                self.bus.open_stream(f"echo:{terminal_id}", f"terminal.{terminal_id}.composer", 64)
                if view is not None and view.provider.enter_after_echo
                else None
            )
            drawn = False
            try:
                await self.backend.paste(window_id, neutralise(text))
                if echo is not None and view is not None:
                    shown = self.monitor.view(terminal_id)
                    drawn = (shown is not None and shown.composer_has_text) or await self._composer_shows(
                        echo, view.provider.enter_delay_s
                    )
                    if drawn and view.provider.pause_after_echo_s > 0:
                        await asyncio.sleep(view.provider.pause_after_echo_s)  # a CLI quirk, not sync
                elif view is not None and view.provider.enter_delay_s > 0:
                    await asyncio.sleep(view.provider.enter_delay_s)
            finally:
                if echo is not None:
                    self.bus.close_stream(echo)
            # A shorter wait only once the text is known to be drawn: before that, an empty
            # composer may be one not drawn yet, not one whose text was taken.
            confirm = (view.provider.submit_confirm_s if drawn and view is not None else None) or SUBMIT_CONFIRM_S
            # The rows the text takes now: one more after an Enter means it became a newline.
            view = self.monitor.view(terminal_id)
            rows = view.composer_rows if view is not None and view.composer_has_text else 0
            # A CLI's short confirm wait (Gemini's) holds while it keeps up; on a loaded machine its
            # draw can lag the Enters, so the last presses wait the default time for the screen
            # to show what the earlier ones did (a newline to take back, or the turn).
            quick = confirm < SUBMIT_CONFIRM_S
            waits = [confirm] * (SUBMIT_RETRIES + 1) + ([SUBMIT_CONFIRM_S] * SLOW_RETRIES if quick else [])
            for attempt, wait in enumerate(waits):
                if attempt == 0:
                    self.bus.publish(EnterPressed(terminal_id, turn))
                try:
                    await self.backend.send_keys(window_id, ["Enter"])
                except AgentExited:
                    if attempt == 0:
                        raise
                    return turn  # the agent ended after an Enter (an exit command): the monitor says so
                outcome = await self._confirmed(stream, turn, wait, rows + 1 if rows else 0, drawn)
                log.debug(
                    "terminal %s: turn %d, Enter %d: %s (drawn %s, rows %d)",
                    terminal_id,
                    turn,
                    attempt + 1,
                    outcome,
                    drawn,
                    rows,
                )
                if outcome in (_STARTED, _CLEARED):
                    return turn  # (cleared: the agent took the text and is slow to show the turn)
                if outcome == _NEWLINE:
                    # The Enter became a newline (a CLI's paste guard): take it back, and press
                    # Enter again once the composer shows it gone (so a second newline shows too).
                    log.info("terminal %s: Enter read as a newline (attempt %d), taken back", terminal_id, attempt + 1)
                    try:
                        await self.backend.send_keys(window_id, ["BSpace"])
                    except AgentExited:
                        return turn
                    if await self._composer_shows(stream, wait, rows):
                        continue
                view = self.monitor.view(terminal_id)
                if view is None or view.exited:
                    return turn
                if not view.composer_has_text and not quick:
                    # Nothing left in the composer: the agent took the text but is slow
                    # to show it. Another Enter could submit a stray empty line.
                    return turn
                # (A CLI with a short confirm wait (Gemini) clears its composer within tens of ms of
                # taking an Enter, and that was not seen: the reading of an empty composer can be
                # one from before the paste was drawn (seen under load: the text left in the
                # composer); an Enter on an empty composer does nothing there.)
                log.info("terminal %s: Enter not taken (attempt %d), pressing it again", terminal_id, attempt + 1)
            # (The monitor's status stays what the agent shows: the text waits in its composer.)
            log.warning("terminal %s: no Enter of %d was seen taken", terminal_id, len(waits))
            return turn
        finally:
            self.bus.close_stream(stream)

    async def _composer_shows(self, stream, limit: float, rows: int = 0) -> bool:
        """Until the composer shows text (taking `rows` rows, when given: a newline taken back)
        (True) or `limit` seconds have passed (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        while (event := await self.bus.next_event(stream, deadline - loop.time())) is not None:
            if isinstance(event, ComposerChanged) and event.has_text and rows in (0, event.rows):
                return True
        return False

    async def _confirmed(self, stream, turn: int, limit: float, newline_rows: int, drawn: bool) -> str:
        """_STARTED once the agent shows the turn; _NEWLINE when the composer grew to
        `newline_rows` rows (0: not watched) with its text still there; _CLEARED when the composer,
        seen `drawn` with the text, shows empty; after `limit` s, _NO_EFFECT."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        while True:
            event = await self.bus.next_event(stream, deadline - loop.time())
            if event is None:
                return _NO_EFFECT
            if isinstance(event, StatusChanged) and event.turn >= turn:
                log.debug("terminal %s: turn %d started: %s", event.terminal_id, turn, event)
                return _STARTED
            if isinstance(event, ComposerChanged) and newline_rows and event.has_text and event.rows == newline_rows:
                return _NEWLINE
            if isinstance(event, ComposerChanged) and drawn and not event.has_text:
                log.debug("terminal %s: turn %d, composer cleared: %s", event.terminal_id, turn, event)
                return _CLEARED

    async def next_turn(self, terminal_id: str) -> int:
        """Count a turn that was started by keys rather than a paste (a dialog answer)."""
        turn = self._turns.get(terminal_id, 0) + 1
        self._turns[terminal_id] = turn
        self.bus.publish(InputSubmitted(terminal_id, turn))
        return turn

    async def send_keys(self, window_id: str, keys: list[str]) -> None:
        await self.backend.send_keys(window_id, keys)


def is_ready_for_input(status: TerminalStatus | None, eager: bool) -> bool:
    if status is None:
        return False
    if status.is_ready:
        return True
    return eager and status in (TerminalStatus.PROCESSING, TerminalStatus.WAITING_USER_ANSWER)
