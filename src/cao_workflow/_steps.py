"""step() and run_step(): one agent step per call, posted to the server's run-step route.

Everything the shim decides on its own happens before the request and raises
ShimError/ShimIdentityError with nothing attempted; after that the server decides
(execute, replay, halt, diverge) and the shim only reports the answer.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any

from ._errors import ShimError, ShimHTTPError, ShimIdentityError
from ._transport import post_json

RECOVERY_POLICIES = ("idempotent", "reconcile", "manual")
RUN_ID_VAR = "CAO_WORKFLOW_RUN_ID"
GENERATION_VAR = "CAO_WORKFLOW_GENERATION"
BASE_URL_VAR = "CAO_API_BASE_URL"
STEP_ID_VAR = "CAO_WORKFLOW_STEP_ID"
RUN_STEP_PATH = "/terminals/run-step"
# The server's env_vars validator accepts exactly this; checking it here turns a mid-run 422
# into an error at the call that caused it.
STEP_ID_RE = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")
# Where the step's agent runs: a registered host's name (`cao host add NAME`) or "local"; the
# server checks the same (and answers an unknown host with 400).
HOST_RE = re.compile(r"\A[a-z0-9][a-z0-9-]{0,31}\Z")
# What run-step waits for the agent when the call gives no timeout (the server's default).
DEFAULT_STEP_TIMEOUT = 600.0
# The server holds the request for its ready wait (up to 120 s) + the step timeout + teardown
# and reply extraction. The socket must outlive all of that: if it gave up first, the script
# would see a failure while the step was still running server-side. 150 s covers the 120 s
# ready wait with 30 s to spare for teardown.
SOCKET_MARGIN_SECONDS = 150.0


@dataclass(frozen=True)
class StepHandle:
    """The result of one step. When ``replayed`` is True the server returned the stored
    result and ran nothing: ``terminal_id`` then names the original, long-gone terminal."""

    step_id: str
    terminal_id: str
    output: str
    status: str
    replayed: bool = False


class _StepCounter:
    """Default step keys call-1, call-2, … Lock-guarded so no two calls share a key; the
    order still follows thread scheduling, which is why fan-out needs explicit step_ids."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def next_key(self) -> str:
        with self._lock:
            self._last += 1
            return f"call-{self._last}"


_counter = _StepCounter()


def socket_timeout_for(timeout: float | None) -> float:
    return (DEFAULT_STEP_TIMEOUT if timeout is None else float(timeout)) + SOCKET_MARGIN_SECONDS


def step(
    provider: str,
    agent: str,
    prompt: str,
    *,
    recovery: str,
    step_id: str | None = None,
    timeout: float | None = None,
    host: str | None = None,
    **opts: Any,
) -> StepHandle:
    """Run one agent step, declaring what re-running it would mean (``recovery``).

    ``recovery`` is a claim the resume gate acts on, never verified: "idempotent" (safe to
    re-run), "reconcile" (treated like idempotent today) or "manual" (halt and ask).
    ``host`` runs the agent on that registered host (or "local"); default: the server's
    placement policy.
    """
    # Checked before the environment and before any request: a typo here must not cost
    # the steps that already ran.
    if not isinstance(recovery, str) or recovery not in RECOVERY_POLICIES:
        raise ShimError(
            f"step(): recovery={recovery!r} is not a recovery policy; use one of "
            f"{', '.join(repr(p) for p in RECOVERY_POLICIES)} (or run_step() to declare none)"
        )
    return _run("step", provider, agent, prompt, step_id, timeout, host, opts, recovery)


def run_step(
    provider: str,
    agent: str,
    prompt: str,
    *,
    step_id: str | None = None,
    timeout: float | None = None,
    host: str | None = None,
    **opts: Any,
) -> StepHandle:
    """Run one agent step declaring no recovery policy.

    A ``recovery=`` passed here rides in ``opts`` and is judged by the server (422 on a bad
    value, mid-run); use step() to have it checked up front.
    """
    return _run("run_step", provider, agent, prompt, step_id, timeout, host, opts, None)


def _run(
    fn_name: str,
    provider: str,
    agent: str,
    prompt: str,
    step_id: str | None,
    timeout: float | None,
    host: str | None,
    opts: dict[str, Any],
    recovery: str | None,
) -> StepHandle:
    _refuse_options(fn_name, opts)
    _check_timeout(fn_name, timeout)
    if host is not None and (not isinstance(host, str) or not HOST_RE.match(host)):
        raise ShimError(
            f"{fn_name}(): host={str(host)[:80]!r} is not a host name; use a registered host's name "
            "(`cao host list`: 1-32 of a-z 0-9 -, starting with a letter or digit) or 'local'"
        )
    if step_id is not None and (not isinstance(step_id, str) or not STEP_ID_RE.match(step_id)):
        raise ShimError(
            f"{fn_name}(): step_id={step_id!r} is not a valid step key; use 1-64 "
            "characters from A-Z a-z 0-9 _ - (no ':')"
        )
    run_id, generation, base_url = _identity(fn_name)
    # The counter advances only for a call that is about to be sent, so a call refused above
    # does not shift the keys of every later step.
    key = step_id if step_id is not None else _counter.next_key()
    body: dict[str, Any] = {
        "provider": provider,
        "agent": agent,
        "prompt": prompt,
        "env_vars": {RUN_ID_VAR: run_id, GENERATION_VAR: generation, STEP_ID_VAR: key},
    }
    if timeout is not None:
        body["timeout"] = float(timeout)
    if recovery is not None:
        body["recovery"] = recovery
    if host is not None:
        body["host"] = host
    body.update(opts)
    try:
        payload = json.dumps(body, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ShimError(f"{fn_name}(): the step's options are not JSON-serialisable: {exc}") from None
    status, text = post_json(base_url + RUN_STEP_PATH, payload, socket_timeout_for(timeout), fn_name)
    return _handle_from_answer(key, status, text)


def _refuse_options(fn_name: str, opts: dict[str, Any]) -> None:
    if "reuse_terminal_id" in opts:
        raise ShimError(
            f"reuse_terminal_id is not supported by {fn_name}() — the shim always sends env_vars "
            "(RUN_ID/GENERATION/STEP_ID), and the server rejects env_vars + reuse_terminal_id "
            "together (422). Omit reuse_terminal_id, or call the HTTP API directly if you need to "
            "reuse a terminal without the identity fence."
        )
    if "env_vars" in opts:
        # Merging it would overwrite the identity fence the server uses to journal the step.
        raise ShimError(
            f"env_vars is not supported by {fn_name}() — the shim sets env_vars itself "
            "(the run's identity fence); omit it."
        )


def _check_timeout(fn_name: str, timeout: object) -> None:
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
        raise ShimError(f"{fn_name}(): timeout={timeout!r} must be a positive number of seconds")


def _identity(fn_name: str) -> tuple[str, str, str]:
    """The run's identity, read per call (never at import). Names only what is missing —
    values are never echoed."""
    names = (RUN_ID_VAR, GENERATION_VAR, BASE_URL_VAR)
    values = {name: os.environ.get(name, "") for name in names}
    missing = [name for name in names if not values[name]]  # empty counts as missing
    if missing:
        raise ShimIdentityError(
            f"{fn_name}(): {', '.join(missing)} not set; nothing was attempted. These are set by "
            "`cao workflow run`; run the script through it (or set them yourself)."
        )
    base_url = values[BASE_URL_VAR].rstrip("/")
    try:
        parts = urllib.parse.urlsplit(base_url)
        _ = parts.port  # raises ValueError for a malformed port
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ShimIdentityError(
            f"{fn_name}(): {BASE_URL_VAR} is not an http:// or https:// URL; nothing was attempted."
        )
    return values[RUN_ID_VAR], values[GENERATION_VAR], base_url


# A 200 must carry all four fields with these types; anything else is reported as an
# unusable answer rather than a KeyError/JSON error escaping from inside the shim.
_RESULT_FIELDS: dict[str, type] = {"terminal_id": str, "last_message": str, "status": str, "replayed": bool}


def _handle_from_answer(step_key: str, status: int, text: str) -> StepHandle:
    if status != 200:
        error = ShimHTTPError(status, text)
        summary = _summarise_detail(text)
        if summary:
            # A note shows in the traceback (and so in the run's stderr tail) without
            # changing str(error), which stays "run-step returned HTTP <status>".
            error.add_note(f"server detail: {summary}")
        raise error
    try:
        data = json.loads(text)
    except ValueError:
        raise ShimHTTPError(200, text, "run-step returned HTTP 200 with a body that is not JSON") from None
    if not isinstance(data, dict):
        raise ShimHTTPError(200, text, "run-step returned HTTP 200 with a body that is not a JSON object")
    bad = [name for name, kind in _RESULT_FIELDS.items() if not isinstance(data.get(name), kind)]
    if bad:
        raise ShimHTTPError(
            200, text, f"run-step returned HTTP 200 without a usable result (missing or mistyped: {', '.join(bad)})"
        )
    return StepHandle(
        step_id=step_key,
        terminal_id=data["terminal_id"],
        output=data["last_message"],
        status=data["status"],
        replayed=data["replayed"],
    )


def _summarise_detail(text: str, limit: int = 500) -> str:
    try:
        detail = json.loads(text).get("detail", text)
    except (ValueError, AttributeError):
        detail = text
    if isinstance(detail, dict) and "message" in detail:
        kind = f" [{detail['kind']}]" if "kind" in detail else ""
        detail = f"{detail['message']}{kind}"
    elif not isinstance(detail, str):
        detail = json.dumps(detail)
    detail = " ".join(detail.split())
    return detail if len(detail) <= limit else detail[:limit] + "…"
