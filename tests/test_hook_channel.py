"""The hook channel: CLI hooks report through a sh script and a FIFO, not a Python start.

The script is the one the providers configure (providers/common.py's hook_command), run the way
the CLIs run it (`bash -c COMMAND`, the event's JSON on stdin, the secret in the environment),
against a real cao-server and real tmux: with the mock agent for the channel's rules, and with
the real Claude Code CLI (scripted model) across a server restart.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from cao_support import CaoServer, wait_until

# Autouse: without tmux every test here skips, or fails under CI (CAO_REQUIRE_REAL_CLIS).
from real_cli_support import (
    npm_binary,
    real_cli_prerequisites,  # noqa: F401
    real_cli_server,
)

from cao_testkit.scripted_model.harness import ScriptedModelServer
from cli_agent_orchestrator.providers.base import LaunchContext
from cli_agent_orchestrator.providers.common import HOOK_RECORD_TAG, hook_command, hook_fifo

HANG_BOUND_S = 10  # a hook that has not returned by then hangs its CLI (not a speed target)


def run_hook(
    cao: CaoServer, terminal_id: str, event: str, payload: str = "{}", secret: str | None = None
) -> subprocess.CompletedProcess:
    """The terminal's hook for `event`, as a CLI runs it."""
    ctx = LaunchContext(terminal_id, "test", "", str(cao.home), cao.home)
    env = {"PATH": os.environ["PATH"], "CAO_TERMINAL_ID": terminal_id}
    env["CAO_HOOK_SECRET"] = cao.hook_secret(terminal_id) if secret is None else secret
    return subprocess.run(
        ["bash", "-c", hook_command(ctx, event)],
        input=payload,
        text=True,
        env=env,
        capture_output=True,
        timeout=HANG_BOUND_S,
    )


def source(cao: CaoServer, terminal_id: str) -> tuple[str, str]:
    detail = cao.client.get(f"/terminals/{terminal_id}").json()
    return detail["status"], detail["status_source"]


def wait_source(cao: CaoServer, terminal_id: str, wanted: tuple[str, str]) -> None:
    wait_until(lambda: source(cao, terminal_id) == wanted, timeout=15, message=f"{terminal_id} at {wanted}")


def test_hooks_through_the_channel_drive_status_with_their_payload(cao: CaoServer, tmp_path: Path):
    tid = cao.create_session()["id"]
    cao.wait_status(tid, "idle")
    never = tmp_path / "never"
    done = run_hook(cao, tid, "UserPromptSubmit", json.dumps({"prompt": f"$(touch {never}) `touch {never}`; |"}))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")  # the CLI reads a hook's stdout
    wait_source(cao, tid, ("processing", "hook:UserPromptSubmit"))  # the screen shows an idle prompt
    # The payload reaches the provider: only a permission notice means "waiting".
    run_hook(cao, tid, "Notification", json.dumps({"notification_type": "other"}))
    run_hook(cao, tid, "Notification", json.dumps({"notification_type": "permission_prompt"}))
    wait_source(cao, tid, ("waiting_user_answer", "hook:Notification"))
    run_hook(cao, tid, "Stop", "")
    wait_source(cao, tid, ("completed", "hook:Stop"))
    assert not list((cao.home / "tmp" / tid).glob("hook-*.json")), "every payload is read and removed"
    assert not never.exists(), "a payload is data, never shell words"


def test_a_forged_record_is_refused_and_changes_nothing(cao: CaoServer):
    victim = cao.create_session(session_name="victim")["id"]
    other = cao.create_session(session_name="other")["id"]
    run_hook(cao, victim, "Stop")
    wait_source(cao, victim, ("completed", "hook:Stop"))
    # Through the script, with no secret or another terminal's.
    for secret in ("", "not-the-secret", cao.hook_secret(other)):
        assert run_hook(cao, victim, "UserPromptSubmit", secret=secret).returncode == 0
    # Straight into the FIFO: forged, malformed and overlong records.
    forged = [
        f"{HOOK_RECORD_TAG} {victim} {cao.hook_secret(other)} UserPromptSubmit 1",
        f"{HOOK_RECORD_TAG} {victim}  UserPromptSubmit 1",
        f"{HOOK_RECORD_TAG} {victim} {cao.hook_secret(victim)} bad/event 1",
        f"{HOOK_RECORD_TAG} {victim} {cao.hook_secret(victim)} UserPromptSubmit ../../x",
        "x" * 3000,
    ]
    fd = os.open(hook_fifo(cao.home), os.O_WRONLY | os.O_NONBLOCK)
    try:
        for record in forged:
            os.write(fd, record.encode() + b"\n")
    finally:
        os.close(fd)
    # Records are taken in order: once the other terminal's genuine hook is applied, every
    # forged record before it has been judged.
    run_hook(cao, other, "UserPromptSubmit")
    wait_source(cao, other, ("processing", "hook:UserPromptSubmit"))
    assert source(cao, victim) == ("completed", "hook:Stop")
    # Still an inbox receiver: a forged "busy" would have held this message back.
    cao.client.post(f"/terminals/{victim}/inbox/messages", json={"sender_id": "tester", "message": "from inbox"})
    wait_until(
        lambda: (
            cao.client.get(f"/terminals/{victim}/output", params={"mode": "last"}).json().get("output")
            == "MOCK: from inbox"
        ),
        message="inbox delivered",
    )


def test_a_hook_is_bounded_while_the_server_is_stuck(cao: CaoServer):
    """A server that is up but does not read (stopped here) costs a hook its ack wait, no more;
    the record waits in the FIFO and is applied, in order, once the server runs again."""
    tid = cao.create_session()["id"]
    cao.wait_status(tid, "idle")
    assert cao.proc is not None
    cao.proc.send_signal(signal.SIGSTOP)
    try:
        assert run_hook(cao, tid, "UserPromptSubmit").returncode == 0  # TimeoutExpired would be a hang
        assert run_hook(cao, tid, "Stop").returncode == 0
    finally:
        cao.proc.send_signal(signal.SIGCONT)
    wait_source(cao, tid, ("completed", "hook:Stop"))


def test_a_hook_returns_at_once_while_the_server_is_down_and_works_after_its_restart(cao: CaoServer):
    tid = cao.create_session()["id"]
    cao.wait_status(tid, "idle")
    cao.kill9()  # its FIFO and the file naming it stay behind
    assert run_hook(cao, tid, "Stop").returncode == 0
    cao.start()
    cao.stop()
    # More than a pipe holds: the payload goes to a file, only a short record to the FIFO.
    big = json.dumps({"last_assistant_message": "x" * 300_000})
    for _ in range(3):
        assert run_hook(cao, tid, "Stop", big).returncode == 0  # TimeoutExpired here would be a hang
    hook_fifo(cao.home).unlink()  # even without its FIFO
    assert run_hook(cao, tid, "Stop").returncode == 0
    assert not hook_fifo(cao.home).exists(), "the hook must not create a plain file in the FIFO's place"
    cao.start()  # adopts the agent and opens the channel again
    run_hook(cao, tid, "UserPromptSubmit")
    wait_source(cao, tid, ("processing", "hook:UserPromptSubmit"))
    run_hook(cao, tid, "Stop")
    wait_source(cao, tid, ("completed", "hook:Stop"))


# --- the real Claude Code CLI -----------------------------------------------------------------------
CLAUDE_VERSION = "2.1.197"
HELLO = "Hello from the scripted model."


@pytest.fixture
def claude_cao(tmp_path: Path):
    binary = npm_binary("@anthropic-ai/claude-code", CLAUDE_VERSION, "claude")
    with ScriptedModelServer() as model:
        model.set_script("claude", [{"match": "say hello", "reply": HELLO}])
        cao = real_cli_server(tmp_path, [binary], model.cli_env("claude"))
        (Path(cao.env["HOME"]) / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True}))
        store = cao.home / "agent-store"
        store.mkdir(parents=True)
        (store / "claude_dev.md").write_text("---\nname: claude_dev\nprovider: claude_code\n---\nA developer.\n")
        (tmp_path / "work").mkdir()
        cao.start()
        try:
            yield cao
        finally:
            cao.cleanup()


def claude_turn(cao: CaoServer, tid: str, message: str) -> None:
    cao.send(tid, message)
    wait_until(
        lambda: (
            source(cao, tid) == ("completed", "hook:Stop")
            and cao.client.get(f"/terminals/{tid}/output", params={"mode": "last"}).json().get("output") == HELLO
        ),
        timeout=60,
        message=f"{message!r} completed by Claude's Stop hook",
    )


def test_claude_hooks_reach_a_restarted_server_for_its_adopted_agent(claude_cao: CaoServer, tmp_path: Path):
    cao = claude_cao
    resp = cao.client.post(
        "/sessions", params={"agent_profile": "claude_dev", "working_directory": str(tmp_path / "work"), "yolo": True}
    )
    assert resp.status_code == 201, resp.text
    tid = resp.json()["id"]
    settings = json.loads((cao.home / "tmp" / tid / "settings.json").read_text())
    assert all("cao-hook.sh" in entry[0]["hooks"][0]["command"] for entry in settings["hooks"].values())
    claude_turn(cao, tid, "say hello")
    cao.kill9()
    cao.start()
    assert cao.client.get(f"/terminals/{tid}").json()["gone"] is False
    claude_turn(cao, tid, "say hello again")
    cao.client.delete(f"/terminals/{tid}")
