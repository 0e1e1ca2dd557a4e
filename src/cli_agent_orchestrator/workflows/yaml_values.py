"""How the YAML grammar reads raw values and names them in its messages: names (ids and
spec names), a field left empty, and a hostile value shown short and on one line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

NAME_RE = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")


def given(data: Mapping[str, Any], key: str, default: Any) -> Any:
    """The field's value, or `default` when it is absent or empty (YAML null)."""
    value = data.get(key)
    return default if value is None else value


def is_name(value: object) -> bool:
    # fullmatch: NAME_RE's `$` alone would also accept a trailing newline
    return isinstance(value, str) and NAME_RE.fullmatch(value) is not None


def kind(value: object) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
        type(None): "empty (null)",
    }.get(type(value), type(value).__name__)


def show(value: object, limit: int = 80) -> str:
    """A value for an error message: quoted, on one line, cut short."""
    if isinstance(value, (list, dict, set)):
        return kind(value)  # never str() a container: YAML aliases can make it astronomically big
    text = " ".join(value.split()) if isinstance(value, str) else str(value)
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"'{text}'"
