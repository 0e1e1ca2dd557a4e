"""The base of every bus fact, and the bus's own fact (a consumer that failed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class Event:
    lossless: ClassVar[bool] = True

    @property
    def topic(self) -> str:  # pragma: no cover - every event overrides it
        raise NotImplementedError


@dataclass(frozen=True)
class ConsumerFailed(Event):
    """A consumer raised while handling an event; recorded, never swallowed."""

    consumer: str
    topic_of_event: str
    error: str
    extra: dict = field(default_factory=dict)

    @property
    def topic(self) -> str:
        return "bus.consumer_failed"
