"""Inbox: messages between agents, delivered exactly once, in order.

How the guarantee is kept:
* A message is stored PENDING (committed) before the POST returns.
* Delivery is driven by events: whenever a receiver becomes idle or completed,
  or its composer is emptied while it is (text someone typed there was erased),
  or at once on POST, `deliver_pending` runs. A slow sweep exists only as a
  named safety net.
* Claiming is one conditional UPDATE (PENDING → DELIVERING): of any number of
  racing deliverers, exactly one wins and pastes. It pastes under the
  receiver's input lock, so pastes never interleave. The claim records where the
  paste will land (the pane's line, taken just before) and how often the message
  already shows from a few rows above that line on.
* After the paste is submitted the row becomes DELIVERED. If cao-server dies in
  between, the restart finds the row DELIVERING and reads the receiver's pane from
  the same line on: the message (or the CLI's summary of a long paste) shows more
  often than before → DELIVERED (pressing Enter if it still sits in the composer);
  not → back to PENDING. An earlier identical message, or one that contains this
  one, is in both counts, so it cannot pass for this one. So a crash neither loses
  nor repeats it.
* Oldest first per receiver, one message per ready edge (the next one goes when
  the receiver finishes the turn the previous one started).
* A receiver that vanishes fails its undelivered messages and each sender that
  is a terminal is told so in its own inbox.
* A locked database delays a delivery (retried shortly), never loses or repeats it.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import re

from ..bus import EventBus
from ..errors import AgentExited, BackendError, InvalidInput, NotFound, StoreBusy, StoreFault
from ..events import ComposerChanged, Event, InboxDelivered, InboxFailed, InboxQueued, StatusChanged, TerminalRemoved
from ..models import TERMINAL_ID_RE, InboxMessage, MessageStatus
from ..providers.base import Screen
from ..settings import Settings
from ..store import Store
from ..tasks import TaskGroup
from .input import InputService, is_ready_for_input, neutralise
from .status.monitor import StatusMonitor
from .status.view import TerminalView
from .terminals.names import check_terminal_id
from .terminals.service import TerminalService

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 1_000_000
SYSTEM_SENDER = "cao"
# A delivery that met a locked database is tried again this soon (then the sweep).
BUSY_RETRY_S = 1.0
# The mark covers this many rows above the cursor: CLIs draw the echo of a submitted
# message up to 5 rows above where the cursor sat (Gemini CLI; Qwen Code 4, Claude Code 1).
MARK_ROWS_ABOVE = 10
# How the CLIs show a long paste in their composer instead of its text (recorded in
# tests/fixtures/paste/). Once submitted, every one of them shows the full text.
PASTE_SUMMARIES = (
    re.compile(r"\[Pasted text: (\d+) chars"),  # mock_cli (with its size)
    re.compile(r"\[Pasted text #\d+(?: \+\d+ lines)?\]"),  # Claude Code
    re.compile(r"\[Pasted Text: \d+ lines\]"),  # Gemini CLI
    re.compile(r"\[Pasted Content \d+ chars\]"),  # Codex, Qwen Code
)


class InboxService:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        bus: EventBus,
        terminals: TerminalService,
        monitor: StatusMonitor,
        input_service: InputService,
        tasks: TaskGroup,
    ):
        self.settings = settings
        self.store = store
        self.bus = bus
        self.terminals = terminals
        self.monitor = monitor
        self.input = input_service
        self.tasks = tasks
        self._sweeper: asyncio.Task | None = None
        self._retrying: set[str] = set()  # receivers with a delivery retry scheduled
        self._settling: set[int] = set()  # messages whose fate this process is writing

    async def post(self, receiver_id: str, sender_id: str, message: str) -> InboxMessage:
        check_terminal_id(receiver_id)
        if not sender_id or len(sender_id) > 128:
            raise InvalidInput("sender_id is required (at most 128 characters)")
        if not message:
            raise InvalidInput("message must not be empty")
        if len(message) > MAX_MESSAGE_CHARS:
            raise InvalidInput(f"message too long: {len(message)} characters (limit {MAX_MESSAGE_CHARS})")
        if sender_id == receiver_id:
            raise InvalidInput("a terminal cannot send a message to itself")
        term = await self.store.run(self.store.get_terminal, receiver_id)
        if term is None or term.gone:
            raise NotFound(f"receiver terminal {receiver_id} not found")
        msg = await self.store.run(self.store.add_message, sender_id, receiver_id, message)
        self.bus.publish(InboxQueued(msg.id, receiver_id, sender_id, message))
        self.tasks.spawn(self.deliver_pending(receiver_id), f"deliver:{receiver_id}")
        return msg

    async def list(self, receiver_id: str, status: MessageStatus | None, limit: int) -> list[InboxMessage]:
        check_terminal_id(receiver_id)
        return await self.store.run(self.store.list_messages, receiver_id, status, limit)

    # --- delivery -----------------------------------------------------------------
    async def deliver_pending(self, receiver_id: str) -> bool:
        """Deliver the receiver's oldest pending message if it is ready. True if one went in."""
        try:
            return await self._deliver_pending(receiver_id)
        except StoreFault as exc:
            log.warning("delivery to %s deferred: %s", receiver_id, exc)
            self._retry_soon(receiver_id)
            return False

    async def _deliver_pending(self, receiver_id: str) -> bool:
        lock = self.input.lock(receiver_id)
        async with lock:
            view = self.monitor.view(receiver_id)
            if view is None or not is_ready_for_input(view.status, self._eager(view)):
                return False
            if view.composer_has_text:
                return False  # someone is typing there; a paste would mangle both texts
            msg = await self.store.run(self.store.next_pending, receiver_id)
            if msg is None:
                return False
            try:
                window_id = await self.terminals.window(receiver_id)
            except (NotFound, AgentExited):
                return False  # removed or gone: its messages are failed by on_removed / the sweep
            mark = await self._mark(msg, window_id)
            if not await self.store.run(self.store.claim, msg, mark):
                return False
            self._settling.add(msg.id)
            try:
                try:
                    await self.input.submit(receiver_id, window_id, msg.message)
                except AgentExited:
                    # Refused inside tmux before anything was pasted: it waits for a live receiver.
                    await self._settle(msg, MessageStatus.PENDING)
                    return False
                except Exception as exc:
                    # The paste may or may not have happened: the pane decides.
                    log.exception("delivery of message %s to %s failed", msg.id, receiver_id)
                    await self._reconcile(msg, str(exc))
                    return False
                await self._settle(msg, MessageStatus.DELIVERED)
            finally:
                self._settling.discard(msg.id)
            return True

    async def _settle(self, msg: InboxMessage, status: MessageStatus, error: str | None = None) -> None:
        """Write a message's fate; a locked database is waited out (the fate is known here,
        nobody else may guess it meanwhile: `_settling` keeps the sweep away)."""
        while True:
            try:
                await self.store.run(self.store.finish_message, msg.id, status, error)
                break
            except StoreBusy as exc:  # Store.run already waited for the lock
                log.warning("message %s: recording %s deferred: %s", msg.id, status.value, exc)
            except StoreFault as exc:  # a failing database answers at once: try again shortly
                log.warning("message %s: recording %s deferred: %s", msg.id, status.value, exc)
                await asyncio.sleep(BUSY_RETRY_S)
        if status == MessageStatus.DELIVERED:
            self.bus.publish(InboxDelivered(msg.id, msg.receiver_id, msg.sender_id))

    def _retry_soon(self, receiver_id: str) -> None:
        if receiver_id in self._retrying:
            return
        self._retrying.add(receiver_id)

        def again() -> None:
            self._retrying.discard(receiver_id)
            self.tasks.spawn(self.deliver_pending(receiver_id), f"deliver:{receiver_id}")

        asyncio.get_running_loop().call_later(BUSY_RETRY_S, again)

    def _eager(self, view: TerminalView | None) -> bool:
        return bool(self.settings.eager_inbox_delivery and view and view.provider.accepts_input_while_busy)

    async def on_status(self, event: Event) -> None:
        assert isinstance(event, StatusChanged)
        if is_ready_for_input(event.status, self._eager(self.monitor.view(event.terminal_id))):
            await self.deliver_pending(event.terminal_id)

    async def on_composer(self, event: Event) -> None:
        """A composer emptied: a message held back while someone typed there can go now. The
        status may not change when typed text is erased (idle before, idle after), so this fact
        is what ends the wait."""
        assert isinstance(event, ComposerChanged)
        if event.has_text:
            return
        view = self.monitor.view(event.terminal_id)
        if view is not None and is_ready_for_input(view.status, self._eager(view)):
            await self.deliver_pending(event.terminal_id)

    async def on_removed(self, event: Event) -> None:
        assert isinstance(event, TerminalRemoved)
        why = (
            "receiver terminal was deleted"
            if event.reason in ("", "deleted")
            else f"receiver terminal is gone ({event.reason})"
        )
        failed = await self.store.run(self.store.fail_pending_for, event.terminal_id, why)
        await self._notify_senders(failed)

    async def _fail(self, messages: builtins.list[InboxMessage], reason: str) -> None:  # (`list` is a method)
        for msg in messages:
            await self.store.run(self.store.finish_message, msg.id, MessageStatus.FAILED, reason)
            msg.error = reason
        await self._notify_senders(messages)

    async def _notify_senders(self, messages: builtins.list[InboxMessage]) -> None:
        for msg in messages:
            self.bus.publish(InboxFailed(msg.id, msg.receiver_id, msg.sender_id, msg.error or ""))
            if TERMINAL_ID_RE.match(msg.sender_id):
                sender = await self.store.run(self.store.get_terminal, msg.sender_id)
                if sender is not None and not sender.gone:
                    note = (
                        f"[cao] Your message #{msg.id} to terminal {msg.receiver_id} was not delivered: "
                        f"{msg.error}. Its text began: {msg.message[:200]!r}"
                    )
                    notice = await self.store.run(self.store.add_message, SYSTEM_SENDER, msg.sender_id, note)
                    self.bus.publish(InboxQueued(notice.id, msg.sender_id, SYSTEM_SENDER, note))
                    self.tasks.spawn(self.deliver_pending(msg.sender_id), f"deliver:{msg.sender_id}")

    # --- crash recovery and safety net --------------------------------------------
    async def recover(self) -> None:
        """After a restart: settle messages caught mid-delivery, then deliver what waits."""
        await self.settle_in_flight("cao-server stopped during delivery")
        await self.sweep_once()

    async def settle_in_flight(self, why: str) -> None:
        """Decide the fate of DELIVERING rows nobody is delivering right now. Until that is
        decided a receiver gets nothing newer (next_pending), so order survives a crash."""
        for msg in await self.store.run(self.store.messages_in_status, MessageStatus.DELIVERING):
            if msg.id in self._settling:
                continue  # a live delivery owns it
            async with self.input.lock(msg.receiver_id):
                current = await self.store.run(self.store.get_message, msg.id)
                if current is not None and current.status == MessageStatus.DELIVERING and msg.id not in self._settling:
                    await self._reconcile(current, why)

    async def _reconcile(self, msg: InboxMessage, why: str) -> None:
        """Did this message's paste land? Read the pane from where it would have landed."""
        try:
            window_id = await self.terminals.window(msg.receiver_id)
            landed = await self._paste_landed(msg, window_id)
        except NotFound:
            await self._fail([msg], "receiver terminal no longer exists")
            return
        except AgentExited:
            landed = False
        except BackendError as exc:
            # tmux cannot tell now (e.g. its server just died): undecided, the row stays
            # DELIVERING until the sweep or the receiver's removal settles it.
            log.warning("message %s to %s: cannot read the pane (%s); deciding later", msg.id, msg.receiver_id, exc)
            return
        if landed:
            if await self._composer_has_text(msg.receiver_id, window_id):
                try:
                    await self.input.send_keys(window_id, ["Enter"])  # pasted, never submitted
                except AgentExited:
                    pass  # it landed; the agent died after
            await self._settle(msg, MessageStatus.DELIVERED)
        else:
            log.info("message %s not in %s's pane after its mark (%s): back to pending", msg.id, msg.receiver_id, why)
            await self._settle(msg, MessageStatus.PENDING)

    async def _mark(self, msg: InboxMessage, window_id: str) -> str | None:
        """Where the paste will land, and how often the message already shows from there on:
        "<history size>,<cursor row>,<count>"."""
        backend = self.terminals.backend
        position = await backend.position(window_id)
        if position is None:
            return None
        history, row = position
        region = await backend.capture(window_id, start=max(row - MARK_ROWS_ABOVE, -history))
        return f"{history},{row},{occurrences(msg.message, region)}"

    async def _paste_landed(self, msg: InboxMessage, window_id: str) -> bool:
        """The message shows more often from its mark on than it did before the paste."""
        backend = self.terminals.backend
        now = await backend.position(window_id)
        mark = _parse_mark(msg.paste_mark)
        if mark is None or now is None or now[0] < mark[0]:
            # No mark (a row from an older cao) or the history was cleared since: only the
            # visible screen can still show it.
            return paste_landed(msg.message, mark[2] if mark else 0, await backend.capture(window_id))
        history, row, before = mark
        # capture-pane counts lines from the top of the visible screen (history is negative).
        start = max(history + row - MARK_ROWS_ABOVE - now[0], -now[0])
        return paste_landed(msg.message, before, await backend.capture(window_id, start=start))

    async def _composer_has_text(self, receiver_id: str, window_id: str) -> bool:
        """Read from the pane itself: after a restart the monitor may not have a screen yet."""
        view = self.monitor.view(receiver_id)
        if view is None:
            return False
        visible = await self.terminals.backend.capture(window_id)
        return view.provider.read_status(Screen(visible.rstrip("\n").split("\n"))).composer_has_text

    async def sweep_once(self) -> None:
        await self.settle_in_flight("delivery was interrupted")
        for receiver in await self.store.run(self.store.receivers_with_pending):
            if self.monitor.view(receiver) is None:
                term = await self.store.run(self.store.get_terminal, receiver)
                if term is None or term.gone:
                    failed = await self.store.run(
                        self.store.fail_pending_for, receiver, "receiver terminal no longer exists"
                    )
                    await self._notify_senders(failed)
                continue
            await self.deliver_pending(receiver)

    def start_sweeper(self) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(self.settings.inbox_sweep_seconds)
                try:
                    await self.sweep_once()
                except Exception:
                    log.exception("inbox sweep failed")

        self._sweeper = self.tasks.spawn(loop(), "inbox-sweep")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)


def _parse_mark(mark: str | None) -> tuple[int, int, int] | None:
    parts = (mark or "").split(",")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


def paste_landed(message: str, count_at_mark: int, region: str) -> bool:
    """The rule crash recovery decides by: the same rows show the message more often now."""
    return occurrences(message, region) > count_at_mark


def occurrences(message: str, region: str) -> int:
    """How often a part of a pane shows the message: its last non-blank line, whitespace-
    folded (terminals wrap and trim), plus every CLI summary of a long paste (the mock's
    must name the message's size)."""
    typed = neutralise(message)
    lines = [" ".join(line.split()) for line in typed.splitlines() if line.strip()]
    count = " ".join(region.split()).count(lines[-1][-200:]) if lines else 0
    size = str(len(typed))
    for line in region.splitlines():
        for pattern in PASTE_SUMMARIES:
            found = pattern.search(line)
            if found and (not found.groups() or found.group(1) == size):
                count += 1
    return count
