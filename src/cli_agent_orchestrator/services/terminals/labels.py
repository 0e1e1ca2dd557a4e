"""What workers know of each other: a terminal's description, group and metadata, their bounds,
and who a terminal's siblings are.

Every value is checked here, whichever surface brings it (HTTP, MCP, the CLI): a value out of
bounds is refused whole with a one-line reason (422) and nothing is stored. A group is a path
(`["team-a", "backend"]`): siblings share its first `depth` elements.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable
from typing import Any

from ...errors import Unprocessable
from ...models import Terminal

MAX_DESCRIPTION = 1024  # characters
MAX_GROUP_ITEMS, MAX_GROUP_ITEM = 16, 128  # elements of a group path, characters in each
MAX_METADATA_BYTES = 16 * 1024  # the object as compact UTF-8 JSON
MAX_METADATA_KEY = 128  # characters in a top-level key
MAX_DEPTH = MAX_GROUP_ITEMS


def _printable(text: str) -> bool:
    # No control characters (Cc: newlines, escapes, NUL): these values are shown on boards and in
    # terminals, and an escape sequence in them would be drawn, not shown.
    return not any(unicodedata.category(ch) == "Cc" for ch in text)


def checked_description(value: object) -> str | None:
    """A description: text of at most MAX_DESCRIPTION characters (newlines and tabs allowed);
    empty or None clears it."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise Unprocessable("description must be a string or null")
    if len(value) > MAX_DESCRIPTION:
        raise Unprocessable(f"description too long: {len(value)} characters (limit {MAX_DESCRIPTION})")
    if not _printable(value.replace("\n", "").replace("\t", "")):
        raise Unprocessable("description must not hold control characters other than newline and tab")
    return value


def checked_group(value: object) -> list[str] | None:
    """A group path: at most MAX_GROUP_ITEMS non-empty strings of at most MAX_GROUP_ITEM
    printable characters; an empty list or None clears it."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise Unprocessable("group must be a list of strings or null")
    if len(value) > MAX_GROUP_ITEMS:
        raise Unprocessable(f"group has {len(value)} elements (limit {MAX_GROUP_ITEMS})")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise Unprocessable(f"group[{i}] must be a non-empty string")
        if len(item) > MAX_GROUP_ITEM:
            raise Unprocessable(f"group[{i}] too long: {len(item)} characters (limit {MAX_GROUP_ITEM})")
        if not _printable(item):
            raise Unprocessable(f"group[{i}] must not hold control characters")
    return list(value) or None


def checked_metadata(value: object) -> dict[str, Any] | None:
    """Metadata: a JSON object whose keys are 1-MAX_METADATA_KEY printable characters, at most
    MAX_METADATA_BYTES encoded; an empty object or None clears it."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Unprocessable(f"metadata must be a JSON object or null, not {type(value).__name__}")
    for key in value:
        if not isinstance(key, str) or not key or len(key) > MAX_METADATA_KEY or not _printable(key):
            raise Unprocessable(
                f"metadata key {str(key)[:40]!r} is not allowed: 1-{MAX_METADATA_KEY} characters, no control characters"
            )
    try:
        size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8"))
    except (TypeError, ValueError) as exc:
        raise Unprocessable(f"metadata is not plain JSON: {exc}") from None
    if size > MAX_METADATA_BYTES:
        raise Unprocessable(f"metadata too large: {size} bytes encoded (limit {MAX_METADATA_BYTES})")
    return dict(value) or None


def checked_depth(depth: object) -> int:
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
        raise Unprocessable(f"depth must be an integer from 1 to {MAX_DEPTH}, got {depth!r}")
    return depth


def siblings_among(me: Terminal, others: Iterable[Terminal], depth: int, cross_session: bool = False) -> list[Terminal]:
    """`me`'s siblings among `others`, live ones only. With a group: the terminals whose group
    starts with the first `depth` elements of mine (all of mine when it is shorter), in my
    session, or in any session with `cross_session`. Without one: every other agent of my
    session (`cross_session` has no group to match across sessions, so it changes nothing)."""
    checked_depth(depth)
    prefix = me.group[:depth] if me.group else None
    out = []
    for term in others:
        if term.id == me.id or term.gone:
            continue
        if prefix is None or not cross_session:
            if term.session_name != me.session_name:
                continue
        if prefix is None or (term.group and term.group[: len(prefix)] == prefix):
            out.append(term)
    return out
