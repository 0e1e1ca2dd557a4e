"""`GET /events?pattern=…`: the event bus as Server-Sent Events. Status changes arrive as they
happen, one frame per bus event; the pattern (`*` one segment, `#` the rest) decides which
topics a client gets; a malformed pattern is refused with a reason."""

from __future__ import annotations

from cao_support import CaoServer
from sse_support import EventStream


def test_status_changes_stream_as_frames_in_order(cao: CaoServer):
    tid = cao.create_session()["id"]
    with EventStream(cao, f"terminal.{tid}.status") as events:
        assert events.response.headers["cache-control"] == "no-cache"
        turn = cao.send(tid, "streamed turn")["turn"]
        done = events.until(lambda f: f.data["status"] == "completed", message="the turn completed")
    assert done.event == "StatusChanged"
    assert done.data["type"] == "StatusChanged" and done.data["topic"] == f"terminal.{tid}.status"
    assert done.data["terminal_id"] == tid and done.data["turn"] == turn and done.data["source"] == "screen"
    statuses = [(f.data["previous"], f.data["status"]) for f in events.frames]
    assert statuses[-1] == ("processing", "completed") and ("idle", "processing") in statuses, statuses
    # Each frame's `previous` is the status the frame before it reported: no edge is left out.
    assert all(a[1] == b[0] for a, b in zip(statuses, statuses[1:])), statuses


def test_the_pattern_decides_which_topics_a_client_gets(cao: CaoServer):
    mine, other = cao.create_session()["id"], cao.create_session()["id"]
    with (
        EventStream(cao, f"terminal.{mine}.status") as just_mine,
        EventStream(cao, "terminal.*.status") as every_status,
        EventStream(cao, f"terminal.{mine}.#") as all_of_mine,
    ):
        # The other terminal's turn is over (its events queued) before mine starts, so by the
        # time mine completes, each stream has read everything of the other that it was sent.
        cao.send(other, "not for you")
        every_status.until(
            lambda f: f.data["terminal_id"] == other and f.data["status"] == "completed",
            message="the other terminal's turn in the wildcard stream",
        )
        cao.send(mine, "for you")
        for stream in (just_mine, every_status, all_of_mine):
            stream.until(
                lambda f: f.data["terminal_id"] == mine and f.data.get("status") == "completed",
                message="my turn completed",
            )
    assert {f.data["terminal_id"] for f in just_mine.frames} == {mine}
    assert {f.event for f in just_mine.frames} == {"StatusChanged"}
    assert {f.data["terminal_id"] for f in every_status.frames} == {mine, other}
    assert {f.event for f in every_status.frames} == {"StatusChanged"}
    # `#` takes every topic under the terminal: the input submitted and the output, too.
    assert {f.data["terminal_id"] for f in all_of_mine.frames} == {mine}
    kinds = {f.event for f in all_of_mine.frames}
    assert {"StatusChanged", "InputSubmitted", "TerminalOutput"} <= kinds, kinds
    printed = "".join(f.data["data"] for f in all_of_mine.frames if f.event == "TerminalOutput")
    assert "MOCK: for you" in printed


def test_inbox_events_have_their_own_topics(cao: CaoServer):
    receiver = cao.create_session()["id"]
    with EventStream(cao, f"inbox.{receiver}.*") as events:
        message_id = cao.client.post(
            f"/terminals/{receiver}/inbox/messages", json={"sender_id": "tester", "message": "hello inbox"}
        ).json()["message_id"]
        events.until(lambda f: f.event == "InboxDelivered", message="the delivery")
    assert [(f.event, f.data["message_id"]) for f in events.frames] == [
        ("InboxQueued", message_id),
        ("InboxDelivered", message_id),
    ]


def test_a_malformed_pattern_is_refused_with_a_reason(cao: CaoServer):
    for pattern in ("terminal..status", "terminal.*.status;rm", ".", "terminal/x"):
        resp = cao.client.get("/events", params={"pattern": pattern})
        assert resp.status_code == 400, (pattern, resp.status_code, resp.text)
        assert resp.json() == {"detail": f"invalid topic pattern {pattern!r}"}
    resp = cao.client.get("/events", params={"pattern": "a" * 201})  # longer than any topic may be
    assert resp.status_code == 422 and resp.json()["detail"][0]["loc"] == ["query", "pattern"]
