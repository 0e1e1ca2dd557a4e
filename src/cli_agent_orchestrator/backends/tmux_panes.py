"""Which tmux pane and window belong to which terminal, and whether its death was reported.
Owned by the backend and shared with its output source, so that a reconnected source keeps
watching the same panes.
"""

from __future__ import annotations


class PaneMap:
    """Terminal id ↔ pane id and window id, looked up both ways."""

    def __init__(self) -> None:
        self.terminal_of_pane: dict[str, str] = {}
        self.terminal_of_window: dict[str, str] = {}
        self.pane_of_terminal: dict[str, str] = {}
        self.window_of_terminal: dict[str, str] = {}
        self.reported_dead: set[str] = set()

    def add(self, terminal_id: str, pane_id: str, window_id: str) -> None:
        self.remove(terminal_id)
        self.terminal_of_pane[pane_id] = terminal_id
        self.terminal_of_window[window_id] = terminal_id
        self.pane_of_terminal[terminal_id] = pane_id
        self.window_of_terminal[terminal_id] = window_id
        self.reported_dead.discard(terminal_id)

    def remove(self, terminal_id: str) -> None:
        pane = self.pane_of_terminal.pop(terminal_id, None)
        window = self.window_of_terminal.pop(terminal_id, None)
        if pane is not None:
            self.terminal_of_pane.pop(pane, None)
        if window is not None:
            self.terminal_of_window.pop(window, None)

    def report_dead_once(self, terminal_id: str) -> bool:
        """True the first time only: a terminal's death is published once, by whoever sees it first."""
        if terminal_id in self.reported_dead:
            return False
        self.reported_dead.add(terminal_id)
        return True
