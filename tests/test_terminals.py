"""The runtime core end to end: a real cao-server, real tmux, the mock agent."""

from __future__ import annotations

import json
from pathlib import Path

from cao_support import CaoServer, read_records, wait_until


def test_spawn_reaches_idle_in_a_cao_tmux_window_with_terminal_id(cao: CaoServer):
    term = cao.create_session()
    assert term["status"] == "idle"
    assert len(term["id"]) == 8 and int(term["id"], 16) >= 0
    assert term["session_name"].startswith("cao-")
    assert term["name"].startswith("developer-")
    windows = cao.tmux("list-windows", "-t", term["session_name"], "-F", "#{window_name}").stdout.split()
    assert term["name"] in windows
    pid = cao.tmux(
        "display-message", "-p", "-t", f"{term['session_name']}:{term['name']}", "#{pane_pid}"
    ).stdout.strip()
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert f"CAO_TERMINAL_ID={term['id']}".encode() in environ


def test_server_environment_reaches_the_agent(cao_factory):
    server = cao_factory(ANTHROPIC_BASE_URL="http://127.0.0.1:1/fake", HTTPS_PROXY="http://proxy:3128").start()
    term = server.create_session()
    pid = server.tmux(
        "display-message", "-p", "-t", f"{term['session_name']}:{term['name']}", "#{pane_pid}"
    ).stdout.strip()
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert b"ANTHROPIC_BASE_URL=http://127.0.0.1:1/fake" in environ
    assert b"HTTPS_PROXY=http://proxy:3128" in environ


def test_turn_reaches_completed_with_exact_last_answer(cao: CaoServer):
    term = cao.create_session()
    cao.send(term["id"], "hello world")
    cao.wait_status(term["id"], "completed")
    out = cao.client.get(f"/terminals/{term['id']}/output", params={"mode": "last"}).json()
    assert out == {"output": "MOCK: hello world", "mode": "last"}
    full = cao.client.get(f"/terminals/{term['id']}/output", params={"mode": "full"}).json()["output"]
    assert "hello world" in full and "MockCli ready" in full
    # A second turn is a new edge even though the status value stays "completed".
    cao.send(term["id"], "second turn")
    wait_until(
        lambda: (
            cao.client.get(f"/terminals/{term['id']}/output", params={"mode": "last"}).json().get("output")
            == "MOCK: second turn"
        )
    )
    assert cao.status(term["id"]) == "completed"


def test_multiline_answer_is_extracted_exactly(cao: CaoServer):
    term = cao.create_session()
    cao.send(term["id"], "line one\nline two\n  indented three")
    cao.wait_status(term["id"], "completed")
    out = cao.client.get(f"/terminals/{term['id']}/output", params={"mode": "last"}).json()["output"]
    assert out == "MOCK: line one\nline two\n  indented three"


def test_hostile_100kb_message_arrives_byte_exact_and_controls_stay_inert(cao_factory, tmp_path: Path):
    record = tmp_path / "record.jsonl"
    server = cao_factory(CAO_MOCK_RECORD=str(record)).start()
    term = server.create_session()
    chunk = "quotes \"double\" 'single' $(rm -rf ~) `id` ${HOME} \t tab ünïcødé 🎉 ; | & > < \\ * ?\n"
    body = (chunk * (100_000 // len(chunk) + 1))[:100_000]
    server.send(term["id"], body)
    wait_until(lambda: read_records(record), message="record written")
    # One submitted message, byte-exact: typed key by key, its first LF would have been an Enter
    # (the mock would record the first line alone). How long the paste takes is measured by
    # bench/runtime_bench.py ("100 KB input → /input answered").
    assert read_records(record) == [body]

    # A fake end-of-paste marker and keystroke controls arrive as inert text in ONE message.
    server.wait_status(term["id"], "completed")
    hostile = "before\x1b[201~\rafter\x03\x1b[A\x04 end"
    server.send(term["id"], hostile)
    wait_until(lambda: len(read_records(record)) == 2, message="second record")
    assert read_records(record)[1] == "before\u241b[201~\nafter\u2403\u241b[A\u2404 end"


def test_waiting_user_answer_and_error_are_detected(cao: CaoServer):
    term = cao.create_session()
    tid = term["id"]
    cao.send(tid, "__mock_ask__")
    cao.wait_status(tid, "waiting_user_answer")
    cao.send(tid, "yes")
    cao.wait_status(tid, "completed")
    assert (
        cao.client.get(f"/terminals/{tid}/output", params={"mode": "last"}).json()["output"] == "MOCK: you answered yes"
    )
    cao.send(tid, "__mock_error__")
    cao.wait_status(tid, "error")
    detail = cao.client.get(f"/terminals/{tid}").json()
    assert detail["status_source"] == "screen" and "mock failure" in detail["status_reason"]
    # The CLI is still alive: a new turn recovers.
    cao.send(tid, "again")
    cao.wait_status(tid, "completed")


def test_processing_while_busy_then_completed(cao: CaoServer):
    term = cao.create_session()
    cao.send(term["id"], "__mock_sleep_1")
    assert cao.wait_status(term["id"], {"processing", "completed"}) == "processing"
    cao.wait_status(term["id"], "completed", timeout=5)


def test_named_keys_reach_the_agent(cao: CaoServer):
    term = cao.create_session()
    tid = term["id"]
    for key in ["h", "i"]:
        assert cao.client.post(f"/terminals/{tid}/key", params={"key": key}).status_code == 200
    assert cao.client.post(f"/terminals/{tid}/key", json={"key": "Enter"}).status_code == 200
    cao.wait_status(tid, "completed")
    assert cao.client.get(f"/terminals/{tid}/output", params={"mode": "last"}).json()["output"] == "MOCK: hi"


def test_exit_ends_the_agent_and_status_says_so(cao: CaoServer):
    term = cao.create_session()
    assert cao.client.post(f"/terminals/{term['id']}/exit").status_code == 200
    cao.wait_status(term["id"], "error", timeout=10)
    detail = cao.client.get(f"/terminals/{term['id']}").json()
    assert detail["status_source"] == "pane" and "exited" in detail["status_reason"]
    resp = cao.client.post(f"/terminals/{term['id']}/input", json={"message": "anyone?"})
    assert resp.status_code == 409


def test_delete_saves_scrollback_and_restore_shows_it(cao: CaoServer):
    term = cao.create_session()
    cao.send(term["id"], "remember this line")
    cao.wait_status(term["id"], "completed")
    assert cao.client.delete(f"/terminals/{term['id']}").json() == {"success": True}
    assert cao.client.get(f"/terminals/{term['id']}").status_code == 404
    logs = cao.home / "logs" / "terminal"
    assert "remember this line" in (logs / f"{term['id']}.scrollback").read_text()
    snapshot = json.loads((logs / f"{term['id']}.snapshot.json").read_text())
    assert snapshot["agent_profile"] == "developer" and snapshot["provider"] == "mock_cli"
    restored = cao.client.post(f"/terminals/{term['id']}/restore").json()
    assert restored["window_name"].startswith("restored-")
    target = f"{restored['session_name']}:{restored['window_name']}"
    wait_until(
        lambda: "remember this line" in cao.tmux("capture-pane", "-p", "-S", "-", "-t", target).stdout,
        message="restored scrollback on screen",
    )
    # Asked again, restore shows the same window: repeated calls never pile up shell windows.
    windows = cao.tmux("list-windows", "-a", "-F", "#{window_id}").stdout.split()
    for _ in range(3):
        again = cao.client.post(f"/terminals/{term['id']}/restore")
        assert again.status_code == 200 and again.json()["window_id"] == restored["window_id"]
    assert cao.tmux("list-windows", "-a", "-F", "#{window_id}").stdout.split() == windows


def test_session_create_list_get_delete(cao: CaoServer):
    term = cao.create_session(session_name="work")
    assert term["session_name"] == "cao-work"
    second = cao.client.post(
        "/sessions/cao-work/terminals", params={"agent_profile": "reviewer", "provider": "mock_cli"}
    )
    assert second.status_code == 201 and second.json()["status"] == "idle"
    names = [s["name"] for s in cao.client.get("/sessions").json()]
    assert names == ["cao-work"]
    detail = cao.client.get("/sessions/cao-work").json()
    assert {t["id"] for t in detail["terminals"]} == {term["id"], second.json()["id"]}
    assert cao.client.delete("/sessions/cao-work").json()["success"] is True
    assert cao.client.get("/sessions").json() == []
    assert cao.client.get(f"/terminals/{term['id']}").status_code == 404
    assert cao.tmux("has-session", "-t", "=cao-work").returncode != 0


def test_log_writer_keeps_per_terminal_logs(cao: CaoServer):
    term = cao.create_session()
    cao.send(term["id"], "logged words")
    cao.wait_status(term["id"], "completed")
    log = cao.home / "logs" / "terminal" / f"{term['id']}.log"
    wait_until(lambda: log.exists() and b"MOCK: logged words" in log.read_bytes(), message="log flushed")


def test_status_still_read_after_the_pane_is_resized(cao: CaoServer):
    term = cao.create_session()
    target = f"{term['session_name']}:{term['name']}"
    assert cao.tmux("resize-window", "-t", target, "-x", "90", "-y", "20").returncode == 0
    cao.send(term["id"], "after resize " + "w" * 150)  # wraps at 90 columns
    cao.wait_status(term["id"], "completed")
    out = cao.client.get(f"/terminals/{term['id']}/output", params={"mode": "last"}).json()["output"]
    assert out == "MOCK: after resize " + "w" * 150


def test_status_survives_output_floods_with_a_tiny_event_queue(cao_factory):
    server = cao_factory(CAO_EVENT_BUS_MAX_QUEUE_SIZE="2").start()
    term = server.create_session()
    for _ in range(3):
        server.send(term["id"], "__mock_long_400")
        wait_until(
            lambda: (
                server.client.get(f"/terminals/{term['id']}/output", params={"mode": "last"})
                .json()
                .get("output", "")
                .endswith("MOCK: line 400 of 400")
            ),
            timeout=20,
        )
        server.wait_status(term["id"], "completed", timeout=20)
    # Output is coalesced per read and routed per terminal, so even a queue of 2 keeps up;
    # whatever was dropped, no status edge was lost and no consumer failed.
    assert server.client.get("/diagnostics").json()["consumer_failures"] == []
    server.send(term["id"], "calm again")
    wait_until(
        lambda: (
            server.client.get(f"/terminals/{term['id']}/output", params={"mode": "last"}).json().get("output")
            == "MOCK: calm again"
        )
    )


def test_lost_enter_is_pressed_again_and_the_message_goes_in_once(cao_factory, tmp_path: Path):
    record = tmp_path / "rec.jsonl"
    # The mock drops the first two Enters, like a CLI whose prompt is not ready yet.
    server = cao_factory(CAO_MOCK_RECORD=str(record), CAO_MOCK_DROP_ENTERS="2").start()
    term = server.create_session()
    server.send(term["id"], "needs three enters")
    server.wait_status(term["id"], "completed", timeout=15)
    assert read_records(record) == ["needs three enters"]
    assert (
        server.client.get(f"/terminals/{term['id']}/output", params={"mode": "last"}).json()["output"]
        == "MOCK: needs three enters"
    )


def test_instant_turns_are_told_apart_even_when_echo_and_answer_arrive_together(cao_factory):
    # Think time 0: the echo of the task and the answer reach cao in one burst. A
    # run-step only returns once the status monitor has attributed the answer to the
    # new turn; a stale "completed" would make it return the previous reply.
    server = cao_factory(CAO_MOCK_DELAY_MS="0").start()
    for i in range(6):
        resp = server.client.post(
            "/terminals/run-step",
            json={"agent": "developer", "provider": "mock_cli", "prompt": f"instant {i}", "timeout": 30},
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["last_message"] == f"MOCK: instant {i}"
