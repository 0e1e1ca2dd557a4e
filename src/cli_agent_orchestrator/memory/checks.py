"""The bounds of what the memory store takes, and a key for a memory stored without one.

Every refusal is an InvalidInput with one line that says what was wrong and what is accepted.
"""

from __future__ import annotations

import hashlib
import re

from ..errors import InvalidInput
from .scopes import SORTS

MAX_ENTRY_CHARS = 8_000  # one memory_store's content, after redaction
MAX_MEMORY_CHARS = 32_000  # a memory's entries together; older entries are dropped past it
MAX_KEY_CHARS = 128
MAX_TAGS = 16
MAX_TAG_CHARS = 64
MAX_QUERY_CHARS = 1_000
MAX_LIMIT = 100
MAX_SCOPE_ID_CHARS = 4_096  # a project is a path
AUTO_KEY_WORDS = 6  # a key made from the content: its first words, and a digest of all of it

# Each rule is one regex, stated as such in the HTTP schema (api/memory_routes.py): explicit
# character classes only, so that Python and JSON Schema read them alike.
KEY_RE = re.compile(r"\A[^\x00-\x1f\x7f]*[^ \x00-\x1f\x7f][^\x00-\x1f\x7f]*\Z")  # not blank, no control characters
TAG_RE = re.compile(rf"\A[A-Za-z0-9_.:/+-]{{1,{MAX_TAG_CHARS}}}\Z")
CONTENT_RE = re.compile(r"[^ \t\n\r]")  # (searched) something besides spaces and line breaks
SCOPE_ID_RE = re.compile(r"\A[^\x00-\x1f\x7f]+\Z")
_BLANK = " \t\n\r"
_SLUG_WORD = re.compile(r"[a-z0-9]+")


def check_content(content: object) -> str:
    if not isinstance(content, str) or not CONTENT_RE.search(content):
        raise InvalidInput("content must be a non-empty string")
    if len(content) > MAX_ENTRY_CHARS:
        raise InvalidInput(f"content too long: {len(content)} characters (limit {MAX_ENTRY_CHARS})")
    return content.strip(_BLANK)


def check_key(key: object) -> str:
    if not isinstance(key, str) or not key.strip(" "):
        raise InvalidInput("key must be a non-empty string")
    if len(key) > MAX_KEY_CHARS:
        raise InvalidInput(f"key too long: {len(key)} characters (limit {MAX_KEY_CHARS})")
    if not KEY_RE.match(key):
        raise InvalidInput("key must not contain control characters (newlines, tabs, ...)")
    return key


def check_tags(tags: object) -> list[str]:
    if tags is None:
        return []
    if isinstance(tags, str):  # "a,b" from a command line or a query string
        tags = [t for t in (part.strip() for part in tags.split(",")) if t]
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise InvalidInput("tags must be a list of strings")
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"too many tags: {len(tags)} (limit {MAX_TAGS})")
    for tag in tags:
        if not TAG_RE.match(tag):
            raise InvalidInput(f"invalid tag {tag[:80]!r}: 1-{MAX_TAG_CHARS} of letters, digits and _ . : / + -")
    return list(dict.fromkeys(tags))


def check_query(query: object) -> str | None:
    if query is None or (isinstance(query, str) and not query.strip()):
        return None
    if not isinstance(query, str):
        raise InvalidInput("query must be a string")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(f"query too long: {len(query)} characters (limit {MAX_QUERY_CHARS})")
    return query


def check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be an integer from 1 to {MAX_LIMIT}, got {limit!r}")
    return limit


def check_sort(sort_by: object) -> str:
    if sort_by not in SORTS:
        raise InvalidInput(f"invalid sort_by {sort_by!r}: use one of {', '.join(SORTS)}")
    return str(sort_by)


def check_scope_id(scope: str, scope_id: object) -> str:
    if scope == "global":
        return ""  # it has none: whatever was given is not used
    if not isinstance(scope_id, str) or not scope_id:
        raise InvalidInput(f"the {scope} scope needs a scope id (a {_WHAT[scope]})")
    if len(scope_id) > MAX_SCOPE_ID_CHARS or not SCOPE_ID_RE.match(scope_id):
        raise InvalidInput(
            f"invalid scope id for {scope}: at most {MAX_SCOPE_ID_CHARS} characters, no control characters"
        )
    return scope_id


_WHAT = {"project": "project directory or CAO_PROJECT_ID", "session": "session name", "agent": "agent profile"}


def auto_key(content: str) -> str:
    """A key for a memory stored without one: the same content gets the same key (so storing it
    twice does not make two memories)."""
    words = _SLUG_WORD.findall(content.lower())[:AUTO_KEY_WORDS]
    digest = hashlib.sha256(content.encode("utf-8")).hexdigest()[:8]
    return "-".join([*words, digest])[:MAX_KEY_CHARS]
