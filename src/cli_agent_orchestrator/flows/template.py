"""The prompt's `[[var]]` placeholders: `[[` + word characters + `]]`, each filled from the
gate's `output`. A placeholder without a value is an error (the agent never sees a half-filled
prompt); extra keys are ignored. Text values go in as they are, others as JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidInput

PLACEHOLDER_RE = re.compile(r"\[\[(\w+)\]\]")


def placeholders(template: str) -> list[str]:
    """The names the template uses, in order of first use."""
    return list(dict.fromkeys(PLACEHOLDER_RE.findall(template)))


def render(template: str, values: Mapping[str, Any]) -> str:
    missing = [name for name in placeholders(template) if name not in values]
    if missing:
        raise InvalidInput(f"Missing template variables: {', '.join(missing)}")
    return PLACEHOLDER_RE.sub(lambda m: _text(values[m.group(1)]), template)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
