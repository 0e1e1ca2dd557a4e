"""The read model other services get from the status monitor: one frozen `TerminalView` per
watched terminal, as the monitor knows it now (the database copy of the status may lag behind).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...models import TerminalStatus
from ...providers.base import Provider, Screen


@dataclass(frozen=True)
class TerminalView:
    """Everything the services may know of a watched terminal, as the monitor knows it now
    (the database copy of the status may lag behind)."""

    status: TerminalStatus
    source: str  # which signal decided it: "screen", "pane", "hook:<event>", "title", ...
    reason: str
    turn: int  # input turns submitted so far
    settled: bool  # the latest turn's first status after its input has been seen
    exited: bool  # the agent's process ended (input is refused)
    provider: Provider
    screen: Screen  # the screen as the output so far draws it (it may be a frame caught mid-redraw)
    composer_has_text: bool  # typed input sits unsubmitted at the prompt
    hook_reply: str | None  # the turn's answer as the CLI's turn-end hook gave it, if it did
    status_since: float = 0.0  # wall-clock time of the last status change (0: not known)
    composer_rows: int = 0  # rows the composer's text takes on screen (0: the provider cannot tell)
    # the last screen that read as something known (the one a dialog the status reports was seen
    # on); `screen` when no reading has been made yet
    known_screen: Screen | None = None
