"""The inbox's facts: a message queued, delivered, or failed."""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import HOOK_ONLY, Event


@dataclass(frozen=True)
class InboxQueued(Event):
    message_id: int
    receiver_id: str
    sender_id: str
    # The text, for the post_send_message hook only (HOOK_ONLY): never in an event's `data`,
    # the audit log, webhooks or the SSE stream, which carry ids as they always have.
    message: str = field(default="", repr=False, metadata={HOOK_ONLY: True})

    @property
    def topic(self) -> str:
        return f"inbox.{self.receiver_id}.queued"


@dataclass(frozen=True)
class InboxDelivered(Event):
    message_id: int
    receiver_id: str
    sender_id: str

    @property
    def topic(self) -> str:
        return f"inbox.{self.receiver_id}.delivered"


@dataclass(frozen=True)
class InboxFailed(Event):
    message_id: int
    receiver_id: str
    sender_id: str
    reason: str = ""

    @property
    def topic(self) -> str:
        return f"inbox.{self.receiver_id}.failed"
