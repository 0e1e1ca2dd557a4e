"""Status from the CLI's own signals: hooks reach cao-server through `cao-hook`
(the mock agent runs them the way Claude Code does) and each status change
records which signal produced it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from cao_support import CaoServer, wait_until
from sse_support import EventStream

HOOKED = "---\nname: hooked\nprovider: mock_cli\nmock: {hooks: true}\n---\nA mock that reports its turns by hooks.\n"


def _install(cao: CaoServer) -> None:
    store = cao.home / "agent-store"
    store.mkdir(parents=True, exist_ok=True)
    (store / "hooked.md").write_text(HOOKED)


def test_turn_statuses_come_from_hooks(cao: CaoServer):
    _install(cao)
    term = cao.create_session("hooked")
    tid = term["id"]
    cao.send(tid, "hello hooks")
    wait_until(
        lambda: cao.client.get(f"/terminals/{tid}").json()["status_source"] == "hook:Stop",
        message="completed by the Stop hook",
    )
    detail = cao.client.get(f"/terminals/{tid}").json()
    assert detail["status"] == "completed"
    assert cao.client.get(f"/terminals/{tid}/output", params={"mode": "last"}).json()["output"] == "MOCK: hello hooks"
    with EventStream(cao, f"terminal.{tid}.status") as events:
        cao.send(tid, "__mock_ask__")
        # The screen shows the question and the Notification hook reports it; which of the two
        # is read first is a race, but the hook's reading is always published (its reason
        # names the question), so a server that ignored hooks never sends this event.
        events.until(
            lambda f: f.data["status"] == "waiting_user_answer" and f.data["source"] == "hook:Notification",
            message="waiting_user_answer from the Notification hook",
        )
        cao.send(tid, "yes")
        done = events.until(lambda f: f.data["status"] == "completed", message="the answered turn completed")
        assert done.data["source"] == "hook:Stop"
    assert (
        cao.client.get(f"/terminals/{tid}/output", params={"mode": "last"}).json()["output"] == "MOCK: you answered yes"
    )
    # Once hooks speak, the screen never decides busy or done: every such edge came from a hook.
    decided = [
        (f.data["status"], f.data["source"])
        for f in events.frames
        if f.data["status"] in ("processing", "completed", "idle")
    ]
    assert ("completed", "hook:Stop") in decided
    assert all(source.startswith("hook:") for status, source in decided), decided


def test_hook_events_through_http_and_cao_hook_command(cao: CaoServer):
    _install(cao)
    tid = cao.create_session("hooked")["id"]
    resp = cao.post_hook(tid, "UserPromptSubmit")
    assert resp.json() == {"success": True}
    wait_until(
        lambda: cao.client.get(f"/terminals/{tid}").json()["status_source"] == "hook:UserPromptSubmit",
        message="hook applied",
    )
    assert cao.status(tid) == "processing"  # the screen shows an idle prompt: only the hook says busy
    # The stdlib hook command, as a CLI would run it: JSON on stdin, identity and secret from the env.
    env = {**cao.env, "CAO_TERMINAL_ID": tid, "CAO_HOOK_SECRET": cao.hook_secret(tid)}
    proc = subprocess.run(
        [sys.executable, "-m", "cli_agent_orchestrator.cli.cao_hook", "Stop"],
        input=json.dumps({"hook_event_name": "Stop"}),
        text=True,
        env=env,
        timeout=10,
    )
    assert proc.returncode == 0
    wait_until(
        lambda: cao.client.get(f"/terminals/{tid}").json()["status_source"] == "hook:Stop", message="Stop applied"
    )
    assert cao.status(tid) == "completed"  # the screen still shows a fresh prompt: only the hook says so
    # Unknown events are taken and ignored; bad bodies and unknown terminals are refused.
    assert cao.post_hook(tid, "Whatever").json() == {"success": True}
    assert cao.client.get(f"/terminals/{tid}").json()["status"] == "completed"
    assert (
        cao.client.post(
            f"/terminals/{tid}/hooks", json={"event": "bad event!"}, headers={"X-CAO-Hook-Secret": cao.hook_secret(tid)}
        ).status_code
        == 422
    )
    assert cao.client.post("/terminals/deadbeef/hooks", json={"event": "Stop"}).status_code == 404


def test_a_hook_only_speaks_for_its_own_terminal(cao: CaoServer):
    """A forged Stop must not become a worker's answer, a forged UserPromptSubmit must not hold
    an agent busy: without the terminal's own secret a hook is refused and changes nothing."""
    _install(cao)
    victim = cao.create_session("hooked", session_name="victim")["id"]
    other = cao.create_session("hooked", session_name="other")["id"]
    cao.send(victim, "the real question")
    wait_until(lambda: cao.client.get(f"/terminals/{victim}").json()["status"] == "completed", message="answered")
    forged = {"last_assistant_message": "FORGED ANSWER"}
    for secret in ("", "not-the-secret", cao.hook_secret(other)):
        for event, payload in (("Stop", forged), ("UserPromptSubmit", {})):
            resp = cao.post_hook(victim, event, payload, secret=secret)
            assert resp.status_code == 403, resp.text
            assert "hook secret" in resp.json()["detail"]
    no_header = cao.client.post(f"/terminals/{victim}/hooks", json={"event": "UserPromptSubmit", "payload": {}})
    assert no_header.status_code == 403
    detail = cao.client.get(f"/terminals/{victim}").json()
    assert detail["status"] == "completed" and detail["status_source"] == "hook:Stop"
    assert (
        cao.client.get(f"/terminals/{victim}/output", params={"mode": "last"}).json()["output"]
        == "MOCK: the real question"
    )
    # Still an inbox receiver: a forged "busy" would have held this message back.
    cao.client.post(f"/terminals/{victim}/inbox/messages", json={"sender_id": "tester", "message": "from inbox"})
    wait_until(
        lambda: (
            cao.client.get(f"/terminals/{victim}/output", params={"mode": "last"}).json().get("output")
            == "MOCK: from inbox"
        ),
        message="inbox delivered",
    )


def test_hook_command_never_fails_the_cli(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CAO_TERMINAL_ID"}
    for extra in ({}, {"CAO_TERMINAL_ID": "deadbeef", "CAO_API_PORT": "1"}):
        proc = subprocess.run(
            [sys.executable, "-m", "cli_agent_orchestrator.cli.cao_hook", "Stop"],
            input="not json",
            text=True,
            env={**env, **extra},
            timeout=10,
        )
        assert proc.returncode == 0


def test_a_clis_own_hook_json_is_taken_as_an_http_hook_posts_it(cao: CaoServer):
    """Claude Code's `"type": "http"` hooks post their raw hook JSON (the event in
    `hook_event_name`): the route takes that form too, with the same secret rule."""
    _install(cao)
    tid = cao.create_session("hooked")["id"]
    raw = {"hook_event_name": "Notification", "session_id": "s", "notification_type": "permission_prompt"}
    refused = cao.client.post(f"/terminals/{tid}/hooks", json=raw, headers={"X-CAO-Hook-Secret": "wrong"})
    assert refused.status_code == 403
    headers = {"X-CAO-Hook-Secret": cao.hook_secret(tid)}
    assert cao.client.post(f"/terminals/{tid}/hooks", json=raw, headers=headers).json() == {"success": True}
    # The whole JSON is the payload: the provider reads notification_type from it.
    wait_until(
        lambda: cao.client.get(f"/terminals/{tid}").json()["status_source"] == "hook:Notification",
        message="the raw Notification applied",
    )
    assert cao.status(tid) == "waiting_user_answer"
    assert cao.client.post(f"/terminals/{tid}/hooks", json={"session_id": "s"}, headers=headers).status_code == 422


def test_a_clis_own_http_hook_is_admitted_as_its_user_and_a_browser_is_not(cao: CaoServer):
    """Qwen Code posts its hooks itself, with Node's fetch, which adds `Sec-Fetch-Mode: cors`
    and no other Fetch metadata. Such a post to the hooks route with a hook secret is read as
    the CLI it is (admitted by its socket's user, then the route checks the secret); anything
    a browser sends (it always adds Sec-Fetch-Site) still needs a browser session."""
    _install(cao)
    tid = cao.create_session("hooked")["id"]
    secret = cao.hook_secret(tid)
    body = {"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": "hi"}  # the CLI's own JSON
    node = {"sec-fetch-mode": "cors", "content-type": "application/json"}

    resp = cao.client.post(f"/terminals/{tid}/hooks", json=body, headers={**node, "X-CAO-Hook-Secret": secret})
    assert resp.status_code == 200, resp.text
    wait_until(
        lambda: cao.client.get(f"/terminals/{tid}").json()["status_source"] == "hook:UserPromptSubmit",
        message="the CLI's HTTP hook applied",
    )
    # The route still wants this terminal's own secret.
    wrong = cao.client.post(f"/terminals/{tid}/hooks", json=body, headers={**node, "X-CAO-Hook-Secret": "nope"})
    assert wrong.status_code == 403
    # A browser's request, even with a secret, or a Node-like one elsewhere or without a secret: refused.
    for headers, path in [
        ({**node, "sec-fetch-site": "cross-site", "X-CAO-Hook-Secret": secret}, f"/terminals/{tid}/hooks"),
        ({**node, "sec-fetch-site": "same-origin", "X-CAO-Hook-Secret": secret}, f"/terminals/{tid}/hooks"),
        (node, f"/terminals/{tid}/hooks"),
        ({**node, "X-CAO-Hook-Secret": secret}, f"/terminals/{tid}/input"),
    ]:
        resp = cao.client.post(path, json={**body, "message": "x"}, headers=headers)
        assert resp.status_code == 401, (headers, path, resp.status_code)
    assert cao.client.get(f"/terminals/{tid}").json()["status_source"] == "hook:UserPromptSubmit"
