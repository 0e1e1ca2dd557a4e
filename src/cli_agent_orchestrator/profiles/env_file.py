"""`<home>/.env`: the values a profile's `${VAR}` reads, kept 0600 in the cao home.

One reader for everyone who expands a profile, and one editor (`cao env`) that changes a
single `KEY=value` line and keeps every other line of the file (comments included) as it was.
Invariant: every writer holds `.env.lock` across its read-modify-write and replaces the file
by rename, so no change is lost to a concurrent one and a reader never sees half a file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import InvalidInput
from ..private_files import exclusive_lock, private_home, replace_private

ENV_FILE_NAME = ".env"
ENV_LOCK_NAME = ".env.lock"
KEY_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
_QUOTES = ("'", '"')


def env_path(home: Path) -> Path:
    return home / ENV_FILE_NAME


@contextmanager
def env_write_lock(home: Path) -> Iterator[None]:
    """Held by every writer of `<home>/.env` from its read to its rename (`cao env`,
    `cao install --env`); the home is checked (and made, 0700) first."""
    private_home(home)
    with exclusive_lock(home / ENV_LOCK_NAME):
        yield


def _split(line: str) -> tuple[str, str] | None:
    """(key, raw value) of a `KEY=value` line (an `export ` prefix is allowed), else None."""
    if "=" not in line or line.lstrip().startswith("#"):
        return None
    key, raw = line.split("=", 1)
    key = key.strip()
    if key.startswith("export "):
        key = key[len("export ") :].strip()
    return key, raw


def _unquote(raw: str) -> str:
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in _QUOTES:
        return value[1:-1]
    return value


def _quote(value: str) -> str:
    # Written so that _unquote gives back exactly `value`: outer blanks or quotes need a wrap.
    if value != value.strip() or value[:1] in _QUOTES or value[-1:] in _QUOTES:
        return f'"{value}"'
    return value


def read_env_values(home: Path) -> dict[str, str]:
    """Every `KEY=value` of `<home>/.env` (a missing file is empty); the last one wins."""
    path = env_path(home)
    values: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            pair = _split(line)
            if pair:
                values[pair[0]] = _unquote(pair[1])
    return values


def check_key(key: str) -> str:
    if not KEY_RE.match(key):
        raise InvalidInput(f"invalid variable name {key!r}: use a letter or _ then letters, digits or _")
    return key


def check_value(key: str, value: str) -> str:
    if any(ch in value for ch in "\n\r\0"):
        raise InvalidInput(f"the value of {key} must be a single line (no newline, carriage return or NUL)")
    return value


def check_values(values: dict[str, str]) -> None:
    for key, value in values.items():
        check_value(check_key(key), value)


def set_env_value(home: Path, key: str, value: str) -> bool:
    """Set `key` (replacing its line in place, or appending one); True when it existed."""
    check_key(key)
    check_value(key, value)
    with env_write_lock(home):
        lines, found = _lines_without(home, key, replacement=f"{key}={_quote(value)}")
        if not found:
            lines.append(f"{key}={_quote(value)}")
        _write(home, lines)
    return found


def env_text_with(home: Path, values: dict[str, str]) -> str:
    """The text `<home>/.env` would hold with each of `values` set as `set_env_value` sets
    it, without writing anything (for a caller that writes several files all or nothing; it
    holds `env_write_lock` from this read until its write)."""
    check_values(values)
    path = env_path(home)
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.is_file() else []
    for key, value in values.items():
        lines, found = _replaced(lines, key, f"{key}={_quote(value)}")
        if not found:
            lines.append(f"{key}={_quote(value)}")
    return "".join(f"{line}\n" for line in lines)


def unset_env_value(home: Path, key: str) -> bool:
    """Remove every line that sets `key`; True when there was one."""
    check_key(key)
    if not env_path(home).is_file():
        return False  # nothing to remove, and no reason to make a home for it
    with env_write_lock(home):
        lines, found = _lines_without(home, key, replacement=None)
        if found:
            _write(home, lines)
    return found


def _lines_without(home: Path, key: str, replacement: str | None) -> tuple[list[str], bool]:
    """The file's lines with those setting `key` replaced (the first) or dropped (the rest)."""
    path = env_path(home)
    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    return _replaced(text.splitlines(), key, replacement)


def _replaced(lines: list[str], key: str, replacement: str | None) -> tuple[list[str], bool]:
    kept: list[str] = []
    found = False
    for line in lines:
        pair = _split(line)
        if pair and pair[0] == key:
            if not found and replacement is not None:
                kept.append(replacement)
            found = True
            continue
        kept.append(line)
    return kept, found


def _write(home: Path, lines: list[str]) -> None:
    replace_private(env_path(home), "".join(f"{line}\n" for line in lines))
