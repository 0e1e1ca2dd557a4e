"""The `<cao-memory>` block a new agent's first task carries: its memories, most relevant first,
each whole or with only its newest entries, and never more than the budget (CAO_MEMORY_INJECT_CHARS)
in characters, markers included. No memory that fits: no block, the task goes as it is.
"""

from __future__ import annotations

from ..store.memories import MemoryRecord

OPEN, CLOSE = "<cao-memory>", "</cao-memory>"
HEADER = (
    "Memories cao keeps for you, most relevant first (memory_recall finds more, memory_store adds, "
    "memory_forget drops one):"
)
MAX_INJECTED = 20  # memories considered for one block


def render(record: MemoryRecord, newest: int | None = None) -> str:
    """One memory: a line naming it, then its dated entries (the `newest` ones only, if given)."""
    tags = f" [{', '.join(record.tags)}]" if record.tags else ""
    lines = [f"- {record.key} ({record.scope}, {record.memory_type}){tags}:"]
    entries = record.entries if newest is None else record.entries[-newest:]
    if newest is not None and newest < len(record.entries):
        lines.append(f"  ({len(record.entries) - newest} older entries left out)")
    for entry in entries:
        text = entry["text"].replace("\n", "\n    ")
        lines.append(f"  {entry['at'][:10]}: {text}")
    return "\n".join(lines)


def build_block(records: list[MemoryRecord], budget: int) -> tuple[str, list[int]]:
    """The block and the ids of the memories in it; ("", []) when none fits."""
    used = len(OPEN) + len(HEADER) + len(CLOSE) + 2  # the markers, the header, their newlines
    parts: list[str] = []
    ids: list[int] = []
    for record in records:
        room = budget - used - 1  # the newline before it
        piece = render(record)
        newest = len(record.entries)
        while len(piece) > room and newest > 1:
            newest -= 1
            piece = render(record, newest)
        if len(piece) > room:
            continue
        parts.append(piece)
        ids.append(record.id)
        used += len(piece) + 1
    if not parts:
        return "", []
    return "\n".join([OPEN, HEADER, *parts, CLOSE]), ids


def with_block(block: str, task: str) -> str:
    return f"{block}\n\n{task}" if block else task
