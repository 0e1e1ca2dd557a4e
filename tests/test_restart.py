"""cao-server restarts (clean and kill -9): live terminals are re-adopted, dead
ones are marked gone, nothing stored is lost, pending messages still arrive."""

from __future__ import annotations

from pathlib import Path

from cao_support import read_records, wait_until


def test_kill9_and_restart_readopts_terminals(cao_factory, tmp_path: Path):
    record = tmp_path / "rec.jsonl"
    server = cao_factory(CAO_MOCK_RECORD=str(record)).start()
    keep = server.create_session()
    lost = server.create_session()
    server.send(keep["id"], "before crash")
    server.wait_status(keep["id"], "completed")
    server.kill9()
    # While the server is down, one agent's window disappears.
    server.tmux("kill-window", "-t", f"{lost['session_name']}:{lost['name']}")
    server.start()
    after = server.client.get(f"/terminals/{keep['id']}").json()
    assert after["status"] == "completed"  # read afresh from the screen
    gone = server.client.get(f"/terminals/{lost['id']}").json()
    assert gone["gone"] is True and gone["status"] == "error"
    # The re-adopted terminal is fully watched again: a new turn is seen end to end.
    server.send(keep["id"], "after crash")
    wait_until(
        lambda: (
            server.client.get(f"/terminals/{keep['id']}/output", params={"mode": "last"}).json().get("output")
            == "MOCK: after crash"
        )
    )
    assert read_records(record) == ["before crash", "after crash"]


def test_message_posted_before_crash_is_delivered_after_restart(cao_factory, tmp_path: Path):
    record = tmp_path / "rec.jsonl"
    server = cao_factory(CAO_MOCK_RECORD=str(record)).start()
    rcv = server.create_session()["id"]
    server.send(rcv, "__mock_sleep_2")
    server.wait_status(rcv, "processing")
    server.client.post(f"/terminals/{rcv}/inbox/messages", json={"sender_id": "x", "message": "survive me"})
    server.kill9()
    server.start()
    wait_until(lambda: "survive me" in read_records(record), timeout=15, message="delivered after restart")
    assert read_records(record).count("survive me") == 1
    wait_until(
        lambda: [m["status"] for m in server.client.get(f"/terminals/{rcv}/inbox/messages").json()] == ["delivered"],
        message="marked delivered",
    )


def test_clean_restart_keeps_sessions_and_inbox_history(cao_factory):
    server = cao_factory().start()
    term = server.create_session()
    server.client.post(f"/terminals/{term['id']}/inbox/messages", json={"sender_id": "x", "message": "hi"})
    wait_until(
        lambda: server.client.get(f"/terminals/{term['id']}/inbox/messages", params={"status": "delivered"}).json(),
        message="delivered",
    )
    server.stop()
    server.start()
    assert [s["name"] for s in server.client.get("/sessions").json()] == [term["session_name"]]
    assert len(server.client.get(f"/terminals/{term['id']}/inbox/messages").json()) == 1
    server.wait_status(term["id"], {"completed", "idle"})
