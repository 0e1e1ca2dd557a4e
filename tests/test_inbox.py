"""Inbox delivery: on idle, queued while busy, in order, exactly once, failures reported."""
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


def test_message_to_idle_receiver_is_delivered_at_once(cao: CaoServer):
    rcv = cao.create_session()["id"]
    body = _post(cao, rcv, "tester", "inbox hello")
    assert body["success"] and body["receiver_id"] == rcv and isinstance(body["message_id"], int)
    wait_until(lambda: [m["status"] for m in _messages(cao, rcv)] == ["delivered"], message="delivered")
    cao.wait_status(rcv, "completed")
    assert cao.client.get(f"/terminals/{rcv}/output", params={"mode": "last"}).json()["output"] == \
        "MOCK: inbox hello"


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
    wait_until(lambda: all(m["status"] == "delivered" for m in _messages(server, rcv)),
               message="all marked delivered")


def test_message_to_deleted_receiver_fails_and_sender_is_told(cao: CaoServer):
    sender = cao.create_session()["id"]
    rcv = cao.create_session()["id"]
    cao.send(rcv, "__mock_sleep_2")
    cao.wait_status(rcv, "processing")
    msg = _post(cao, rcv, sender, "you will never read this")
    cao.client.delete(f"/terminals/{rcv}")
    notices = wait_until(lambda: [m for m in _messages(cao, sender) if m["sender_id"] == "cao"],
                         message="sender notified")
    assert f"#{msg['message_id']}" in notices[0]["message"] and rcv in notices[0]["message"]
    assert cao.client.post(f"/terminals/{rcv}/inbox/messages",
                           json={"sender_id": sender, "message": "x"}).status_code == 404


def test_sending_to_yourself_is_refused(cao: CaoServer):
    tid = cao.create_session()["id"]
    resp = cao.client.post(f"/terminals/{tid}/inbox/messages", json={"sender_id": tid, "message": "me"})
    assert resp.status_code == 400
