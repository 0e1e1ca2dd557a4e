"""Inbox delivery: on idle, queued while busy, in order, exactly once, failures reported; the
claim (the conditional UPDATE from pending) is won once by deliverers that raced to it."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

from conftest import CaoServer, read_records, wait_until


def _post(server: CaoServer, receiver: str, sender: str, text: str) -> dict:
    resp = server.client.post(f"/terminals/{receiver}/inbox/messages", json={"sender_id": sender, "message": text})
    assert resp.status_code == 200, resp.text
    return resp.json()


def _messages(server: CaoServer, tid: str, status: str | None = None) -> list[dict]:
    params = {"limit": 1000}
    if status:
        params["status"] = status
    return server.client.get(f"/terminals/{tid}/inbox/messages", params=params).json()


def _last_reply(server: CaoServer, tid: str) -> str:
    return server.client.get(f"/terminals/{tid}/output", params={"mode": "last"}).json().get("output") or ""


def test_message_to_idle_receiver_is_delivered_at_once(cao: CaoServer):
    rcv = cao.create_session()["id"]
    body = _post(cao, rcv, "tester", "inbox hello")
    assert body["success"] and body["receiver_id"] == rcv and isinstance(body["message_id"], int)
    wait_until(lambda: [m["status"] for m in _messages(cao, rcv)] == ["delivered"], message="delivered")
    cao.wait_status(rcv, "completed")
    assert cao.client.get(f"/terminals/{rcv}/output", params={"mode": "last"}).json()["output"] == "MOCK: inbox hello"


def test_query_string_form_still_works(cao: CaoServer):
    rcv = cao.create_session()["id"]
    resp = cao.client.post(f"/terminals/{rcv}/inbox/messages", params={"sender_id": "legacy", "message": "q"})
    assert resp.status_code == 200
    wait_until(lambda: _messages(cao, rcv, "delivered"), message="delivered")


def test_busy_receiver_gets_messages_in_order_after_its_turn(cao_factory, tmp_path: Path):
    record = tmp_path / "rec.jsonl"
    server = cao_factory(CAO_MOCK_RECORD=str(record)).start()
    rcv = server.create_session()["id"]
    server.send(rcv, "__mock_sleep_1")
    server.wait_status(rcv, "processing")
    for i in range(5):
        _post(server, rcv, "sender-a", f"ordered {i}")
    assert [m["status"] for m in _messages(server, rcv)] == ["pending"] * 5
    wait_until(lambda: len(_messages(server, rcv, "delivered")) == 5, timeout=20, message="all delivered")
    assert read_records(record) == ["__mock_sleep_1"] + [f"ordered {i}" for i in range(5)]


def test_concurrent_senders_each_message_pasted_exactly_once(cao_factory, tmp_path: Path):
    record = tmp_path / "rec.jsonl"
    server = cao_factory(CAO_MOCK_RECORD=str(record), CAO_MOCK_DELAY_MS="5").start()
    rcv = server.create_session()["id"]
    texts = [f"sender {s} message {i}" for s in range(4) for i in range(6)]

    def one_sender(s: int) -> None:  # each sender sends in order; senders race each other
        for i in range(6):
            _post(server, rcv, f"sender-{s}", f"sender {s} message {i}")

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(one_sender, range(4)))
    wait_until(lambda: len(read_records(record)) >= len(texts), timeout=30, message="all pasted")
    got = read_records(record)
    assert sorted(got) == sorted(texts)  # each exactly once
    for s in range(4):  # per-sender order kept
        mine = [t for t in got if t.startswith(f"sender {s} ")]
        assert mine == [f"sender {s} message {i}" for i in range(6)]
    wait_until(lambda: all(m["status"] == "delivered" for m in _messages(server, rcv)), message="all marked delivered")


def test_message_to_deleted_receiver_fails_and_sender_is_told(cao: CaoServer):
    sender = cao.create_session()["id"]
    rcv = cao.create_session()["id"]
    cao.send(rcv, "__mock_sleep_2")
    cao.wait_status(rcv, "processing")
    msg = _post(cao, rcv, sender, "you will never read this")
    assert [m["status"] for m in _messages(cao, rcv)] == ["pending"]  # held while the receiver works
    assert cao.client.delete(f"/terminals/{rcv}").status_code == 200
    # The message itself ends `failed`, with the reason.
    [failed] = wait_until(
        lambda: [m for m in _messages(cao, rcv) if m["status"] == "failed"], message="the message failed"
    )
    assert failed["id"] == msg["message_id"] and failed["message"] == "you will never read this"
    assert failed["error"] == "receiver terminal was deleted"
    # The sender, a terminal, gets one `[cao]` notice in its own inbox, and it is delivered to it.
    [notice] = wait_until(
        lambda: [m for m in _messages(cao, sender) if m["sender_id"] == "cao"], message="sender notified"
    )
    assert notice["message"].startswith(
        f"[cao] Your message #{msg['message_id']} to terminal {rcv} was not delivered: receiver terminal was deleted."
    ), notice
    assert "you will never read this" in notice["message"]
    wait_until(lambda: [m["status"] for m in _messages(cao, sender)] == ["delivered"], message="notice delivered")
    wait_until(
        lambda: _last_reply(cao, sender).startswith(f"MOCK: [cao] Your message #{msg['message_id']} "),
        message="the notice reached the sender's agent",
    )
    assert (
        cao.client.post(f"/terminals/{rcv}/inbox/messages", json={"sender_id": sender, "message": "x"}).status_code
        == 404
    )


def test_sending_to_yourself_is_refused(cao: CaoServer):
    tid = cao.create_session()["id"]
    resp = cao.client.post(f"/terminals/{tid}/inbox/messages", json={"sender_id": tid, "message": "me"})
    assert resp.status_code == 400


def test_nothing_is_pasted_into_a_composer_in_which_someone_is_typing(cao_factory, tmp_path: Path):
    """A human typing in the receiver's pane keeps inbox messages out of that composer; once the
    text is cleared, the message goes in on its own, unmixed with what was typed."""
    record = tmp_path / "rec.jsonl"
    server = cao_factory(CAO_MOCK_RECORD=str(record)).start()
    term = server.create_session()
    rcv = term["id"]
    server.send(rcv, "a first turn")
    server.wait_status(rcv, "completed")
    pane = f"{term['session_name']}:{term['name']}"
    # Someone types into the pane directly (not through cao) and has not pressed Enter.
    assert server.tmux("send-keys", "-t", pane, "-l", "half a thought").returncode == 0
    server.wait_status(rcv, "idle")  # cao has seen text in the composer (a finished turn stays completed otherwise)
    msg = _post(server, rcv, "tester", "from the inbox")
    # Keys go in under the same per-terminal lock as deliveries, after the delivery the POST
    # started: once this one has gone in, that delivery has decided. (Arrows are inert in the mock.)
    assert server.client.post(f"/terminals/{rcv}/key", json={"key": "Left"}).status_code == 200
    assert [m["status"] for m in _messages(server, rcv)] == ["pending"]
    screen = server.tmux("capture-pane", "-p", "-t", pane).stdout
    assert "❯ half a thought" in screen and "from the inbox" not in screen
    # The typist gives up (Ctrl-C empties the mock's composer): the message is delivered alone.
    assert server.client.post(f"/terminals/{rcv}/key", json={"key": "C-c"}).status_code == 200
    wait_until(
        lambda: [(m["id"], m["status"]) for m in _messages(server, rcv)] == [(msg["message_id"], "delivered")],
        message="delivered once the composer is empty",
    )
    wait_until(lambda: _last_reply(server, rcv) == "MOCK: from the inbox", message="the message's own turn")
    assert read_records(record) == ["a first turn", "from the inbox"]


def test_messages_to_windows_that_vanished_while_the_server_was_down_fail_at_restart(cao_factory):
    """At start-up a stored terminal whose window is gone is marked gone; its pending messages
    become `failed` and a sender that is a terminal gets a `[cao]` notice (delivered to it)."""
    server = cao_factory().start()
    sender = server.create_session()["id"]
    lost = server.create_session()
    server.send(lost["id"], "__mock_sleep_30")  # busy: the message below waits as pending
    server.wait_status(lost["id"], "processing")
    msg = _post(server, lost["id"], sender, "are you still there?")
    from_outside = _post(server, lost["id"], "a-script", "and from a script")
    assert [m["status"] for m in _messages(server, lost["id"])] == ["pending", "pending"]
    server.kill9()
    assert server.tmux("kill-window", "-t", f"{lost['session_name']}:{lost['name']}").returncode == 0
    server.start()

    gone = server.client.get(f"/terminals/{lost['id']}").json()
    assert gone["gone"] is True and gone["status"] == "error"
    failed = wait_until(
        lambda: (ms := _messages(server, lost["id"])) and all(m["status"] == "failed" for m in ms) and ms,
        message="both messages failed",
    )
    assert [m["id"] for m in failed] == [msg["message_id"], from_outside["message_id"]]
    assert all(m["error"] for m in failed), failed
    # Only the sender that is a terminal can be told; it is told once, about its own message.
    [notice] = wait_until(
        lambda: [m for m in _messages(server, sender) if m["sender_id"] == "cao"], message="the sender notified"
    )
    assert notice["message"].startswith(
        f"[cao] Your message #{msg['message_id']} to terminal {lost['id']} was not delivered: "
    ), notice
    assert "are you still there?" in notice["message"]
    wait_until(
        lambda: _last_reply(server, sender).startswith(f"MOCK: [cao] Your message #{msg['message_id']} "),
        message="the notice reached the sender's agent",
    )


def test_eager_delivery_still_waits_for_a_receiver_that_takes_no_input_while_busy(cao_factory, tmp_path: Path):
    """CAO_EAGER_INBOX_DELIVERY=true only speeds up providers that accept input while busy
    (`accepts_input_while_busy`: Claude Code alone). The mock does not, so its messages still
    wait for its ready edge; the eager path itself is tested with Claude Code
    (tests/test_real_claude_eager_inbox.py)."""
    record = tmp_path / "rec.jsonl"
    server = cao_factory(CAO_MOCK_RECORD=str(record), CAO_EAGER_INBOX_DELIVERY="true").start()
    rcv = server.create_session()["id"]
    server.send(rcv, "__mock_sleep_3")
    server.wait_status(rcv, "processing")
    _post(server, rcv, "tester", "after your turn")
    # The delivery the POST started has decided once a key got through the same lock after it.
    assert server.client.post(f"/terminals/{rcv}/key", json={"key": "Left"}).status_code == 200
    assert [m["status"] for m in _messages(server, rcv)] == ["pending"]
    assert server.status(rcv) == "processing"
    wait_until(
        lambda: [m["status"] for m in _messages(server, rcv)] == ["delivered"],
        timeout=20,
        message="delivered after the turn",
    )
    assert read_records(record) == ["__mock_sleep_3", "after your turn"]


# --- the claim: one conditional UPDATE is the exactly-once gate --------------------------------
def test_of_two_deliverers_that_both_saw_a_message_pending_only_one_claims_it(tmp_path: Path):
    """Two stores (two engines, two connections) on one database both read the message as
    pending, as racing deliverers do; then both claim it. Only the first claim may win, and the
    loser must not overwrite the winner's paste mark; a delivered message is never claimed."""
    from cli_agent_orchestrator.models import MessageStatus
    from cli_agent_orchestrator.store.db import Store

    first, second = Store(tmp_path / "cao.db"), Store(tmp_path / "cao.db")
    try:
        msg = first.add_message("sender", "fe000001", "only once")
        seen_by_first, seen_by_second = first.next_pending("fe000001"), second.next_pending("fe000001")
        assert seen_by_first is not None and seen_by_second is not None
        assert seen_by_first.status == seen_by_second.status == MessageStatus.PENDING
        assert first.claim(seen_by_first, "10,3,0") is True
        assert second.claim(seen_by_second, "99,9,0") is False
        row = second.get_message(msg.id)
        assert row is not None and (row.status, row.paste_mark) == (MessageStatus.DELIVERING, "10,3,0")
        first.finish_message(msg.id, MessageStatus.DELIVERED)
        assert second.claim(seen_by_second, "99,9,0") is False
        assert second.get_message(msg.id).status == MessageStatus.DELIVERED  # type: ignore[union-attr]
    finally:
        first.close()
        second.close()


def test_a_message_the_server_delivered_cannot_be_claimed_again_by_another_deliverer(cao_factory, tmp_path: Path):
    """A second deliverer (a store of its own on the server's database) read the message while
    it was pending; the server then delivers it. The late claim loses, the row stays delivered,
    and the receiver got the text once."""
    from cli_agent_orchestrator.models import MessageStatus
    from cli_agent_orchestrator.store.db import Store

    record = tmp_path / "rec.jsonl"
    server = cao_factory(CAO_MOCK_RECORD=str(record), CAO_INBOX_SWEEP_SECONDS="600").start()
    rcv = server.create_session()["id"]
    server.send(rcv, "__mock_sleep_1")
    server.wait_status(rcv, "processing")
    posted = _post(server, rcv, "tester", "typed exactly once")
    other = Store(server.home / "db" / "cli-agent-orchestrator.db")
    try:
        stale = other.next_pending(rcv)
        assert stale is not None and stale.id == posted["message_id"] and stale.status == MessageStatus.PENDING
        wait_until(lambda: _messages(server, rcv, "delivered"), timeout=15, message="the server delivered it")
        assert other.claim(stale, "0,0,0") is False
        wait_until(lambda: len(read_records(record)) == 2, message="the receiver's turn recorded")
        server.wait_status(rcv, "completed")
        assert [(m["id"], m["status"]) for m in _messages(server, rcv)] == [(posted["message_id"], "delivered")]
        assert read_records(record) == ["__mock_sleep_1", "typed exactly once"]
        assert _last_reply(server, rcv) == "MOCK: typed exactly once"
    finally:
        other.close()
