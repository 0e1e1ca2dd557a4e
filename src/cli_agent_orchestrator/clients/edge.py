"""What every client of cao-server (the `cao` CLI, `cao-mcp-server`) reads from it the same
way: the one-line text of an error's `detail`, and Server-Sent Event frames. HTTP itself
stays with each client (sync for the CLI, async for the MCP server).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any


def describe_detail(detail: Any) -> str:
    """One readable line for any shape of `detail` the server sends: a string, an error
    object `{message, kind, …}`, or a validation list `[{loc, msg, type}]`."""
    if isinstance(detail, str):
        return detail
    if isinstance(detail, dict) and "message" in detail:
        return str(detail["message"])
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                where = ".".join(str(p) for p in item.get("loc", []) if p not in ("body", "query", "path"))
                parts.append(f"{where}: {item.get('msg', 'invalid')}" if where else str(item.get("msg", item)))
            else:
                parts.append(str(item))
        return "; ".join(parts) or "invalid request"
    return str(detail)


@dataclass
class SseFrame:
    event: str = "message"
    id: str | None = None
    data: str = ""


@dataclass
class SseParser:
    """Feed it the stream's lines one at a time; a blank line ends a frame, `:` starts a
    comment (keepalives)."""

    _frame: SseFrame = field(default_factory=SseFrame)
    _data: list[str] = field(default_factory=list)

    def feed(self, line: str) -> SseFrame | None:
        line = line.rstrip("\r\n")
        if not line:
            frame, data = self._frame, self._data
            self._frame, self._data = SseFrame(), []
            if data or frame.id is not None or frame.event != "message":
                frame.data = "\n".join(data)
                return frame
            return None
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self._frame.event = value
        elif name == "id":
            self._frame.id = value
        elif name == "data":
            self._data.append(value)
        return None


def parse_sse(lines: Iterable[str]) -> Iterator[SseFrame]:
    parser = SseParser()
    for line in lines:
        frame = parser.feed(line)
        if frame is not None:
            yield frame
