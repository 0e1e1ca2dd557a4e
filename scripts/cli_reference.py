"""The CLI reference in docs/cli.md, generated from the commands' own `--help`.

Walks the click command trees of `cao` and `cao-server` and renders every command's help at a
fixed width, so the text never depends on the terminal it was made on. The invariant: the part
of docs/cli.md between the two marker comments is exactly `render_reference()`; the docs test
holds it there.

Usage: python scripts/cli_reference.py           rewrite that part of docs/cli.md
       python scripts/cli_reference.py --check   exit 1 with a diff when it is stale
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterator
from pathlib import Path

import click

from cli_agent_orchestrator.cli.main import cli as cao_cli
from cli_agent_orchestrator.cli.server import main as cao_server

CLI_DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
START = "<!-- cli-reference:start -->"
END = "<!-- cli-reference:end -->"
WIDTH = 100  # both the terminal width and the content width help is wrapped to
ROOTS: tuple[tuple[str, click.Command], ...] = (("cao", cao_cli), ("cao-server", cao_server))


def _contexts(name: str, command: click.Command, parent: click.Context | None) -> Iterator[click.Context]:
    """Every command under `command`, depth first in the order its group lists them."""
    # A command's own context_settings (e.g. `-h` beside `--help`) apply as they do when run.
    settings = {**command.context_settings, "terminal_width": WIDTH, "max_content_width": WIDTH}
    ctx = click.Context(command, info_name=name, parent=parent, **settings)
    yield ctx
    if isinstance(command, click.Group):
        for sub_name in command.list_commands(ctx):
            sub = command.get_command(ctx, sub_name)
            if sub is not None and not sub.hidden:
                yield from _contexts(sub_name, sub, ctx)


def render_reference() -> str:
    """The generated reference: one heading and one `--help` block per command."""
    parts: list[str] = []
    for name, root in ROOTS:
        for ctx in _contexts(name, root, None):
            level = "###" if ctx.parent is None else "####"
            parts.append(f"{level} `{ctx.command_path}`\n\n```text\n{ctx.command.get_help(ctx).rstrip()}\n```\n")
    return "\n".join(parts)


def _split(text: str) -> tuple[str, str, str]:
    """docs/cli.md as (before the start marker, between the markers, from the end marker on)."""
    head, found_start, rest = text.partition(START + "\n")
    body, found_end, tail = rest.partition(END)
    if not found_start or not found_end:
        raise SystemExit(f"{CLI_DOC}: the markers {START} and {END} must each stand on a line of their own")
    return head + found_start, body, found_end + tail


def documented_reference() -> str:
    """What docs/cli.md holds between its markers now."""
    return _split(CLI_DOC.read_text(encoding="utf-8"))[1]


def main(argv: list[str]) -> int:
    head, body, tail = _split(CLI_DOC.read_text(encoding="utf-8"))
    fresh = render_reference() + "\n"
    if "--check" in argv:
        if body == fresh:
            return 0
        diff = difflib.unified_diff(body.splitlines(True), fresh.splitlines(True), "docs/cli.md", "--help")
        sys.stdout.writelines(diff)
        print("\ndocs/cli.md is stale: run `python scripts/cli_reference.py` to regenerate it.")
        return 1
    CLI_DOC.write_text(head + fresh + tail, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
