"""Server-sent-event framing shared by the vendor wire modules."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

# Small chunks, like a real model streams: it exercises the CLIs' delta handling.
CHUNK = 24


def event(data: Any, name: str | None = None) -> str:
    head = f"event: {name}\n" if name else ""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"{head}data: {payload}\n\n"


def chunks(text: str, size: int = CHUNK) -> Iterator[str]:
    for i in range(0, len(text), size):
        yield text[i : i + size]


def approx_tokens(obj: Any) -> int:
    # Usage numbers only need to be plausible; CLIs display them, nobody bills them.
    return max(1, len(json.dumps(obj, ensure_ascii=False)) // 4)
