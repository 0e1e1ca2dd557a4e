"""The provider screens under tests/fixtures/screens/<provider>/, read the same way by every
tests/test_screens_*.py module. Per state: `<state>.txt` the visible screen, `<state>.json`
what the provider must read from it (and the cursor, where one was recorded) and, for a
finished turn, `<state>.history.txt` the scrollback. scripts/record_screens/ writes them
(kiro_cli's are written by hand)."""

from __future__ import annotations

import json
from pathlib import Path

from cli_agent_orchestrator.providers.base import Screen

ROOT = Path(__file__).parent / "fixtures" / "screens"


class ScreenFixtures:
    """One provider's fixtures; `rows`, if given, pads or cuts every screen to that many rows
    (a pane's height), for tests that read the whole pane."""

    def __init__(self, provider: str, rows: int | None = None):
        self.dir, self.rows = ROOT / provider, rows

    def states(self, suffix: str = ".json") -> list[str]:
        """The states that have a `<state><suffix>` file, sorted."""
        return sorted(p.name.removesuffix(suffix) for p in self.dir.glob(f"*{suffix}"))

    def has(self, state: str, suffix: str) -> bool:
        return (self.dir / f"{state}{suffix}").exists()

    def text(self, state: str, suffix: str = ".txt") -> str:
        return (self.dir / f"{state}{suffix}").read_text(encoding="utf-8")

    def lines(self, state: str, suffix: str = ".txt") -> list[str]:
        # split on "\n" only: a row may hold a character splitlines() would break on, and the
        # final newline leaves a last empty row, as tmux hands the rows over.
        return self.text(state, suffix).split("\n")

    def expected(self, state: str) -> dict:
        return json.loads(self.text(state, ".json"))

    def screen(self, state: str) -> Screen:
        """The screen with its recorded cursor, rows right-stripped (as cao-server passes them)."""
        lines = self.lines(state)
        if self.rows is not None:
            lines = (lines + [""] * self.rows)[: self.rows]
        row, col = self.expected(state)["cursor"]
        return Screen([line.rstrip() for line in lines], row, col)
