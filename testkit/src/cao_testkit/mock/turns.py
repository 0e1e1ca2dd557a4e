"""What the mock agent does with one submitted message: the magic inputs (`__mock_sleep_N`,
`__mock_error__`, `__mock_ask__`, `__mock_long_N`) planned as turns; anything else is a reply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_LONG_LINES = 1_000_000

_SLEEP_RE = re.compile(r"__mock_sleep_(\d+(?:\.\d+)?)")
_LONG_RE = re.compile(r"__mock_long_(\d+)")


@dataclass(frozen=True)
class Turn:
    message: str
    seconds: float  # how long the working indicator stays up
    kind: str  # "reply" | "error" | "ask"
    text: str | None = None  # fixed reply of a magic input; None -> compute_reply


def plan_turn(message: str, delay: float) -> Turn:
    """Recognise magic inputs (whole message, stripped); everything else is a reply."""
    cmd = message.strip()
    if m := _SLEEP_RE.fullmatch(cmd):
        return Turn(message, float(m[1]), "reply", f"MOCK: slept {m[1]}s")
    if cmd == "__mock_error__":
        return Turn(message, delay, "error")
    if cmd == "__mock_ask__":
        return Turn(message, delay, "ask")
    if m := _LONG_RE.fullmatch(cmd):
        n = min(int(m[1]), MAX_LONG_LINES)
        return Turn(message, delay, "reply", "\n".join(f"MOCK: line {i} of {n}" for i in range(1, n + 1)))
    return Turn(message, delay, "reply")
