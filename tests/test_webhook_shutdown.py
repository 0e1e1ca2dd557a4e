"""No webhook event vanishes at shutdown: against a real cao-server whose webhook points at an
endpoint that never answers, a closed port, or a slow one, every event it published is either
delivered or in the dead-letter file, exactly once, after a SIGTERM; /diagnostics' counts add
up. In process: what overflows a plugin's queue, or is left in it at stop, is reported too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import select
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cao_support import CaoServer, free_port, read_records, wait_until

from cli_agent_orchestrator.events import SessionCreated
from cli_agent_orchestrator.plugins import dispatch, hookimpl
from cli_agent_orchestrator.plugins.dispatch import PluginDispatcher
from cli_agent_orchestrator.plugins.manager import PluginLoad, Plugins, load_plugins, new_manager
from cli_agent_orchestrator.plugins.webhook import FAILED, MISSED_REASONS

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")

STOPPED = MISSED_REASONS["stopped"]
QUEUE_FULL = MISSED_REASONS["queue full"]
BURST = 40  # inbox messages posted in one go: each is several events (queued, typed, statuses)


class NeverAnswers:
    """Accepts connections and reads requests, never answers; records each delivery id."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/hook"
        self.seen: list[str] = []
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed by the test
                return
            self.connections.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            try:
                chunk = conn.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            data += chunk
        for line in data.split(b"\r\n\r\n")[0].decode().split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "x-cao-delivery":
                self.seen.append(value.strip())

    def close(self) -> None:
        self.listener.close()
        for conn in self.connections:
            conn.close()


class SlowReceiver:
    """Answers 200 after `delay_s`; an event counts as delivered only if its answer was sent
    while cao was still connected (a try cut at shutdown has closed the connection)."""

    def __init__(self, delay_s: float) -> None:
        self.delivered: list[str] = []
        self.cut: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                delivery = self.headers["X-CAO-Delivery"]
                time.sleep(delay_s)  # the slow endpoint (test side)
                if _peer_closed(self.connection):
                    outer.cut.append(delivery)
                    return
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                outer.delivered.append(delivery)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _peer_closed(conn: socket.socket) -> bool:
    readable, _, _ = select.select([conn], [], [], 0)
    if not readable:
        return False
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


@pytest.fixture
def never_answers() -> Iterator[NeverAnswers]:
    endpoint = NeverAnswers()
    try:
        yield endpoint
    finally:
        endpoint.close()


@pytest.fixture
def slow_receiver() -> Iterator[SlowReceiver]:
    endpoint = SlowReceiver(delay_s=0.25)
    try:
        yield endpoint
    finally:
        endpoint.close()


# --- helpers ----------------------------------------------------------------------------------
def webhook_server(cao_factory, webhook: dict[str, Any]) -> CaoServer:
    server = cao_factory("home")
    server.home.mkdir(parents=True, exist_ok=True)
    (server.home / "settings.json").write_text(json.dumps({"plugins": {"enabled": ["webhook"], "webhook": webhook}}))
    return server.start()


def burst(cao: CaoServer) -> None:
    """A session, then BURST inbox messages to it at once: well over BURST events."""
    receiver = cao.create_session("developer")["id"]
    for i in range(BURST):
        resp = cao.client.post(
            f"/terminals/{receiver}/inbox/messages", json={"sender_id": "tester", "message": f"note {i}"}
        )
        assert resp.status_code == 200, resp.text


def webhook_stats(cao: CaoServer) -> dict[str, Any]:
    [webhook] = [p for p in cao.client.get("/diagnostics").json()["plugins"] if p["name"] == "webhook"]
    return webhook


def assert_counts_add_up(stats: dict[str, Any]) -> None:
    # Every event given to the plugin is in exactly one stage, and every one it handled or
    # dropped has exactly one outcome.
    stages = stats["handled"] + stats["in_flight"] + stats["queued"] + stats["dropped"] + stats["left_at_stop"]
    assert stats["events"] == stages, stats
    outcomes = stats["delivered"] + stats["dead_lettered"] + stats["skipped"]
    assert stats["handled"] + stats["dropped"] == outcomes, stats


def sigterm_and_wait(cao: CaoServer) -> None:
    """Stop as a service manager would; the server must exit by itself, bounded."""
    assert cao.proc is not None
    cao.proc.send_signal(signal.SIGTERM)
    cao.proc.wait(20)  # uvicorn ends by re-raising the SIGTERM, after its shutdown completed
    cao.proc = None
    assert "Application shutdown complete" in (cao.home / "server.out").read_text()


def dead_letters(cao: CaoServer) -> list[dict[str, Any]]:
    return read_records(cao.home / "logs" / "webhook-dead-letter.jsonl")  # type: ignore[return-value]


def assert_once_each(ids: list[str], published: int) -> None:
    """`ids` are the events 1..n of this server run, each exactly once, n >= `published`."""
    seqs = sorted(int(i.rsplit("-", 1)[1]) for i in ids)
    assert len(set(ids)) == len(ids), "an event was recorded twice"
    assert seqs == list(range(1, len(seqs) + 1)), f"missing events: {sorted(set(range(1, seqs[-1] + 1)) - set(seqs))}"
    assert len(seqs) >= published


# --- a real cao-server ------------------------------------------------------------------------
@needs_tmux
def test_events_for_an_endpoint_that_never_answers_are_all_dead_lettered_at_stop(
    cao_factory, never_answers: NeverAnswers
) -> None:
    cao = webhook_server(cao_factory, {"url": never_answers.url, "timeout_s": 60, "backoff_s": 0.05})
    burst(cao)
    wait_until(lambda: never_answers.seen, message="the first try reached the endpoint")
    stats = webhook_stats(cao)
    assert stats["in_flight"] == 1 and stats["queued"] >= BURST and stats["delivered"] == 0
    assert_counts_add_up(stats)

    sigterm_and_wait(cao)  # a try that never gets an answer does not hold the server up

    letters = dead_letters(cao)
    assert_once_each([d["event"]["id"] for d in letters], stats["events"])
    assert {d["reason"] for d in letters} == {STOPPED}
    # The endpoint saw only the first event, on a try that was cut; the others were never tried.
    assert never_answers.seen == [letters[0]["event"]["id"]]
    assert (letters[0]["attempts"], letters[0]["error"]) == (1, None)
    assert {(d["attempts"], d["error"]) for d in letters[1:]} == {(0, None)}
    out = (cao.home / "server.out").read_text()
    assert f"plugin webhook: {len(letters)} events not handled at shutdown (1 in flight" in out


@needs_tmux
def test_events_for_a_closed_port_are_dead_lettered_once_with_the_last_error(cao_factory) -> None:
    url = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens there
    cao = webhook_server(cao_factory, {"url": url, "max_attempts": 4, "backoff_s": 0.2})
    burst(cao)
    wait_until(lambda: webhook_stats(cao)["dead_lettered"] >= 1, 20, message="a first dead letter")
    stats = webhook_stats(cao)
    assert stats["delivered"] == 0 and stats["failures"] == stats["dead_lettered"]
    assert_counts_add_up(stats)

    sigterm_and_wait(cao)

    letters = dead_letters(cao)
    assert_once_each([d["event"]["id"] for d in letters], stats["events"])
    failed = [d for d in letters if d["reason"] == FAILED]
    stopped = [d for d in letters if d["reason"] == STOPPED]
    assert len(failed) + len(stopped) == len(letters) and len(failed) >= stats["dead_lettered"]
    assert all(d["attempts"] == 4 and d["error"].startswith("ConnectError") for d in failed)
    # The one cut while retrying says how far it got and why; the rest were never tried.
    [retrying] = [d for d in stopped if d["attempts"]]
    assert retrying["error"].startswith("ConnectError") and 1 <= retrying["attempts"] <= 4
    assert len(stopped) >= BURST


@needs_tmux
def test_a_slow_endpoint_gets_what_it_can_and_the_rest_is_dead_lettered_none_twice(
    cao_factory, slow_receiver: SlowReceiver
) -> None:
    cao = webhook_server(cao_factory, {"url": slow_receiver.url})
    burst(cao)
    wait_until(lambda: len(slow_receiver.delivered) >= 3, 20, message="a few deliveries")
    stats = webhook_stats(cao)
    assert stats["delivered"] >= 3 and stats["dead_lettered"] == 0 and stats["queued"] > 0
    assert_counts_add_up(stats)

    sigterm_and_wait(cao)

    letters = dead_letters(cao)
    dead = [d["event"]["id"] for d in letters]
    delivered = slow_receiver.delivered
    assert dead and delivered, "the stop should fall in the middle of the stream"
    assert not set(dead) & set(delivered), "an event was both delivered and dead-lettered"
    assert_once_each(dead + delivered, stats["events"])
    assert {d["reason"] for d in letters} == {STOPPED}
    # A try cut at stop (its answer came too late) is dead-lettered, never counted delivered.
    assert set(slow_receiver.cut) <= set(dead)


# --- in process: overflow, and plugins other than the webhook -------------------------------------
def test_an_overflowing_webhook_queue_is_dead_lettered_too(
    tmp_path: Path, never_answers: NeverAnswers, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatch, "MAX_PLUGIN_QUEUE", 3)
    (tmp_path / "settings.json").write_text(
        json.dumps({"plugins": {"enabled": ["webhook"], "webhook": {"url": never_answers.url, "timeout_s": 60}}})
    )
    plugins = load_plugins(tmp_path)
    assert [load.state for load in plugins.loads] == ["loaded"]

    async def run() -> dict[str, Any]:
        dispatcher = PluginDispatcher(plugins)
        dispatcher.start()
        for i in range(10):  # in one loop turn: 3 fit in the queue, 7 overflow
            dispatcher.handle(SessionCreated(f"s{i}", f"t{i}"))
        while not (never_answers.seen and dispatcher.stats()[0]["dead_lettered"] == 7):
            await asyncio.sleep(0.02)  # test side: wait for the overflow report and the first try
        [stats] = dispatcher.stats()
        await dispatcher.stop()
        return stats

    stats = asyncio.run(asyncio.wait_for(run(), 20))
    assert (stats["events"], stats["dropped"], stats["in_flight"], stats["queued"]) == (10, 7, 1, 2)
    assert_counts_add_up(stats)
    letters = read_records(tmp_path / "logs" / "webhook-dead-letter.jsonl")
    assert_once_each([d["event"]["id"] for d in letters], 10)  # type: ignore[index]
    by_seq = {d["event"]["seq"]: d["reason"] for d in letters}  # type: ignore[index]
    assert by_seq == {**{s: STOPPED for s in (1, 2, 3)}, **{s: QUEUE_FULL for s in range(4, 11)}}


class Recorder:
    """Never finishes an event (an async hook, cut at stop); records what it missed."""

    def __init__(self) -> None:
        self.missed: list[tuple[int, str]] = []

    @hookimpl
    async def post_event(self, event: dict[str, Any]) -> None:
        await asyncio.Event().wait()

    @hookimpl
    def cao_missed_events(self, events: list[dict[str, Any]], reason: str) -> None:
        self.missed += [(e["seq"], reason) for e in events]


class Stuck:
    """A plain hook that blocks its thread until released; it has no cao_missed_events."""

    def __init__(self) -> None:
        self.release = threading.Event()

    @hookimpl
    def post_event(self, event: dict[str, Any]) -> None:
        self.release.wait(30)


def test_what_any_plugin_has_left_at_stop_is_counted_logged_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    recorder, stuck = Recorder(), Stuck()
    pm = new_manager()
    pm.register(recorder, name="recorder")
    pm.register(stuck, name="stuck")
    plugins = Plugins(
        pm, [PluginLoad("recorder", "test", "loaded", recorder), PluginLoad("stuck", "test", "loaded", stuck)]
    )

    async def run() -> PluginDispatcher:
        dispatcher = PluginDispatcher(plugins)
        dispatcher.start()
        for i in range(5):
            dispatcher.handle(SessionCreated(f"s{i}", f"t{i}"))
        await dispatcher.stop()  # bounded, though one hook never returns and one thread is stuck
        return dispatcher

    caplog.set_level(logging.WARNING, logger=dispatch.__name__)
    try:
        dispatcher = asyncio.run(asyncio.wait_for(run(), 20))
    finally:
        stuck.release.set()
    assert recorder.missed == [(seq, "stopped") for seq in range(1, 6)]
    for worker in dispatcher.workers:
        assert (worker.state, worker.events, worker.handled, worker.left_at_stop) == ("stopped", 5, 0, 5)
        assert worker.events == worker.handled + worker.left_at_stop + worker.queue.qsize() + worker.dropped
    assert "plugin recorder: 5 events not handled at shutdown (1 in flight, 4 queued); handed to" in caplog.text
    assert "plugin stuck: 5 events not handled at shutdown (1 in flight, 4 queued); it never sees them" in caplog.text
