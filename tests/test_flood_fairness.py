"""One agent printing a flood must not hold up the others: each terminal's output is
handled by its own worker, and a terminal whose output arrives faster than it can be
emulated switches to reading its screen from tmux (flood mode) instead of feeding every
byte through the emulator. Latency figures are in bench/runtime_bench.py (--flood-lines);
this test checks the mechanism and that every status stays right."""

from __future__ import annotations

from cao_support import CaoServer, wait_until

FLOOD_LINES = 200_000


def test_a_flooding_agent_is_read_by_snapshots_and_others_keep_taking_turns(cao: CaoServer):
    flood = cao.create_session()
    other = cao.create_session()
    cao.send(flood["id"], f"__mock_long_{FLOOD_LINES}")
    turns = 0
    while cao.status(flood["id"]) != "completed" or turns == 0:
        cao.send(other["id"], f"turn {turns}")
        wait_until(
            lambda turns=turns: (
                cao.client.get(f"/terminals/{other['id']}/output", params={"mode": "last"}).json().get("output")
                == f"MOCK: turn {turns}"
            ),
            timeout=30,
            message=f"turn {turns} answered",
        )
        cao.wait_status(other["id"], "completed")
        turns += 1
    cao.wait_status(flood["id"], "completed", timeout=60)
    # (More lines than tmux keeps in history: the reply's start is gone, its end is on screen.)
    full = cao.client.get(f"/terminals/{flood['id']}/output", params={"mode": "full"}).json()["output"]
    assert f"line {FLOOD_LINES} of {FLOOD_LINES}" in full[-2000:]
    stats = cao.client.get("/diagnostics").json()["terminals"]
    assert stats[flood["id"]]["skipped_bytes"] > 1_000_000  # megabytes never went through the emulator
    assert stats[flood["id"]]["snapshots"] > 0 and not stats[flood["id"]]["flooding"]
    assert stats[other["id"]]["skipped_bytes"] == 0  # the quiet agent was emulated byte by byte
    assert cao.client.get("/diagnostics").json()["consumer_failures"] == []
    # Calm again: the flooded agent answers normally.
    cao.send(flood["id"], "after the flood")
    wait_until(
        lambda: (
            cao.client.get(f"/terminals/{flood['id']}/output", params={"mode": "last"}).json().get("output")
            == "MOCK: after the flood"
        ),
        message="answer after the flood",
    )
