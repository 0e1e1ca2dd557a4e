"""What an agent that waits for its user is asking: the question on its screen and the options
of the menu drawn under it, for a person to answer with one click (the web UI). The answer then
goes in as `POST /terminals/{id}/input` with the option's key, which the provider turns into
its own keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# "1. Yes", "❯ 2) No, and tell Claude what to do", "  3 - Always allow": a numbered option row,
# possibly behind the cursor mark a menu draws at its selected row, possibly inside a box.
_OPTION = re.compile(r"^[\s│┃|]*(?:[❯›>▶→●*]\s*)?(\d{1,2})\s*[.):\]-]\s+(\S.*?)[\s│┃|]*$")
MAX_OPTIONS = 9
MAX_LABEL = 200


@dataclass(frozen=True)
class Option:
    key: str  # what to send as the answer ("1", "2", ...)
    label: str


def menu_options(question: str) -> list[Option]:
    """The last run of consecutively numbered rows (1, 2, 3...) in the question's text."""
    found: list[Option] = []
    for row in question.splitlines():
        match = _OPTION.match(row)
        if not match:
            continue
        number, label = match.group(1), match.group(2).strip()
        if number == "1":
            found = []
        if str(len(found) + 1) != number:
            continue
        found.append(Option(number, label[:MAX_LABEL]))
    return found[:MAX_OPTIONS]
