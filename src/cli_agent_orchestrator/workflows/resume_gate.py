"""The resume gate: for one step call of a workflow run, decide from the journal whether
to replay the stored result, execute, halt for a human, or declare a divergence.

Pure functions over the journal's step record, so every rule is tested without a server. The
first matching rule wins; `docs/workflows.md` has the same table in prose.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from .records import Decision, StepErrorKind, StepRecord, StepState

POLICIES = ("idempotent", "reconcile", "manual")
DECISIONS = tuple(Decision)
# Bumped when the set of fields that make up a fingerprint changes; a step recorded
# under another scheme cannot be compared, only re-executed (if permitted) or halted.
FINGERPRINT_SCHEME = "v1"

Outcome = Literal["execute", "replay", "halt", "diverged"]

# Halt rules (names kept from the reference so that scripts and tooling agree).
INTERRUPTED_NO_POLICY = "interrupted_no_policy"
ENVELOPE_ABSENT = "envelope_absent"
PROVENANCE_UNVERIFIABLE = "provenance_unverifiable"
POLICY_MANUAL = "policy_manual"
OUTCOME_FAILED = "outcome_failed"
ENVELOPE_LOSSY = "envelope_lossy"
DIVERGED = "diverged"

# Failures whose outcome is unknown (the work may have half happened) are treated
# like a crash mid-step, not like a failure the agent reported.
UNSETTLED_ERROR_KINDS = frozenset({StepErrorKind.INTERRUPTED, StepErrorKind.CANCELLED})


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    rule: str | None = None  # which halt rule fired (or "diverged")
    reason: str = ""  # fixed phrase for humans; never contains field values
    consumes: Decision | None = None  # the decision this verdict uses up


def fingerprint(fields: dict[str, Any]) -> str:
    """Digest of a call's execution-affecting inputs (see `execution_fields`)."""
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def execution_fields(
    *,
    provider: str | None,
    agent: str,
    prompt: str,
    model: str | None,
    allowed_tools: list[str] | None,
    working_directory: str | None,
) -> dict[str, Any]:
    """The inputs that change what a step runs. The timeout is left out on purpose: it
    changes how long we wait, not what the agent does, so raising it must not diverge."""
    return {
        "provider": provider or "",
        "agent": agent,
        "prompt": prompt,
        "model": model or "",
        "allowed_tools": sorted(allowed_tools or []),
        "working_directory": working_directory or "",
    }


def permits_reexecution(policy: str | None) -> bool:
    return policy in ("idempotent", "reconcile")


def envelope_readable(envelope: Any) -> bool:
    return (
        isinstance(envelope, dict)
        and isinstance(envelope.get("last_message"), str)
        and isinstance(envelope.get("status"), str)
    )


def decide(record: StepRecord | None, call_fingerprint: str, policy: str | None, decision: Decision | None) -> Verdict:
    """The verdict for one call. `policy` is what this call declares; `decision` is a
    human's one-attempt grant for this step in this drive (or None)."""
    if record is None or record.state == StepState.PENDING:
        return Verdict("execute", reason="first attempt")
    comparable = record.fingerprint_scheme == FINGERPRINT_SCHEME and record.fingerprint is not None
    if comparable and record.fingerprint != call_fingerprint:
        return Verdict("diverged", DIVERGED, "the call at this step key changed since it was recorded")
    if decision == Decision.RERUN:
        return Verdict("execute", reason="re-run authorised by a decision", consumes=Decision.RERUN)
    # Re-executing on the author's word needs that word both when the work was
    # dispatched (the claim it ran under) and now (the claim being made).
    may_reexecute = permits_reexecution(record.policy) and permits_reexecution(policy)
    unsettled = record.state == StepState.RUNNING or (
        record.state == StepState.FAILED and record.error_kind in UNSETTLED_ERROR_KINDS
    )
    if unsettled:
        if may_reexecute:
            return Verdict("execute", reason="interrupted; declared safe to re-run")
        return Verdict(
            "halt", INTERRUPTED_NO_POLICY, "dispatched but never settled, and no declared policy permits re-running it"
        )
    if not comparable:
        if may_reexecute:
            return Verdict("execute", reason="provenance not comparable; declared safe to re-run")
        return Verdict(
            "halt", PROVENANCE_UNVERIFIABLE, "its recorded provenance cannot be verified under the current scheme"
        )
    if not envelope_readable(record.envelope):
        return Verdict("halt", ENVELOPE_ABSENT, "its stored result is missing or unreadable")
    if policy == "manual" and decision != Decision.SKIP:
        return Verdict("halt", POLICY_MANUAL, "declared recovery='manual'")
    if record.state == StepState.FAILED:
        if decision == Decision.SKIP:
            return Verdict("replay", reason="stored failure accepted by a decision", consumes=Decision.SKIP)
        if may_reexecute:
            return Verdict("execute", reason="failed before; declared safe to re-run")
        return Verdict("halt", OUTCOME_FAILED, "its recorded outcome is a failure")
    if record.envelope.get("truncated") and decision != Decision.SKIP:
        if may_reexecute:
            return Verdict("execute", reason="stored result incomplete; declared safe to re-run")
        return Verdict("halt", ENVELOPE_LOSSY, "its stored result was truncated")
    return Verdict("replay", reason="settled", consumes=Decision.SKIP if decision == Decision.SKIP else None)
