"""`CAO_EAGER_INBOX_DELIVERY=true`: "deliver while busy to providers that accept it". Claude Code
is the provider that does (`accepts_input_while_busy`): it queues what is typed during a turn and
runs it when the turn ends. So with the variable set, an inbox message reaches a busy Claude at
once (`delivered` while its turn still runs); without it, the message waits for the turn to end.
(tests/test_inbox.py checks that the variable changes nothing for a provider that does not.)

The real Claude Code CLI (pinned, from npm) in a temporary HOME, against the scripted model,
which holds its answer to the first turn for HOLD_MS.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CaoServer, wait_until

# Autouse: without tmux every test here skips, or fails under CI (CAO_REQUIRE_REAL_CLIS).
from real_cli_support import (
    npm_binary,
    real_cli_prerequisites,  # noqa: F401
    real_cli_server,
)
from sse_support import EventStream

from cao_testkit.scripted_model.harness import ScriptedModelServer

VERSION = "2.1.197"  # as tests/test_real_claude_code.py
HOLD_MS = 20_000  # the busy turn: long enough that a delivery "at once" lands well inside it
BUSY, QUEUED = "please take your time", "queued note marker-31"
SCRIPT = [
    {"match": "take your time", "steps": [{"delay_ms": HOLD_MS}, {"text": "Done at last."}]},
    {"match": "marker-31", "reply": "Got the queued note."},
]
PROFILE = "---\nname: claude_dev\nprovider: claude_code\n---\nYou are the cao test developer.\n"


@pytest.fixture
def claude(tmp_path: Path, request):
    """(cao-server, scripted model) with CAO_EAGER_INBOX_DELIVERY as the test's parameter."""
    binary = npm_binary("@anthropic-ai/claude-code", VERSION, "claude")
    with ScriptedModelServer() as model:
        model.set_script("claude", SCRIPT)
        cao = real_cli_server(
            tmp_path, [binary], {**model.cli_env("claude"), "CAO_EAGER_INBOX_DELIVERY": request.param}
        )
        (Path(cao.env["HOME"]) / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True}))
        (cao.home / "agent-store").mkdir(parents=True)
        (cao.home / "agent-store" / "claude_dev.md").write_text(PROFILE)
        work = tmp_path / "work"
        work.mkdir()
        cao.start()
        try:
            yield cao, model, str(work)
        finally:
            cao.cleanup()


def _model_got(model: ScriptedModelServer, text: str) -> list[dict]:
    return [r for r in model.requests("claude") if not r["side"] and text in r["user_text"]]


def _inbox(cao: CaoServer, tid: str) -> list[tuple[str, str]]:
    return [(m["message"], m["status"]) for m in cao.client.get(f"/terminals/{tid}/inbox/messages").json()]


def _last_reply(cao: CaoServer, tid: str) -> str:
    resp = cao.client.get(f"/terminals/{tid}/output", params={"mode": "last"})
    return resp.json()["output"] if resp.status_code == 200 else ""


def _busy_claude(cao: CaoServer, model: ScriptedModelServer, work: str) -> str:
    tid = cao.create_session("claude_dev", provider="claude_code", yolo="true", working_directory=work)["id"]
    cao.send(tid, BUSY)
    wait_until(lambda: _model_got(model, "take your time"), timeout=30, message="the model holding the first turn")
    cao.wait_status(tid, "processing")
    return tid


def _queued_note_runs_after_the_turn(cao: CaoServer, model: ScriptedModelServer, tid: str) -> None:
    wait_until(
        lambda: _model_got(model, "marker-31"),
        timeout=HOLD_MS / 1000 + 60,
        message="the note sent to the model after the held turn",
    )
    wait_until(
        lambda: _last_reply(cao, tid) == "Got the queued note." and cao.status(tid) == "completed",
        timeout=60,
        message="the note's own turn answered",
    )
    [note_request] = _model_got(model, "marker-31")
    assert "Done at last." in json.dumps(note_request["body"])  # it came after the held turn's answer
    assert _inbox(cao, tid) == [(QUEUED, "delivered")]


def _post(cao: CaoServer, tid: str) -> int:
    resp = cao.client.post(f"/terminals/{tid}/inbox/messages", json={"sender_id": "tester", "message": QUEUED})
    assert resp.status_code == 200, resp.text
    return resp.json()["message_id"]


def _delivered(message_id: int):
    return lambda f: f.event == "InboxDelivered" and f.data["message_id"] == message_id


def _completed(tid: str):
    return lambda f: f.event == "StatusChanged" and f.data["terminal_id"] == tid and f.data["status"] == "completed"


# The bus's events in the order they were published (one queue per subscriber; inbox and status
# events are never dropped) tell whether the delivery came before or after the turn ended: no
# clock involved. (A key through the input lock cannot serve here: an arrow key at Claude's
# empty prompt opens another view, and the paste would go there.)
@pytest.mark.parametrize("claude", ["true"], indirect=True)
def test_eager_delivery_types_into_a_busy_claude(claude):
    cao, model, work = claude
    tid = _busy_claude(cao, model, work)
    with EventStream(cao, "#") as events:
        message_id = _post(cao, tid)
        events.until(_delivered(message_id), timeout=HOLD_MS / 1000, message="the delivery")
        assert not [f for f in events.frames if _completed(tid)(f)]  # delivered while the turn ran
        events.until(_completed(tid), timeout=HOLD_MS / 1000 + 60, message="the held turn's end")
    _queued_note_runs_after_the_turn(cao, model, tid)


@pytest.mark.parametrize("claude", ["false"], indirect=True)
def test_without_eager_delivery_a_busy_claude_gets_the_message_after_its_turn(claude):
    cao, model, work = claude
    tid = _busy_claude(cao, model, work)
    with EventStream(cao, "#") as events:
        message_id = _post(cao, tid)
        events.until(_completed(tid), timeout=HOLD_MS / 1000 + 60, message="the held turn's end")
        assert not [f for f in events.frames if _delivered(message_id)(f)]  # it waited for the turn
        events.until(_delivered(message_id), message="the delivery after the turn")
    _queued_note_runs_after_the_turn(cao, model, tid)
