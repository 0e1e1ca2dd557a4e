"""The script's two plain-text channels with the server: run inputs arrive in one env var,
the run's output leaves as one sentinel line on stdout. No HTTP, no state."""

from __future__ import annotations

import json
import os
from typing import Any

from ._errors import ShimError

OUTPUT_SENTINEL = "CAO_WORKFLOW_OUTPUT:"
INPUTS_VAR = "CAO_WORKFLOW_INPUTS"


def emit_output(value: Any) -> None:
    """Print the run's output as one ``CAO_WORKFLOW_OUTPUT:{json}`` line and flush.

    The server reads the last such line once the script exits 0. The JSON is compact and
    ASCII-only (whatever stdout's encoding) and strict (no NaN/Infinity), so the server's
    parser never sees something Python alone would accept.
    """
    try:
        encoded = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ShimError(f"emit_output(): value is not JSON-serialisable: {exc}") from None
    # JSON escapes newlines inside strings, so this is always exactly one line.
    print(OUTPUT_SENTINEL + encoded, flush=True)


def get_inputs() -> dict[str, Any]:
    """The run's resolved inputs (``CAO_WORKFLOW_INPUTS``); ``{}`` when unset or empty.

    Read per call, and a fresh dict each time, so a script cannot mutate what a later
    call sees.
    """
    raw = os.environ.get(INPUTS_VAR, "")
    if not raw.strip():
        return {}
    try:
        inputs = json.loads(raw)
    except ValueError as exc:
        raise ShimError(f"get_inputs(): {INPUTS_VAR} is not valid JSON: {exc}") from None
    if not isinstance(inputs, dict):
        raise ShimError(f"get_inputs(): {INPUTS_VAR} must be a JSON object, got {type(inputs).__name__}")
    return inputs
