"""The resume gate as a pure function: every rule, its order, and the decisions."""

from __future__ import annotations

import pytest

from cli_agent_orchestrator.workflows import resume_gate as gate
from cli_agent_orchestrator.workflows.records import StepErrorKind, StepRecord, StepState

FP = gate.fingerprint(
    gate.execution_fields(
        provider="mock_cli", agent="reviewer", prompt="p", model=None, allowed_tools=None, working_directory=None
    )
)
OK_ENVELOPE = {"last_message": "MOCK: p", "status": "completed", "terminal_id": "abcd1234", "truncated": False}
FAILED_ENVELOPE = {"last_message": "", "status": "failed", "terminal_id": None, "truncated": False}


def record(
    state="completed",
    fingerprint=FP,
    scheme=gate.FINGERPRINT_SCHEME,
    policy=None,
    envelope=OK_ENVELOPE,
    error_kind=None,
) -> StepRecord:
    return StepRecord(
        "run-1",
        "call-1",
        StepState(state),
        fingerprint=fingerprint,
        fingerprint_scheme=scheme,
        policy=policy,
        envelope=envelope,
        error_kind=StepErrorKind(error_kind) if error_kind else None,
    )


def test_fingerprint_covers_what_runs_but_not_the_timeout():
    base = dict(
        provider="mock_cli", agent="reviewer", prompt="p", model=None, allowed_tools=["b", "a"], working_directory=None
    )
    same = gate.fingerprint(gate.execution_fields(**{**base, "allowed_tools": ["a", "b"]}))
    assert gate.fingerprint(gate.execution_fields(**base)) == same
    for field, value in (
        ("provider", "codex"),
        ("agent", "developer"),
        ("prompt", "q"),
        ("model", "m"),
        ("allowed_tools", ["a"]),
        ("working_directory", "/w"),
    ):
        assert gate.fingerprint(gate.execution_fields(**{**base, field: value})) != same, field
    assert "timeout" not in gate.execution_fields(**base)


def test_new_and_pending_steps_execute():
    assert gate.decide(None, FP, None, None).outcome == "execute"
    assert gate.decide(record(state="pending", fingerprint=None), FP, None, None).outcome == "execute"


@pytest.mark.parametrize("policy", [None, "idempotent", "reconcile"])
def test_settled_step_replays(policy):
    verdict = gate.decide(record(policy=policy), FP, policy, None)
    assert (verdict.outcome, verdict.rule) == ("replay", None)


def test_changed_call_diverges_before_anything_else():
    for rec in (record(), record(state="running", envelope=None), record(policy="idempotent")):
        verdict = gate.decide(rec, "other", "idempotent", "rerun")
        assert (verdict.outcome, verdict.rule) == ("diverged", gate.DIVERGED)


@pytest.mark.parametrize(
    "recorded,current,outcome,rule",
    [
        ("idempotent", "idempotent", "execute", None),
        ("reconcile", "reconcile", "execute", None),
        (None, None, "halt", gate.INTERRUPTED_NO_POLICY),
        ("manual", "manual", "halt", gate.INTERRUPTED_NO_POLICY),
        # Both claims must permit it: the one the work ran under and the one made now.
        ("idempotent", None, "halt", gate.INTERRUPTED_NO_POLICY),
        (None, "idempotent", "halt", gate.INTERRUPTED_NO_POLICY),
        ("manual", "idempotent", "halt", gate.INTERRUPTED_NO_POLICY),
    ],
)
def test_interrupted_step(recorded, current, outcome, rule):
    verdict = gate.decide(record(state="running", policy=recorded, envelope=None), FP, current, None)
    assert (verdict.outcome, verdict.rule) == (outcome, rule)


def test_cancelled_attempt_counts_as_interrupted():
    rec = record(state="failed", envelope=FAILED_ENVELOPE, error_kind="cancelled")
    assert gate.decide(rec, FP, None, None).rule == gate.INTERRUPTED_NO_POLICY
    rec = record(state="failed", envelope=FAILED_ENVELOPE, error_kind="cancelled", policy="idempotent")
    assert gate.decide(rec, FP, "idempotent", None).outcome == "execute"


def test_rerun_decision_executes_once_and_says_so():
    for rec in (
        record(state="running", envelope=None),
        record(policy="manual"),
        record(state="failed", envelope=FAILED_ENVELOPE),
    ):
        verdict = gate.decide(rec, FP, "manual", "rerun")
        assert (verdict.outcome, verdict.consumes) == ("execute", "rerun")


def test_manual_halts_every_time_unless_skipped():
    verdict = gate.decide(record(policy="manual"), FP, "manual", None)
    assert (verdict.outcome, verdict.rule) == ("halt", gate.POLICY_MANUAL)
    verdict = gate.decide(record(policy="manual"), FP, "manual", "skip")
    assert (verdict.outcome, verdict.consumes) == ("replay", "skip")


def test_failed_outcome():
    rec = record(state="failed", envelope=FAILED_ENVELOPE, error_kind="error")
    assert gate.decide(rec, FP, None, None).rule == gate.OUTCOME_FAILED
    # Declared idempotent: re-executed on the author's word instead of asking.
    rec_idem = record(state="failed", envelope=FAILED_ENVELOPE, error_kind="error", policy="idempotent")
    assert gate.decide(rec_idem, FP, "idempotent", None).outcome == "execute"
    verdict = gate.decide(rec, FP, None, "skip")
    assert (verdict.outcome, verdict.consumes) == ("replay", "skip")


@pytest.mark.parametrize("envelope", [None, "text", {"status": "completed"}, {"last_message": 3, "status": "x"}])
def test_unreadable_envelope_halts_even_with_skip(envelope):
    verdict = gate.decide(record(envelope=envelope), FP, None, "skip")
    assert (verdict.outcome, verdict.rule) == ("halt", gate.ENVELOPE_ABSENT)


def test_truncated_envelope():
    lossy = {**OK_ENVELOPE, "truncated": True}
    assert gate.decide(record(envelope=lossy), FP, None, None).rule == gate.ENVELOPE_LOSSY
    assert gate.decide(record(envelope=lossy, policy="idempotent"), FP, "idempotent", None).outcome == "execute"
    assert gate.decide(record(envelope=lossy), FP, None, "skip").outcome == "replay"


def test_other_fingerprint_scheme():
    old = record(scheme="v0")
    assert gate.decide(old, FP, None, None).rule == gate.PROVENANCE_UNVERIFIABLE
    assert gate.decide(record(scheme=None, fingerprint=None), FP, "manual", None).rule == gate.PROVENANCE_UNVERIFIABLE
    assert gate.decide(record(scheme="v0", policy="idempotent"), FP, "idempotent", None).outcome == "execute"


def test_halt_reasons_never_carry_field_values():
    secret_prompt = "token=hunter2"
    fp = gate.fingerprint(
        gate.execution_fields(
            provider="p", agent="a", prompt=secret_prompt, model=None, allowed_tools=None, working_directory=None
        )
    )
    for rec in (record(fingerprint=fp, policy="manual"), record(), record(state="running", envelope=None)):
        verdict = gate.decide(rec, fp if rec.fingerprint == fp else "x", "manual", None)
        assert "hunter2" not in verdict.reason
