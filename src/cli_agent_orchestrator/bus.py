"""The event bus: the spine between readers and consumers (seed 003).

* wildcard topics (`terminal.*.status`, `*` matches one dot-separated segment,
  a trailing `#` matches the rest),
* thread-safe `publish` (from any thread; delivery happens on the loop),
* one bounded queue per subscriber (`CAO_EVENT_BUS_MAX_QUEUE_SIZE`): when full,
  droppable events (terminal output) are dropped and counted; lossless events
  (status and lifecycle facts) are always queued, so a status edge is never lost,
* a consumer that raises does not stop the others: the failure is recorded and
  visible through `failures` (served by the API).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from .events import ConsumerFailed, Event

log = logging.getLogger(__name__)

Handler = Callable[[Event], Awaitable[None] | None]
# At stop, how long the consumers together may take to handle what is already queued for them.
STOP_DRAIN_S = 1.0


def topic_matches(pattern: str, topic: str) -> bool:
    pat = pattern.split(".")
    top = topic.split(".")
    for i, part in enumerate(pat):
        if part == "#":
            return True
        if i >= len(top):
            return False
        if part != "*" and part != top[i]:
            return False
    return len(pat) == len(top)


@dataclass
class Subscription:
    name: str
    pattern: str
    handler: Handler | None  # None: the subscriber reads `queue` itself (see `stream`)
    max_size: int
    queue: collections.deque = field(default_factory=collections.deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    dropped: int = 0
    closed: bool = False
    # Told about each dropped event, so a consumer can repair its state (the status
    # monitor re-reads that terminal's screen from tmux).
    on_drop: Callable[[Event], None] | None = None
    # Only events of these classes are queued (empty: all): a status waiter never holds the
    # terminal's output in its queue.
    kinds: tuple[type[Event], ...] = ()
    # A consumer's task: handling an event now (busy), and set whenever its queue runs empty.
    busy: bool = False
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, event: Event) -> None:
        if len(self.queue) >= self.max_size and not event.lossless:
            self.dropped += 1
            if self.on_drop is not None:
                self.on_drop(event)
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("event bus: subscriber %s full, dropped %d output events so far", self.name, self.dropped)
            return
        self.queue.append(event)
        self.wakeup.set()


class EventBus:
    def __init__(self, max_queue_size: int = 1024):
        self.max_queue_size = max_queue_size
        self._subs: list[Subscription] = []
        self._tasks: list[asyncio.Task] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self.failures: collections.deque[ConsumerFailed] = collections.deque(maxlen=200)
        # Told of each event as it is published, in the publisher's context (the plugin
        # dispatcher notes which actor caused it there); they must be quick and not raise.
        self._publish_observers: list[Callable[[Event], None]] = []

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()

    def subscribe(
        self, name: str, pattern: str, handler: Handler, on_drop: Callable[[Event], None] | None = None
    ) -> Subscription:
        """Register a consumer; it runs as one task, handling events in order."""
        sub = Subscription(name, pattern, handler, self.max_queue_size, on_drop=on_drop)
        self._subs.append(sub)
        if self._loop is not None:
            self._tasks.append(self._loop.create_task(self._drain(sub), name=f"bus:{name}"))
        return sub

    def observe_publish(self, observer: Callable[[Event], None]) -> None:
        """Call `observer(event)` synchronously for every event, in the publisher's context."""
        self._publish_observers.append(observer)

    def open_stream(
        self, name: str, pattern: str, max_size: int | None = None, kinds: tuple[type[Event], ...] = ()
    ) -> Subscription:
        """A subscription read by its owner with `next_event` (waiters, websockets); with
        `kinds`, only events of those classes."""
        sub = Subscription(name, pattern, None, max_size or self.max_queue_size, kinds=kinds)
        self._subs.append(sub)
        return sub

    def close_stream(self, sub: Subscription) -> None:
        sub.closed = True
        sub.wakeup.set()
        if sub in self._subs:
            self._subs.remove(sub)

    async def next_event(self, sub: Subscription, timeout: float | None = None) -> Event | None:
        """The next event of a stream, or None on timeout/close."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not sub.queue:
            if sub.closed:
                return None
            sub.wakeup.clear()
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return None
            try:
                # asyncio.timeout, not wait_for: no extra task, so the waiter runs in the same
                # loop turn as the publish that woke it, not one turn (another callback) later.
                async with asyncio.timeout(remaining):
                    await sub.wakeup.wait()
            except TimeoutError:
                return None
        return sub.queue.popleft()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.bind(loop)
        for sub in self._subs:
            if sub.handler is not None:
                self._tasks.append(loop.create_task(self._drain(sub), name=f"bus:{sub.name}"))

    async def stop(self, drain_s: float = STOP_DRAIN_S) -> None:
        """Stop the consumers, once each has handled what was already queued for it (at most
        `drain_s` for all): an event published just before the stop (a plugin's last events)
        still reaches its consumer. What is left after that is counted in the log."""
        if drain_s > 0:
            try:
                async with asyncio.timeout(drain_s):
                    await self._drained()
            except TimeoutError:
                pass
        left = {s.name: len(s.queue) for s in self._subs if s.handler is not None and s.queue}
        if left:
            log.warning("event bus: stopped with events not yet handled: %s", left)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    def publish(self, event: Event) -> None:
        """Publish from any thread. On the loop thread delivery to queues is immediate."""
        if self._loop is not None and threading.get_ident() != self._loop_thread:
            self._loop.call_soon_threadsafe(self._dispatch, event)
        else:
            self._dispatch(event)

    def _dispatch(self, event: Event) -> None:
        topic = event.topic
        for observe in self._publish_observers:
            observe(event)
        for sub in list(self._subs):
            if topic_matches(sub.pattern, topic) and (not sub.kinds or isinstance(event, sub.kinds)):
                sub.offer(event)

    def record_failure(self, consumer: str, topic: str, exc: BaseException) -> None:
        """A consumer's own task failed on something: keep it where /diagnostics shows it."""
        failure = ConsumerFailed(consumer, topic, f"{type(exc).__name__}: {exc}")
        self.failures.append(failure)
        self._dispatch(failure)

    def stats(self) -> list[dict]:
        return [
            {"name": s.name, "pattern": s.pattern, "queued": len(s.queue), "dropped": s.dropped} for s in self._subs
        ]

    async def _drained(self) -> None:
        """Return once every consumer has handled everything queued for it."""
        for sub in self._subs:
            while sub.handler is not None and (sub.queue or sub.busy):
                sub.idle.clear()
                await sub.idle.wait()

    async def _drain(self, sub: Subscription) -> None:
        while True:
            while not sub.queue:
                sub.busy = False
                sub.idle.set()
                sub.wakeup.clear()
                await sub.wakeup.wait()
            sub.busy = True
            event = sub.queue.popleft()
            try:
                result = sub.handler(event)  # type: ignore[misc]
                if asyncio.iscoroutine(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a consumer failure must not stop the others
                log.exception("event bus: consumer %s failed on %s", sub.name, event.topic)
                if isinstance(event, ConsumerFailed):
                    self.failures.append(ConsumerFailed(sub.name, event.topic, f"{type(exc).__name__}: {exc}"))
                else:
                    self.record_failure(sub.name, event.topic, exc)
