"""Which webhook answers are tried again: a real cao-server posts its events to a local endpoint
that answers each event's first try with a scripted status. 408 and 429 (with and without
Retry-After) are tried again and delivered; 400, 404 and 422 are tried exactly once and the
event goes to the dead-letter file.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from conftest import CaoServer, read_records, wait_until

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")

# Each event's first try gets the next of these (status, Retry-After); every later try 200.
FIRST_ANSWERS: list[tuple[int, str | None]] = [
    (408, None),
    (429, None),
    (429, "1"),
    (400, None),
    (404, None),
    (422, None),
]
RETRY_AFTER_S = 1.0


class ScriptedEndpoint:
    """Records every try (delivery id, status answered, when) and answers as FIRST_ANSWERS says."""

    def __init__(self) -> None:
        self.tries: list[dict[str, Any]] = []
        self.first_answer: dict[str, tuple[int, str | None]] = {}
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                delivery = self.headers["X-CAO-Delivery"]
                with lock:
                    if delivery not in outer.first_answer:
                        answer = FIRST_ANSWERS[len(outer.first_answer) % len(FIRST_ANSWERS)]
                        outer.first_answer[delivery] = answer
                    else:
                        answer = (200, None)
                    outer.tries.append(
                        {"delivery": delivery, "status": answer[0], "at": time.monotonic(), "event": json.loads(body)}
                    )
                self.send_response(answer[0])
                if answer[1] is not None:
                    self.send_header("Retry-After", answer[1])
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def by_delivery(self) -> list[list[dict[str, Any]]]:
        """The tries of each event, events in the order of their first try."""
        order = list(self.first_answer)
        return [[t for t in self.tries if t["delivery"] == d] for d in order]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[ScriptedEndpoint]:
    server = ScriptedEndpoint()
    try:
        yield server
    finally:
        server.close()


def webhook_server(cao_factory, endpoint: ScriptedEndpoint) -> CaoServer:
    server = cao_factory("home")
    server.home.mkdir(parents=True, exist_ok=True)
    plugins = {
        "enabled": ["webhook"],
        "webhook": {"url": endpoint.url, "events": ["inbox.queued"], "max_attempts": 3, "backoff_s": 0.05},
    }
    (server.home / "settings.json").write_text(json.dumps({"plugins": plugins}))
    return server.start()


@needs_tmux
def test_408_and_429_are_retried_and_other_4xx_dead_lettered_after_one_try(cao_factory, endpoint: ScriptedEndpoint):
    cao = webhook_server(cao_factory, endpoint)
    rcv = cao.create_session()["id"]
    for i in range(len(FIRST_ANSWERS)):
        resp = cao.client.post(f"/terminals/{rcv}/inbox/messages", json={"sender_id": "tester", "message": f"m{i}"})
        assert resp.status_code == 200, resp.text
    dead = cao.home / "logs" / "webhook-dead-letter.jsonl"

    def last_event_settled() -> bool:
        # Events go one at a time, in order: once the last one is delivered or buried, every
        # try of every event has been made.
        tries = endpoint.by_delivery()
        if len(tries) < len(FIRST_ANSWERS):
            return False
        last = tries[-1]
        buried = {letter["event"]["id"] for letter in read_records(dead)}  # type: ignore[index]
        return last[-1]["status"] == 200 or last[0]["delivery"] in buried

    wait_until(last_event_settled, timeout=30, message="the last event delivered or dead-lettered")

    events = endpoint.by_delivery()
    assert [[t["status"] for t in tries] for tries in events] == [
        [408, 200],
        [429, 200],
        [429, 200],
        [400],
        [404],
        [422],
    ]
    assert [tries[0]["event"]["data"]["message_id"] for tries in events] == sorted(
        tries[0]["event"]["data"]["message_id"] for tries in events
    )
    # Retry-After is waited out (the configured backoff is 0.05 s).
    asked = events[2]
    assert asked[1]["at"] - asked[0]["at"] >= RETRY_AFTER_S - 0.05
    letters = read_records(dead)
    assert [(letter["attempts"], letter["error"]) for letter in letters] == [  # type: ignore[index]
        (1, "HTTP 400"),
        (1, "HTTP 404"),
        (1, "HTTP 422"),
    ]
    assert [letter["event"]["id"] for letter in letters] == [tries[0]["delivery"] for tries in events[3:]]  # type: ignore[index]
    stats = {p["name"]: p for p in cao.client.get("/diagnostics").json()["plugins"]}["webhook"]
    assert stats["failures"] == 3


def test_retry_after_reads_seconds_and_http_dates():
    import httpx

    from cli_agent_orchestrator.plugins.webhook import retry_after

    def answer(value: str | None) -> httpx.Response:
        return httpx.Response(429, headers={"Retry-After": value} if value is not None else {})

    assert retry_after(answer("7")) == 7.0
    assert retry_after(answer(None)) is None and retry_after(answer("soon")) is None
    assert retry_after(answer("Wed, 21 Oct 2015 07:28:00 GMT")) == 0.0  # a date passed: at once
    later = retry_after(answer(time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))))
    assert later is not None and 25 <= later <= 30
