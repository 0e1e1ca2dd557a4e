"""Reading the mock agent's raw terminal input: how long the escape sequence at a position is
(a lone Esc key, SS3, Alt+key, CSI), and its settings from `CAO_MOCK_*` environment variables.
"""

from __future__ import annotations

import json
import os


def escape_length(text: str, i: int) -> int:
    """Length of the escape sequence at text[i] ("\\x1b"), 0 when it is incomplete."""
    n = len(text)
    if i + 1 >= n:
        return 0
    kind = text[i + 1]
    if kind == "\x1b":
        return 1  # ESC ESC: the first one is a lone Esc key
    if kind == "O":  # SS3: one more character
        return 3 if i + 2 < n else 0
    if kind != "[":
        return 2  # Alt+key
    j = i + 2
    while j < n and j - i < 64:
        c = text[j]
        if "\x40" <= c <= "\x7e":
            return j - i + 1
        if not "\x20" <= c <= "\x3f":
            return j - i  # malformed: drop what we have, re-read c as ordinary input
        j += 1
    return 0 if j >= n and j - i < 64 else j - i


def env_ms(name: str, default: float) -> float:
    try:
        return max(float(os.environ.get(name, default)), 0.0) / 1000.0
    except ValueError:
        return default / 1000.0


def env_argv(name: str) -> list[str]:
    try:
        argv = json.loads(os.environ.get(name) or "[]")
    except json.JSONDecodeError:
        return []
    return [str(a) for a in argv] if isinstance(argv, list) else []


def env_int(name: str) -> int:
    try:
        return max(int(os.environ.get(name, "0")), 0)
    except ValueError:
        return 0
