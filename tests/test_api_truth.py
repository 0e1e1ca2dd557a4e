"""What the HTTP API says is what it does: a held inbox message goes in the moment the text
that held it is erased, a reply longer than the pane's history comes back marked cut, and
the request body bound is where docs/http-api.md puts it.
"""

from __future__ import annotations

from cao_support import CaoServer, wait_until
from sse_support import EventStream


def _messages(server: CaoServer, tid: str) -> list[dict]:
    return server.client.get(f"/terminals/{tid}/inbox/messages", params={"limit": 100}).json()


def _key(server: CaoServer, tid: str, key: str) -> None:
    assert server.client.post(f"/terminals/{tid}/key", json={"key": key}).status_code == 200


def test_a_message_held_by_typed_text_goes_in_as_soon_as_the_text_is_erased(cao_factory):
    # The sweep (the safety net) cannot be what delivers it within this test.
    server = cao_factory(CAO_INBOX_SWEEP_SECONDS="3600").start()
    term = server.create_session()
    rcv = term["id"]
    server.wait_status(rcv, "idle")  # a fresh agent: idle before the typing and idle after it
    with EventStream(server, f"terminal.{rcv}.composer") as composer:
        for key in "abc":
            _key(server, rcv, key)
        # The status monitor has read the typed text (what the inbox asks it before a paste).
        composer.until(lambda f: f.data["has_text"], message="the composer holding text")
    msg = server.client.post(f"/terminals/{rcv}/inbox/messages", json={"sender_id": "tester", "message": "held"})
    assert msg.status_code == 200, msg.text
    # Keys go in under the same per-terminal lock as deliveries, after the delivery the POST
    # started: once this one has gone in, that delivery has decided. (Arrows are inert in the mock.)
    _key(server, rcv, "Left")
    assert [m["status"] for m in _messages(server, rcv)] == ["pending"]
    assert server.status(rcv) == "idle"
    for _ in "abc":
        _key(server, rcv, "BSpace")
    wait_until(
        lambda: [m["status"] for m in _messages(server, rcv)] == ["delivered"],
        timeout=5,
        message="delivered once the composer is empty, without waiting for the sweep",
    )
    server.wait_status(rcv, "completed")
    assert server.client.get(f"/terminals/{rcv}/output", params={"mode": "last"}).json()["output"] == "MOCK: held"


def test_a_reply_longer_than_the_history_comes_back_marked_cut(cao: CaoServer):
    from cli_agent_orchestrator.backends.tmux_windows import HISTORY_LIMIT

    tid = cao.create_session()["id"]
    lines = HISTORY_LIMIT + 10_000  # its first lines are gone from tmux's history for certain
    cao.send(tid, f"__mock_long_{lines}")
    cao.wait_status(tid, "completed", timeout=120)
    resp = cao.client.get(f"/terminals/{tid}/output", params={"mode": "last"})
    assert resp.status_code == 200, resp.text[:500]
    body = resp.json()
    assert body["mode"] == "last" and body["truncated"] is True
    assert "history" in body["reason"] and str(HISTORY_LIMIT) in body["reason"]
    assert f"MOCK: line {lines} of {lines}" in body["output"]  # the end is there...
    assert f"MOCK: line 1 of {lines}\n" not in body["output"]  # ...its start is not
    # A reply that fits is whole: the answer is what it always was.
    cao.send(tid, "short one")
    cao.wait_status(tid, "completed")
    body = cao.client.get(f"/terminals/{tid}/output", params={"mode": "last"}).json()
    assert body == {"output": "MOCK: short one", "mode": "last"}


# --- the request body bound (docs/http-api.md) --------------------------------------------------
README_BODY_LIMIT = 8 * 1024 * 1024  # "8 MiB", CAO_MAX_BODY_BYTES's default


def _body_of_size(size: int) -> bytes:
    """A JSON inbox message of exactly `size` bytes (JSON allows trailing blanks)."""
    head = b'{"sender_id": "me", "message": "x"}'
    return head + b" " * (size - len(head))


def _post_body(server: CaoServer, body: bytes, chunked: bool) -> tuple[int, dict]:
    # An unknown receiver: a body that is read and parsed gets 404, one refused unread 413.
    content = iter([body[i : i + 65536] for i in range(0, len(body), 65536)]) if chunked else body
    resp = server.client.post(
        "/terminals/deadbeef/inbox/messages", content=content, headers={"content-type": "application/json"}
    )
    return resp.status_code, resp.json()


def test_a_body_of_exactly_the_limit_is_read_and_one_byte_more_is_413(cao: CaoServer):
    for chunked in (False, True):  # declared by Content-Length, or streamed without one
        status, detail = _post_body(cao, _body_of_size(README_BODY_LIMIT), chunked)
        assert status == 404, (chunked, status, detail)
        status, detail = _post_body(cao, _body_of_size(README_BODY_LIMIT + 1), chunked)
        assert status == 413, (chunked, status, detail)
        assert detail == {"detail": f"request body exceeds {README_BODY_LIMIT} bytes"}


def test_the_longest_message_fits_the_body_limit_as_the_readme_says(cao: CaoServer):
    import json

    longest = 1_000_000  # characters in one message (the schema's maxLength)
    for text, ascii_only in (("\u0001" * longest, True), ("\U0001f600" * longest, False)):
        body = json.dumps({"sender_id": "me", "message": text}, ensure_ascii=ascii_only).encode()
        assert len(body) <= README_BODY_LIMIT  # escaped: 6 bytes a character; UTF-8: at most 4
        status, detail = _post_body(cao, body, chunked=False)
        assert status == 404, (status, str(detail)[:300])
    # Outside the Basic Multilingual Plane an escape is a surrogate pair, 12 bytes: that does not fit.
    body = json.dumps({"sender_id": "me", "message": "\U0001f600" * longest}).encode()
    assert len(body) > README_BODY_LIMIT
    assert _post_body(cao, body, chunked=False)[0] == 413


# --- rules the schema states and a service checks (api/schemas.py `stated`) ---------------------
def _agree(pattern: str, accepts, samples) -> None:
    import re

    for sample in samples:
        assert bool(re.fullmatch(pattern, sample)) == accepts(sample), sample


def _accepted(check) -> object:
    from cli_agent_orchestrator.errors import InvalidInput

    def accepts(value: str) -> bool:
        try:
            check(value)
        except InvalidInput:
            return False
        return True

    return accepts


def _samples(pattern: str, extra: list[str]) -> list[str]:
    """Strings the pattern takes and strings it does not: hypothesis, derandomized and bounded."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    found: list[str] = []

    @given(st.one_of(st.from_regex(pattern, fullmatch=True), st.text(alphabet="ab-_cao:/ ", max_size=70)))
    @settings(max_examples=300, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    def collect(value: str) -> None:
        found.append(value)

    collect()
    return found + extra


def test_the_stated_key_rule_is_the_one_the_input_service_applies():
    from cli_agent_orchestrator.api.schemas import KEY
    from cli_agent_orchestrator.services.input import valid_key

    extra = ["Enter", "C-c", "F12", "F13", "M-x", "S-1", "rm -rf", "", "Entr", "C-", "a\n"]
    _agree(KEY["pattern"], valid_key, _samples(KEY["pattern"], extra))


def test_the_stated_session_name_rules_are_the_ones_the_sessions_apply():
    from cli_agent_orchestrator.api.schemas import NEW_SESSION_NAME, SESSION_NAME
    from cli_agent_orchestrator.services.terminals.names import normalise_session_name

    accepts = _accepted(normalise_session_name)
    extra = ["cao-" + "x" * 60, "cao-" + "x" * 61, "x" * 60, "x" * 61, "-x", "cao-", "cao", "a b", "_a"]
    named = [name for name in _samples(SESSION_NAME["pattern"], extra) if name]  # a path segment is never empty
    _agree(SESSION_NAME["pattern"], accepts, named)
    _agree(NEW_SESSION_NAME["pattern"], accepts, [*named, ""])  # a new session's empty name: a generated one


def test_every_ssh_target_the_hosts_accept_has_the_stated_form():
    import re

    from cli_agent_orchestrator.api.host_routes import SSH_TARGET_FORM
    from cli_agent_orchestrator.services.hosts.records import parse_target

    accepts = _accepted(parse_target)
    samples = ["me@example.com:2222", "[::1]:22", "::1", "10.0.0.1", "a-b.c", "-oProxyCommand=x", "h:99999"]
    for target in _samples(SSH_TARGET_FORM, samples):
        if accepts(target):
            assert re.fullmatch(SSH_TARGET_FORM, target), target
