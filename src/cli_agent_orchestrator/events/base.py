"""The base of every bus fact, and the bus's own fact (a consumer that failed)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

# A field's metadata key: the field is for the plugin hook's own arguments only, never shown
# with the event (its `data`, the SSE stream): a message's text, for one.
HOOK_ONLY = "hook_only"


@dataclass(frozen=True)
class Event:
    lossless: ClassVar[bool] = True

    @property
    def topic(self) -> str:  # pragma: no cover - every event overrides it
        raise NotImplementedError


def public_fields(event: Event) -> dict[str, Any]:
    """The event's fields as it is shown (to plugins as `data`, on the SSE stream): HOOK_ONLY
    fields left out."""
    return {f.name: getattr(event, f.name) for f in dataclasses.fields(event) if not f.metadata.get(HOOK_ONLY)}


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
