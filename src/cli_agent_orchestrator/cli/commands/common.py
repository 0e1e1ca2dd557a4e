"""Helpers shared by the subcommands: the client, ids in URLs, output, exec into tmux."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import click

from ...models import TERMINAL_ID_RE
from ..client import CaoClient

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")


@contextmanager
def client() -> Iterator[CaoClient]:
    api = CaoClient.from_env()
    try:
        yield api
    finally:
        api.close()


def env_pairs(pairs: tuple[str, ...]) -> dict[str, str]:
    """`--env KEY=VALUE` (repeatable) as a mapping; a malformed one is a usage error that
    names the key only (a value may be a secret). Whoever uses them checks the names."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{key!r}: use KEY=VALUE", param_hint="--env")
        out[key] = value
    return out


def terminal_path(terminal_id: str, suffix: str = "") -> str:
    # Checked here, not only by the server: an id goes into the URL path, and
    # something like "../sessions" must never reach a different route.
    if not TERMINAL_ID_RE.match(terminal_id):
        raise click.ClickException(f"invalid terminal id {terminal_id!r}: expected 8 lowercase hex characters")
    return f"/terminals/{terminal_id}{suffix}"


def session_path(name: str) -> str:
    return f"/sessions/{quote(name, safe='')}"


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]], empty: str) -> None:
    """Aligned columns; `columns` is (key, HEADER) pairs. The last column is not padded."""
    if not rows:
        click.echo(empty)
        return
    cells = [[_cell(row.get(key)) for key, _ in columns] for row in rows]
    headers = [header for _, header in columns]
    widths = [max(len(headers[i]), *(len(r[i]) for r in cells)) for i in range(len(columns))]
    for line in [headers, *cells]:
        padded = [cell.ljust(width) for cell, width in zip(line, widths)]
        padded[-1] = line[-1]  # no trailing blanks
        click.echo("  ".join(padded))


def print_fields(pairs: Sequence[tuple[str, Any]]) -> None:
    """`Label:  value` lines with the values aligned."""
    width = max(len(label) for label, _ in pairs) + 1
    for label, value in pairs:
        click.echo(f"{(label + ':').ljust(width)}  {_cell(value)}")


def exec_attach(argv: list[str]) -> None:
    """Replace this process with `tmux ... attach-session` (never returns on success)."""
    # Attaching from inside another tmux is refused while TMUX is set; our server is a
    # different one (-L socket), so nesting it is what the user asked for.
    os.environ.pop("TMUX", None)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        raise click.ClickException(f"could not run {shlex.join(argv)}: {exc}") from None
