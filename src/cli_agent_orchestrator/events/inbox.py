"""The inbox's facts: a message queued, delivered, or failed."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Event


@dataclass(frozen=True)
class InboxQueued(Event):
    message_id: int
    receiver_id: str
    sender_id: str

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
