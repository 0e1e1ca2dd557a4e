"""Plugins against a real cao-server with mock agents: the built-in webhook and audit log see
every event of a handoff (driven through the official MCP client) in order, once each; a
plugin that raises or blocks changes nothing else; the webhook retries, then dead-letters;
plugins that are missing or broken leave the server running and say so in /diagnostics.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import shutil
import stat
import threading
import time
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cao_support import REPO, CaoServer, read_records, wait_until
from mcp_support import agent_env, call, mcp_session

from cli_agent_orchestrator import events
from cli_agent_orchestrator.plugins.dispatch import actor_of, describe

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")

SECRET = "test-signing-secret"
SLACK_EXAMPLE = REPO / "examples" / "slack_plugin"

# Plugins the tests enable by import path (plugins.modules), written where the server imports them.
RAISING_PLUGIN = """
from cli_agent_orchestrator.plugins import hookimpl

@hookimpl
def post_event(event):
    raise RuntimeError("raising plugin: " + event["type"])

@hookimpl
def post_create_terminal(event, terminal_id):
    raise ValueError("raising plugin does not like " + terminal_id)
"""
# Blocks in its first hook until the test creates the gate file, then records each event id.
GATED_PLUGIN = """
import os, time
from pathlib import Path
from cli_agent_orchestrator.plugins import hookimpl

GATE = Path(os.environ["CAO_TEST_PLUGIN_GATE"])

@hookimpl
def post_event(event):
    while not GATE.exists():
        time.sleep(0.02)
    with open(GATE.parent / "gated-seen.txt", "a") as f:
        f.write(event["id"] + "\\n")
"""
BROKEN_PLUGIN = 'raise RuntimeError("this plugin cannot be imported")\n'


class Receiver:
    """A local HTTP endpoint in a thread: records every request; `/fail...` answers 500."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    outer.requests.append(
                        {"path": self.path, "headers": dict(self.headers), "body": body, "at": time.monotonic()}
                    )
                self.send_response(500 if self.path.startswith("/fail") else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def at(self, path: str) -> list[dict[str, Any]]:
        return [r for r in list(self.requests) if r["path"] == path]

    def events(self, path: str) -> list[dict[str, Any]]:
        return [json.loads(r["body"]) for r in self.at(path)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver()
    try:
        yield rec
    finally:
        rec.close()


def plugin_server(cao_factory, tmp_path: Path, plugins: dict[str, Any], **env: str) -> CaoServer:
    """A cao-server whose settings.json holds `plugins`, with tmp_path/plugins importable."""
    code = tmp_path / "plugins"
    code.mkdir(exist_ok=True)
    (code / "cao_raising_plugin.py").write_text(RAISING_PLUGIN)
    (code / "cao_gated_plugin.py").write_text(GATED_PLUGIN)
    (code / "cao_broken_plugin.py").write_text(BROKEN_PLUGIN)
    path = os.pathsep.join(filter(None, [str(code), str(SLACK_EXAMPLE), os.environ.get("PYTHONPATH")]))
    server = cao_factory("home", PYTHONPATH=path, **env)
    server.home.mkdir(parents=True, exist_ok=True)
    (server.home / "settings.json").write_text(json.dumps({"plugins": plugins}))
    return server


def plugin_stats(cao: CaoServer) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in cao.client.get("/diagnostics").json()["plugins"]}


def audit_lines(cao: CaoServer) -> list[dict[str, Any]]:
    return read_records(cao.home / "logs" / "audit.jsonl")  # type: ignore[return-value]


def index_of(events: list[dict[str, Any]], kind: str, **data: Any) -> int:
    for i, event in enumerate(events):
        if event["type"] == kind and all(event["data"].get(k) == v for k, v in data.items()):
            return i
    raise AssertionError(f"no {kind} {data} in {[e['type'] for e in events]}")


# --- a handoff, seen by every plugin ------------------------------------------------------------
@needs_tmux
@pytest.mark.anyio
async def test_webhook_and_audit_log_see_every_event_of_a_handoff_once_in_order(
    cao_factory, tmp_path: Path, receiver: Receiver
) -> None:
    gate = tmp_path / "gate"
    cao = plugin_server(
        cao_factory,
        tmp_path,
        {
            "enabled": ["raising", "gated", "audit_log", "webhook"],
            "modules": {"raising": "cao_raising_plugin", "gated": "cao_gated_plugin"},
            "webhook": {"url": f"{receiver.url}/hook", "secret": SECRET},
        },
        CAO_TEST_PLUGIN_GATE=str(gate),
    ).start()

    sup = cao.client.post(
        "/sessions",
        params={"agent_profile": "code_supervisor", "provider": "mock_cli"},
        headers={"X-CAO-Client": "cli"},
    ).json()
    async with mcp_session(agent_env(cao, sup["id"])) as session:
        result = await call(session, "handoff", agent_profile="developer", message="summarise the plan")
    # The raising plugin and the gated one (still stuck in its first event) changed nothing.
    assert result["success"] is True, result
    assert result["output"].strip() == "MOCK: summarise the plan"
    worker = result["terminal_id"]

    wait_until(
        lambda: any(e["type"] == "handoff.finished" for e in receiver.events("/hook")), 20, message="handoff.finished"
    )
    events = receiver.events("/hook")

    # Once each, in order: ids unique, sequence numbers consecutive from the first event on.
    assert len({e["id"] for e in events}) == len(events)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    # Every body is signed with the secret.
    for req in receiver.at("/hook"):
        expected = "sha256=" + hmac.new(SECRET.encode(), req["body"], hashlib.sha256).hexdigest()
        assert req["headers"]["X-CAO-Signature-256"] == expected
        assert req["headers"]["X-CAO-Event"] == json.loads(req["body"])["type"]

    # The supervisor's session, created by the cli client, then the handoff bracket around its worker.
    created = index_of(events, "session.created", terminal_id=sup["id"])
    started = index_of(events, "handoff.started", caller_id=sup["id"], agent="developer")
    spawned = index_of(events, "terminal.spawned", terminal_id=worker, caller_id=sup["id"])
    removed = index_of(events, "terminal.removed", terminal_id=worker)
    finished = index_of(events, "handoff.finished", terminal_id=worker, ok=True)
    assert created < started < spawned < removed < finished
    worker_statuses = [
        e["data"]["status"]
        for e in events[spawned:removed]
        if e["type"] == "terminal.status" and e["data"]["terminal_id"] == worker
    ]
    assert "processing" in worker_statuses and worker_statuses[-1] == "completed", worker_statuses
    # Actors: the cli client for the session it made, the caller for its handoff and worker,
    # the worker itself for its own status.
    assert events[created]["actor"] == "cli"
    assert {events[i]["actor"] for i in (started, spawned, removed, finished)} == {sup["id"]}
    assert {e["actor"] for e in events if e["type"] == "terminal.status" and e["data"]["terminal_id"] == worker} == {
        worker
    }
    assert events[finished]["data"]["handoff_id"] == events[started]["data"]["handoff_id"]

    # The audit log holds the same events, line for line.
    wait_until(lambda: len(audit_lines(cao)) >= len(events), message="audit log caught up")
    assert audit_lines(cao)[: len(events)] == events
    log_file = cao.home / "logs" / "audit.jsonl"
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o600

    # The gated plugin has not got past its first event, and nobody waited for it.
    stats = plugin_stats(cao)
    assert stats["gated"]["state"] == "running" and stats["gated"]["handled"] == 0
    assert stats["gated"]["queued"] >= len(events) - 1
    gate.touch()
    seen = tmp_path / "gated-seen.txt"
    wait_until(
        lambda: seen.exists() and len(seen.read_text().split()) >= len(events), 20, message="gated plugin caught up"
    )
    assert seen.read_text().split()[: len(events)] == [e["id"] for e in events]

    # The raising plugin's failures are counted, and nothing else failed.
    diagnostics = cao.client.get("/diagnostics").json()
    raising = plugin_stats(cao)["raising"]
    assert raising["state"] == "running" and raising["handled"] >= len(events)
    assert raising["failures"] >= len(events) + 1  # post_event on each, and post_create_terminal
    assert raising["last_failure"].startswith(("post_event: RuntimeError: raising plugin", "post_create_terminal"))
    webhook = plugin_stats(cao)["webhook"]
    assert webhook["failures"] == 0 and webhook["handled"] >= len(events)
    assert diagnostics["consumer_failures"] == []


# --- the webhook gives up well ---------------------------------------------------------------------
@needs_tmux
def test_webhook_retries_with_backoff_then_dead_letters(cao_factory, tmp_path: Path, receiver: Receiver) -> None:
    cao = plugin_server(
        cao_factory,
        tmp_path,
        {
            "enabled": ["webhook"],
            "webhook": {"url": f"{receiver.url}/fail", "events": ["session.*"], "max_attempts": 3, "backoff_s": 0.2},
        },
    ).start()
    sup = cao.create_session("code_supervisor")
    dead = cao.home / "logs" / "webhook-dead-letter.jsonl"
    wait_until(dead.exists, 20, message="a dead letter")
    [letter] = read_records(dead)
    tries = receiver.at("/fail")
    # Only the filtered type was sent, three times, as the same delivery.
    assert len(tries) == 3
    assert {json.loads(t["body"])["type"] for t in tries} == {"session.created"}
    assert len({t["headers"]["X-CAO-Delivery"] for t in tries}) == 1
    assert "X-CAO-Signature-256" not in tries[0]["headers"]  # no secret configured
    # Exponential backoff: at least 0.2 s, then at least 0.4 s between tries.
    assert tries[1]["at"] - tries[0]["at"] >= 0.2 and tries[2]["at"] - tries[1]["at"] >= 0.4
    assert letter["attempts"] == 3 and letter["error"] == "HTTP 500" and letter["url"] == f"{receiver.url}/fail"
    assert letter["event"]["type"] == "session.created" and letter["event"]["data"]["terminal_id"] == sup["id"]
    assert stat.S_IMODE(dead.stat().st_mode) == 0o600
    webhook = plugin_stats(cao)["webhook"]
    assert webhook["failures"] == 1 and "dead-lettered after 3 tries: HTTP 500" in webhook["last_failure"]


# --- plugins that cannot run ------------------------------------------------------------------------
@needs_tmux
def test_missing_or_broken_plugins_leave_the_server_running_and_say_why(
    cao_factory, tmp_path: Path, receiver: Receiver
) -> None:
    cao = plugin_server(
        cao_factory,
        tmp_path,
        {
            "enabled": ["not_installed", "broken", "webhook", "audit_log"],
            "modules": {"broken": "cao_broken_plugin"},
            "webhook": {"secret": SECRET},  # no url
        },
    ).start()
    stats = plugin_stats(cao)
    assert stats["not_installed"]["state"] == "not installed"
    assert "'not_installed' is enabled but not installed" in stats["not_installed"]["error"]
    assert "'cao.plugins'" in stats["not_installed"]["error"] and "audit_log" in stats["not_installed"]["error"]
    assert stats["broken"]["state"] == "import failed"
    assert "failed to import: RuntimeError: this plugin cannot be imported" in stats["broken"]["error"]
    assert stats["webhook"]["state"] == "start failed"
    assert "plugins.webhook.url must be an http:// or https:// URL" in stats["webhook"]["error"]
    assert stats["audit_log"]["state"] == "running"
    out = (cao.home / "server.out").read_text()
    assert "failed to import: RuntimeError: this plugin cannot be imported" in out

    # Everything else works, and the plugin that did load sees it (credited to "api": no client header).
    sup = cao.create_session("code_supervisor")
    wait_until(lambda: any(e["type"] == "terminal.spawned" for e in audit_lines(cao)), message="audit line")
    created = next(e for e in audit_lines(cao) if e["type"] == "session.created")
    assert created["data"] == {"session_name": sup["session_name"], "terminal_id": sup["id"]}
    assert created["actor"] == "api"


@needs_tmux
def test_a_broken_plugins_setting_is_reported_and_the_server_starts(cao_factory, tmp_path: Path) -> None:
    cao = plugin_server(cao_factory, tmp_path, {"enabled": "audit_log"}).start()
    [problem] = cao.client.get("/diagnostics").json()["plugins"]
    assert problem["state"] == "settings error" and "plugins.enabled must be a list" in problem["error"]
    cao.create_session("code_supervisor")


# --- the example package ----------------------------------------------------------------------------
@needs_tmux
def test_slack_example_posts_text_to_an_incoming_webhook(cao_factory, tmp_path: Path, receiver: Receiver) -> None:
    project = tomllib.loads((SLACK_EXAMPLE / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["cao.plugins"] == {"slack": "cao_slack_plugin:SlackPlugin"}
    cao = plugin_server(
        cao_factory,
        tmp_path,
        {
            "enabled": ["slack"],
            "modules": {"slack": "cao_slack_plugin:SlackPlugin"},  # as its entry point names it
            "slack": {"url": f"{receiver.url}/slack"},
        },
    ).start()
    resp = cao.client.post(
        "/terminals/run-step", json={"agent": "developer", "provider": "mock_cli", "prompt": "hello"}, timeout=60
    )
    assert resp.status_code == 200, resp.text
    worker = resp.json()["terminal_id"]
    wait_until(lambda: receiver.at("/slack"), 20, message="a slack post")
    [post] = receiver.events("/slack")
    assert post == {"text": f"cao: handoff to developer (worker {worker}) done"}
    assert plugin_stats(cao)["slack"]["failures"] == 0


@needs_tmux
def test_assign_and_session_deletion_reach_the_audit_log(cao_factory, tmp_path: Path) -> None:
    cao = plugin_server(cao_factory, tmp_path, {"enabled": ["audit_log"]}).start()
    sup = cao.create_session("code_supervisor")
    session = sup["session_name"]
    resp = cao.client.post(
        f"/sessions/{session}/terminals",
        params={"agent_profile": "developer", "provider": "mock_cli", "caller_id": sup["id"], "defer_init": "true"},
        json={"initial_message": "build it", "initial_message_orchestration_type": "assign"},
    )
    assert resp.status_code == 201, resp.text
    worker = resp.json()["id"]
    wait_until(lambda: any(e["type"] == "assign.finished" for e in audit_lines(cao)), 20, message="assign.finished")
    assert cao.client.delete(f"/sessions/{session}").status_code == 200
    wait_until(lambda: any(e["type"] == "session.killed" for e in audit_lines(cao)), 20, message="session.killed")

    events = audit_lines(cao)
    started = index_of(events, "assign.started", terminal_id=worker, caller_id=sup["id"], agent="developer")
    finished = index_of(events, "assign.finished", terminal_id=worker, ok=True)
    removed = [index_of(events, "terminal.removed", terminal_id=t) for t in (sup["id"], worker)]
    killed = index_of(events, "session.killed", session_name=session)
    assert index_of(events, "terminal.spawned", terminal_id=worker) < started < finished < min(removed)
    assert max(removed) < killed
    assert sorted(events[killed]["data"]["terminal_ids"]) == sorted([sup["id"], worker])
    assert events[started]["actor"] == events[finished]["actor"] == sup["id"]
    assert events[killed]["actor"] == "api"


# --- post_send_message carries the text (issue 28, item 6) ------------------------------------
# Two plugins: one names `message` and tampers with what it got; one is written for the hook as it
# was (ids only). Each records what it received, as JSON lines in CAO_TEST_PLUGIN_OUT/<name>.
TEXT_PLUGIN = """
import json, os
from pathlib import Path
from cli_agent_orchestrator.plugins import hookimpl

@hookimpl
def post_send_message(event, message_id, message):
    line = {"message_id": message_id, "message": message, "data": dict(event["data"])}
    event["data"]["receiver_id"] = "tampered"  # its own copy: nobody else sees this
    with open(Path(os.environ["CAO_TEST_PLUGIN_OUT"]) / "text.jsonl", "a") as f:
        f.write(json.dumps(line) + "\\n")
"""
IDS_ONLY_PLUGIN = """
import json, os
from pathlib import Path
from cli_agent_orchestrator.plugins import hookimpl

@hookimpl
def post_send_message(event, message_id, sender_id, receiver_id):
    line = {"message_id": message_id, "sender_id": sender_id, "receiver_id": receiver_id, "data": event["data"]}
    with open(Path(os.environ["CAO_TEST_PLUGIN_OUT"]) / "ids.jsonl", "a") as f:
        f.write(json.dumps(line) + "\\n")
"""


@needs_tmux
def test_post_send_message_gives_the_text_to_plugins_that_name_it_and_ids_to_old_ones(
    cao_factory, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    code = tmp_path / "plugins"
    code.mkdir()
    (code / "cao_text_plugin.py").write_text(TEXT_PLUGIN)
    (code / "cao_ids_plugin.py").write_text(IDS_ONLY_PLUGIN)
    cao = plugin_server(
        cao_factory,
        tmp_path,
        {
            "enabled": ["text", "ids", "audit_log"],
            "modules": {"text": "cao_text_plugin", "ids": "cao_ids_plugin"},
        },
        CAO_TEST_PLUGIN_OUT=str(out),
    ).start()
    receiver = cao.create_session()["id"]
    text = "please review the plan: étape 2 ✓"
    posted = cao.client.post(f"/terminals/{receiver}/inbox/messages", json={"sender_id": "a-script", "message": text})
    assert posted.status_code == 200, posted.text
    message_id = posted.json()["message_id"]
    wait_until(lambda: (out / "text.jsonl").exists() and (out / "ids.jsonl").exists(), 20, message="both plugins")
    [got_text] = read_records(out / "text.jsonl")
    [got_ids] = read_records(out / "ids.jsonl")
    assert (got_text["message_id"], got_text["message"]) == (message_id, text)
    assert got_ids == {
        "message_id": message_id,
        "sender_id": "a-script",
        "receiver_id": receiver,
        "data": {"message_id": message_id, "receiver_id": receiver, "sender_id": "a-script"},
    }
    # The text is the hook's argument only: not in the event's data, nor in the audit log.
    assert "message" not in got_text["data"]
    wait_until(lambda: any(e["type"] == "inbox.queued" for e in audit_lines(cao)), 20, message="inbox.queued")
    queued = audit_lines(cao)[index_of(audit_lines(cao), "inbox.queued", message_id=message_id)]
    assert queued["data"]["receiver_id"] == receiver and text not in json.dumps(queued, ensure_ascii=False)
    assert plugin_stats(cao)["text"]["failures"] == 0 and plugin_stats(cao)["ids"]["failures"] == 0


# --- which events plugins see --------------------------------------------------------------------------
# Facts of the terminal's own plumbing, too many or too low-level to be worth a hook.
NOT_FOR_PLUGINS = {
    "TerminalOutput",
    "ScreenSnapshot",
    "TerminalResized",
    "ComposerChanged",
    "McpListed",  # its effect reaches plugins as the status change it causes (the agent is ready)
    "TerminalExited",
    "TerminalUnreachable",  # its effect reaches plugins as the status change it causes
    "InputSubmitted",
    "EnterPressed",  # input mechanics, as InputSubmitted
    "HookReceived",
    "BackendLost",
    "ConsumerFailed",
}


def test_every_event_is_mapped_to_a_hook_or_deliberately_left_out() -> None:
    abstract = (events.Event, events.WorkflowEvent, events.StepEvent)
    every = [getattr(events, name) for name in events.__all__]
    assert len(every) > 40  # the whole package, not a few of its modules
    for cls in every:
        name = cls.__name__
        if not issubclass(cls, events.Event) or cls in abstract:
            continue
        sample = cls(**{f.name: None for f in dataclasses.fields(cls) if f.init})
        assert (describe(sample) is None) == (name in NOT_FOR_PLUGINS), f"{name}: map it in plugins/dispatch.py"
    flow = events.FlowRunStarted("nightly", 3, "schedule")
    assert describe(flow) == (
        "post_flow_run",
        "flow.run.started",
        {"phase": "started", "flow_name": "nightly", "run_id": 3},
    )
    assert actor_of(flow, None) == "scheduler" and actor_of(flow, "cli") == "cli"
