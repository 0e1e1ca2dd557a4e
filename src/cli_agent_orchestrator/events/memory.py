"""Memories stored and forgotten (memory/service.py publishes them after the write commits).
The text itself is not in the event: it is the user's data, read through `cao memory show`."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Event


@dataclass(frozen=True)
class MemoryStored(Event):
    """A memory was created (`created`) or got a new dated entry, by an agent (`terminal_id`) or
    the user (None); also one per memory an import wrote."""

    memory_id: int
    key: str
    scope: str
    scope_id: str
    memory_type: str
    terminal_id: str | None = None
    created: bool = True

    @property
    def topic(self) -> str:
        return "memory.stored"


@dataclass(frozen=True)
class MemoryForgotten(Event):
    """A memory was deleted, by an agent (`terminal_id`) or the user (None)."""

    memory_id: int
    key: str
    scope: str
    scope_id: str
    terminal_id: str | None = None

    @property
    def topic(self) -> str:
        return "memory.forgotten"
