"""`GET /events` read as a client would: Server-Sent Events frames from a real cao-server,
parsed as they arrive, with a deadline on every wait."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from cao_support import CaoServer

# cao-server sends a keepalive comment every 15 s, so a read never blocks longer than this.
READ_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Frame:
    event: str  # the bus event's class name: StatusChanged, InboxQueued, ...
    data: dict  # its JSON body: type, topic and the event's fields


class EventStream:
    """`with EventStream(server, "terminal.*.status") as events:` follows the bus from the
    moment the server said `: connected` (subscribed); `events.until(...)` reads on."""

    def __init__(self, server: CaoServer, pattern: str):
        self.server, self.pattern = server, pattern
        self.frames: list[Frame] = []  # everything read so far, in order

    def __enter__(self) -> EventStream:
        self._client = httpx.Client(base_url=self.server.url, timeout=httpx.Timeout(10, read=READ_TIMEOUT_S))
        self._stream = self._client.stream("GET", "/events", params={"pattern": self.pattern})
        self.response = self._stream.__enter__()
        assert self.response.status_code == 200, self.response.read()
        assert self.response.headers["content-type"].startswith("text/event-stream")
        self._lines = self.response.iter_lines()
        first = next(self._lines)
        assert first == ": connected", first
        return self

    def __exit__(self, *exc) -> None:
        self._stream.__exit__(*exc)
        self._client.close()

    def until(self, predicate: Callable[[Frame], bool], timeout: float = 15.0, message: str = "an event") -> Frame:
        """Read frames until one satisfies `predicate`; fail after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        event, data = None, None
        for line in self._lines:
            if line.startswith("event: "):
                event = line[len("event: ") :]
            elif line.startswith("data: "):
                data = json.loads(line[len("data: ") :])
            elif line == "" and data is not None:
                frame = Frame(event or "", data)
                self.frames.append(frame)
                event, data = None, None
                if predicate(frame):
                    return frame
            if time.monotonic() > deadline:
                break
        raise AssertionError(
            f"timed out after {timeout}s waiting for {message}; read: {[f.data for f in self.frames][-20:]}"
        )
