"""Inbox: messages between agents, delivered exactly once, in order.

How the guarantee is kept:
* A message is stored PENDING (committed) before the POST returns.
* Delivery is driven by status events: whenever a receiver becomes idle or
  completed (or at once on POST), `deliver_pending` runs. A slow sweep exists
  only as a named safety net.
* Claiming is one conditional UPDATE (PENDING → DELIVERING): of any number of
  racing deliverers, exactly one wins and pastes. It pastes under the
  receiver's input lock, so pastes never interleave.
* After the paste is submitted the row becomes DELIVERED. If cao-server dies in
  between, the restart finds the row DELIVERING and looks at the receiver's
  screen: the text is there → DELIVERED (pressing Enter if it still sits in the
  composer); not there → back to PENDING. So a crash neither loses nor repeats it.
* Oldest first per receiver, one message per ready edge (the next one goes when
  the receiver finishes the turn the previous one started).
* A receiver that vanishes fails its undelivered messages and each sender that
  is a terminal is told so in its own inbox.
"""
from __future__ import annotations

import asyncio
import logging

from ..bus import EventBus
from ..errors import InvalidInput, NotFound
from ..events import Event, InboxDelivered, InboxFailed, InboxQueued, StatusChanged, TerminalRemoved
from ..models import TERMINAL_ID_RE, InboxMessage, MessageStatus
from ..providers.base import Screen
from ..settings import Settings
from ..store import Store
from .input import InputService, is_ready_for_input, neutralise
from .status import StatusMonitor
from .terminals import TerminalService, check_terminal_id

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 1_000_000
SYSTEM_SENDER = "cao"


class InboxService:
    def __init__(self, settings: Settings, store: Store, bus: EventBus, terminals: TerminalService,
                 monitor: StatusMonitor, typing: InputService):
        self.settings = settings
        self.store = store
        self.bus = bus
        self.terminals = terminals
        self.monitor = monitor
        self.typing = typing
        self._sweeper: asyncio.Task | None = None

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
        self.bus.publish(InboxQueued(msg.id, receiver_id, sender_id))
        self.terminals.spawn_background(self.deliver_pending(receiver_id))
        return msg

    async def list(self, receiver_id: str, status: MessageStatus | None, limit: int) -> list[InboxMessage]:
        check_terminal_id(receiver_id)
        return await self.store.run(self.store.list_messages, receiver_id, status, limit)

    # --- delivery -----------------------------------------------------------------
    async def deliver_pending(self, receiver_id: str) -> bool:
        """Deliver the receiver's oldest pending message if it is ready. True if one went in."""
        lock = self.typing.lock(receiver_id)
        async with lock:
            if not is_ready_for_input(self.monitor.status(receiver_id), self._eager(receiver_id)):
                return False
            if self.monitor.composer_has_text(receiver_id):
                return False  # someone is typing there; a paste would mangle both texts
            msg = await self.store.run(self.store.claim_next, receiver_id)
            if msg is None:
                return False
            try:
                window_id = await self.terminals.window(receiver_id)
                await self.typing.submit(receiver_id, window_id, msg.message)
            except NotFound:
                await self._fail([msg], "receiver terminal no longer exists")
                return False
            except Exception as exc:
                # The paste may or may not have happened: leave it to the restart-style check.
                log.exception("delivery of message %s to %s failed", msg.id, receiver_id)
                await self._reconcile(msg, str(exc))
                return False
            await self.store.run(self.store.finish_message, msg.id, MessageStatus.DELIVERED)
            self.bus.publish(InboxDelivered(msg.id, receiver_id, msg.sender_id))
            return True

    def _eager(self, receiver_id: str) -> bool:
        if not self.settings.eager_inbox_delivery:
            return False
        provider = self.monitor.provider_of(receiver_id)
        return bool(provider and provider.accepts_input_while_busy)

    async def on_status(self, event: Event) -> None:
        assert isinstance(event, StatusChanged)
        if is_ready_for_input(event.status, self._eager(event.terminal_id)):
            await self.deliver_pending(event.terminal_id)

    async def on_removed(self, event: Event) -> None:
        assert isinstance(event, TerminalRemoved)
        failed = await self.store.run(self.store.fail_pending_for, event.terminal_id,
                                      "receiver terminal was deleted")
        await self._notify_senders(failed)

    async def _fail(self, messages: list[InboxMessage], reason: str) -> None:
        for msg in messages:
            await self.store.run(self.store.finish_message, msg.id, MessageStatus.FAILED, reason)
            msg.error = reason
        await self._notify_senders(messages)

    async def _notify_senders(self, messages: list[InboxMessage]) -> None:
        for msg in messages:
            self.bus.publish(InboxFailed(msg.id, msg.receiver_id, msg.sender_id, msg.error or ""))
            if TERMINAL_ID_RE.match(msg.sender_id):
                sender = await self.store.run(self.store.get_terminal, msg.sender_id)
                if sender is not None and not sender.gone:
                    note = (f"[cao] Your message #{msg.id} to terminal {msg.receiver_id} was not delivered: "
                            f"{msg.error}. Its text began: {msg.message[:200]!r}")
                    notice = await self.store.run(self.store.add_message, SYSTEM_SENDER, msg.sender_id, note)
                    self.bus.publish(InboxQueued(notice.id, msg.sender_id, SYSTEM_SENDER))
                    self.terminals.spawn_background(self.deliver_pending(msg.sender_id))

    # --- crash recovery and safety net --------------------------------------------
    async def recover(self) -> None:
        """After a restart: settle messages caught mid-delivery, then deliver what waits."""
        await self.settle_in_flight("cao-server stopped during delivery")
        await self.sweep_once()

    async def settle_in_flight(self, why: str) -> None:
        """Decide the fate of DELIVERING rows nobody is delivering right now. Until that is
        decided a receiver gets nothing newer (claim_next), so order survives a crash."""
        for msg in await self.store.run(self.store.messages_in_status, MessageStatus.DELIVERING):
            lock = self.typing.lock(msg.receiver_id)
            if lock.locked():
                continue  # a live delivery owns it
            async with lock:
                current = await self.store.run(self.store.get_message, msg.id)
                if current is not None and current.status == MessageStatus.DELIVERING:
                    await self._reconcile(current, why)

    async def _reconcile(self, msg: InboxMessage, why: str) -> None:
        try:
            window_id = await self.terminals.window(msg.receiver_id)
            text = await self.terminals.backend.capture(window_id, history=True)
        except NotFound:
            await self._fail([msg], "receiver terminal no longer exists")
            return
        if _visible(msg.message, text):
            if await self._composer_has_text(msg.receiver_id, window_id):
                await self.typing.send_keys(window_id, ["Enter"])  # pasted, never submitted
            await self.store.run(self.store.finish_message, msg.id, MessageStatus.DELIVERED)
            self.bus.publish(InboxDelivered(msg.id, msg.receiver_id, msg.sender_id))
        else:
            log.info("message %s not on %s's screen (%s): back to pending", msg.id, msg.receiver_id, why)
            await self.store.run(self.store.finish_message, msg.id, MessageStatus.PENDING)

    async def _composer_has_text(self, receiver_id: str, window_id: str) -> bool:
        """Read from the pane itself: after a restart the monitor may not have a screen yet."""
        provider = self.monitor.provider_of(receiver_id)
        if provider is None:
            return False
        visible = await self.terminals.backend.capture(window_id)
        return provider.read_status(Screen(visible.rstrip("\n").split("\n"))).composer_has_text

    async def sweep_once(self) -> None:
        await self.settle_in_flight("delivery was interrupted")
        for receiver in await self.store.run(self.store.receivers_with_pending):
            if self.monitor.status(receiver) is None:
                term = await self.store.run(self.store.get_terminal, receiver)
                if term is None or term.gone:
                    failed = await self.store.run(self.store.fail_pending_for, receiver,
                                                  "receiver terminal no longer exists")
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
        self._sweeper = asyncio.get_running_loop().create_task(loop(), name="inbox-sweep")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)


def _visible(message: str, screen_text: str) -> bool:
    """Is the pasted message on the receiver's screen? Compared on its last non-blank
    line, whitespace-folded (terminals wrap and trim). A long paste that the CLI
    summarises (e.g. "[Pasted text: N chars …]") counts when the summary names its size."""
    typed = neutralise(message)
    lines = [" ".join(line.split()) for line in typed.splitlines() if line.strip()]
    if lines and lines[-1][-200:] in " ".join(screen_text.split()):
        return True
    size = str(len(typed))
    return any("[Pasted text" in line and size in line for line in screen_text.splitlines()[-200:])
