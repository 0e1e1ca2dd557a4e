"""The inbox guarantee under crashes: cao-server is killed with -9 at each point of a delivery
that matters while messages stream in; afterwards every stored message has been pasted exactly
once, in order, and none is lost."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cao_support import read_records, wait_until
from crash_support import leave_in_flight, window_of

from cli_agent_orchestrator.services.inbox import MARK_ROWS_ABOVE, occurrences

# --- kill -9 at named points of a message stream -----------------------------------------------
# Each scenario stops cao-server at one exact point of a delivery while more messages queue behind
# it, then restarts it. The periodic sweep (default 30 s) is set to an hour here, so it never runs
# during a test: the restart's recovery and the status events must do all the work.
NO_SWEEP = "3600"
WITHIN_S = 25
KILL_POINTS = {
    # The receiver is busy with a delivered message (a 300 s turn); the rest wait as `pending`. It
    # is still busy when the server is back, and only its next ready edge (the test interrupts the
    # turn with Escape) may deliver them.
    "queued_behind_a_busy_receiver": None,
    # The oldest waiting message was claimed (mark taken), but the paste never happened.
    "claimed_not_pasted": dict(pasted=False, submitted=False),
    # Pasted into the composer, Enter not yet pressed.
    "pasted_not_submitted": dict(pasted=True, submitted=False),
    # Pasted and submitted (the agent took it), `delivered` not yet written.
    "submitted_not_recorded": dict(pasted=True, submitted=True),
}


def _inbox(server, receiver: str) -> list[dict]:
    return server.client.get(f"/terminals/{receiver}/inbox/messages", params={"limit": 1000}).json()


def _post(server, receiver: str, text: str) -> int:
    resp = server.client.post(f"/terminals/{receiver}/inbox/messages", json={"sender_id": "stream", "message": text})
    assert resp.status_code == 200, resp.text
    return resp.json()["message_id"]


def _claim_while_down(
    server, receiver: str, message_id: int, text: str, *, pasted: bool, submitted: bool, record: Path
) -> None:
    """Leave message `message_id` exactly as a crash at that point of its delivery would: claimed
    with the mark cao takes just before pasting, and optionally pasted and submitted."""
    assert server.proc is None
    window = window_of(server, receiver)
    history, row = map(
        int, server.tmux("display-message", "-p", "-t", window, "#{history_size} #{cursor_y}").stdout.split()
    )
    region = server.tmux(
        "capture-pane", "-p", "-J", "-t", window, "-S", str(max(row - MARK_ROWS_ABOVE, -history))
    ).stdout
    [changed] = server.sql(
        "UPDATE inbox_messages SET status = 'delivering', claimed_at = '2026-01-01T00:00:00', "
        "paste_mark = :mark WHERE id = :id AND status = 'pending'",
        mark=f"{history},{row},{occurrences(text, region)}",
        id=message_id,
    )
    assert changed == 1
    if pasted:
        env = {k: v for k, v in server.env.items() if k != "TMUX"}
        subprocess.run(
            ["tmux", "-L", server._socket_name(), "load-buffer", "-b", "crash", "-"],
            input=text.encode(),
            env=env,
            check=True,
            capture_output=True,
        )
        assert server.tmux("paste-buffer", "-p", "-d", "-b", "crash", "-t", window).returncode == 0
        wait_until(lambda: text in server.tmux("capture-pane", "-p", "-t", window).stdout, message="the paste shown")
    if submitted:
        assert server.tmux("send-keys", "-t", window, "Enter").returncode == 0
        wait_until(lambda: read_records(record)[-1:] == [text], message="the agent took the message")


@pytest.mark.parametrize("kill_point", list(KILL_POINTS))
def test_kill9_during_message_stream_loses_and_repeats_nothing(cao_factory, tmp_path: Path, kill_point: str):
    record = tmp_path / "rec.jsonl"
    server = cao_factory(CAO_MOCK_RECORD=str(record), CAO_MOCK_DELAY_MS="5", CAO_INBOX_SWEEP_SECONDS=NO_SWEEP).start()
    rcv = server.create_session()["id"]
    crafted = KILL_POINTS[kill_point]
    # Busy until the test ends the turn when it must outlast the restart; else short, and waited
    # out while the server is down.
    busy = "__mock_sleep_300" if crafted is None else "__mock_sleep_1"
    _post(server, rcv, busy)
    wait_until(
        lambda: read_records(record) == [busy] and server.status(rcv) == "processing",
        message="the receiver busy with the first message",
    )
    wait_until(lambda: [m["status"] for m in _inbox(server, rcv)] == ["delivered"], message="first one delivered")
    before = [f"{kill_point} before {i}" for i in range(4)]
    ids = [_post(server, rcv, text) for text in before]  # answered: each is committed as pending
    assert [m["status"] for m in _inbox(server, rcv)] == ["delivered"] + ["pending"] * len(before)

    server.kill9()
    if crafted is not None:
        window = window_of(server, rcv)
        wait_until(
            lambda: "MOCK: slept 1s" in server.tmux("capture-pane", "-p", "-t", window).stdout,
            message="the busy turn over while the server is down",
        )
        _claim_while_down(server, rcv, ids[0], before[0], record=record, **crafted)
    server.start()
    if crafted is None:
        assert server.status(rcv) == "processing"  # the kill point held: still busy after the restart
    after = [f"{kill_point} after {i}" for i in range(3)]  # the stream goes on
    for text in after:
        _post(server, rcv, text)
    if crafted is None:
        # Keys go through the receiver's input lock after the deliveries those POSTs started:
        # once this one is in, they have decided, and the busy receiver got nothing.
        assert server.client.post(f"/terminals/{rcv}/key", json={"key": "Left"}).status_code == 200
        assert [m["status"] for m in _inbox(server, rcv)] == ["delivered"] + ["pending"] * (len(before) + len(after))
        assert read_records(record) == [busy]
        # The turn ends (Esc interrupts the mock): that ready edge starts the deliveries.
        assert server.client.post(f"/terminals/{rcv}/key", json={"key": "Escape"}).status_code == 200

    expected = [busy, *before, *after]
    wait_until(
        lambda: (
            [m["status"] for m in _inbox(server, rcv)] == ["delivered"] * len(expected)
            and read_records(record) == expected
        ),
        timeout=WITHIN_S,
        message=f"every message delivered once, in order (got {read_records(record)})",
    )
    assert [m["message"] for m in _inbox(server, rcv)] == expected


# --- a crash between claiming a message and its paste ---------------------------------------
@pytest.mark.parametrize("earlier,again", [("done", "done"), ("please run the tests again", "run the tests")])
def test_a_message_claimed_but_never_pasted_is_delivered_after_the_crash(
    cao_factory, tmp_path: Path, earlier: str, again: str
):
    """The receiver's screen already shows the text (an earlier `done`, or a message that
    contains it): that must not pass for the paste that never happened."""
    record = tmp_path / "rec.jsonl"
    server = cao_factory(CAO_MOCK_RECORD=str(record)).start()
    rcv = server.create_session()["id"]
    server.send(rcv, earlier)
    server.wait_status(rcv, "completed")
    server.kill9()
    leave_in_flight(server, rcv, again, pasted=False)
    server.start()
    wait_until(
        lambda: read_records(record) == [earlier, again],
        timeout=20,
        message=f"delivered after restart: {read_records(record)} {server.client.get(f'/terminals/{rcv}/inbox/messages').json()} {(server.home / 'server.out').read_text()[-3000:]}",
    )
    msgs = server.client.get(f"/terminals/{rcv}/inbox/messages").json()
    assert [(m["message"], m["status"]) for m in msgs] == [(again, "delivered")]


@pytest.mark.parametrize("text", ["done", "a long one\n" + "x" * 1500])
def test_a_message_pasted_before_the_crash_is_submitted_not_pasted_again(cao_factory, tmp_path: Path, text: str):
    record = tmp_path / "rec.jsonl"
    server = cao_factory(CAO_MOCK_RECORD=str(record)).start()
    rcv = server.create_session()["id"]
    server.send(rcv, "done")
    server.wait_status(rcv, "completed")
    server.kill9()
    leave_in_flight(server, rcv, text, pasted=True)
    server.start()
    wait_until(lambda: len(read_records(record)) == 2, timeout=20, message="submitted after restart")
    server.wait_status(rcv, "completed")
    assert read_records(record) == ["done", text]  # Enter pressed once, nothing pasted twice
    msgs = server.client.get(f"/terminals/{rcv}/inbox/messages").json()
    assert [m["status"] for m in msgs] == ["delivered"]
