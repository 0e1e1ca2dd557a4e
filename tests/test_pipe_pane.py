"""The pipe-pane output source (CAO_OUTPUT_SOURCE=pipe-pane) end to end: a real
cao-server, real tmux, the mock agent; output read from one FIFO per terminal."""

from __future__ import annotations

import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cao_support import CaoServer, read_records, wait_until

from cli_agent_orchestrator.backends.tmux import TmuxBackend
from cli_agent_orchestrator.bus import EventBus
from cli_agent_orchestrator.errors import BackendError

PIPE = {"CAO_OUTPUT_SOURCE": "pipe-pane"}


def _last(server: CaoServer, tid: str) -> str | None:
    return server.client.get(f"/terminals/{tid}/output", params={"mode": "last"}).json().get("output")


def _fifos(server: CaoServer) -> set[str]:
    fifo_dir = server.home / "fifos"
    return {p.name for p in fifo_dir.iterdir()} if fifo_dir.is_dir() else set()


def _reader_threads(server: CaoServer) -> int:
    """Threads of the server named by the FIFO readers (Linux names OS threads)."""
    assert server.proc is not None
    tasks = Path(f"/proc/{server.proc.pid}/task")
    count = 0
    for task in tasks.iterdir():
        try:
            count += (task / "comm").read_text().strip() == "cao-fifo"
        except OSError:
            continue  # the thread ended while we looked
    return count


def test_unknown_output_source_is_refused_clearly():
    with pytest.raises(BackendError, match="unknown output source 'tmux-magic'.*pipe-pane"):
        TmuxBackend("cao-test-unused", EventBus(), output_source="tmux-magic", fifo_dir=Path("/nonexistent"))


def test_turns_big_input_errors_inbox_and_cleanup(cao_factory, tmp_path: Path):
    record = tmp_path / "record.jsonl"
    server = cao_factory(CAO_MOCK_RECORD=str(record), **PIPE).start()
    term = server.create_session()
    tid = term["id"]
    assert term["status"] == "idle"
    fifo = server.home / "fifos" / f"{tid}.fifo"
    mode = fifo.stat().st_mode
    assert stat.S_ISFIFO(mode) and stat.S_IMODE(mode) == 0o600
    assert _reader_threads(server) == 1

    server.send(tid, "hello pipe")
    server.wait_status(tid, "completed")
    assert _last(server, tid) == "MOCK: hello pipe"

    chunk = "quotes \"double\" 'single' $(rm -rf ~) `id` ${HOME} \t tab ünïcødé 🎉 ; | & > < \\ * ?\n"
    body = (chunk * (100_000 // len(chunk) + 1))[:100_000]
    server.send(tid, body)
    wait_until(lambda: len(read_records(record)) == 2, message="100 KB message recorded")
    assert read_records(record)[1] == body
    server.wait_status(tid, "completed", timeout=15)

    server.send(tid, "__mock_error__")
    server.wait_status(tid, "error")
    assert server.client.get(f"/terminals/{tid}").json()["status_source"] == "screen"

    # Inbox delivery to a second terminal, driven by its status events.
    rcv = server.create_session()["id"]
    assert _reader_threads(server) == 2
    resp = server.client.post(f"/terminals/{rcv}/inbox/messages", json={"sender_id": tid, "message": "via inbox"})
    assert resp.status_code == 200, resp.text
    wait_until(
        lambda: [m["status"] for m in server.client.get(f"/terminals/{rcv}/inbox/messages").json()] == ["delivered"],
        message="inbox message delivered",
    )
    server.wait_status(rcv, "completed")
    assert _last(server, rcv) == "MOCK: via inbox"

    # Deleting the terminals ends their readers and removes their FIFOs.
    assert _fifos(server) == {f"{tid}.fifo", f"{rcv}.fifo"}
    for term_id in (tid, rcv):
        assert server.client.delete(f"/terminals/{term_id}").json() == {"success": True}
    wait_until(lambda: not _fifos(server), message="FIFOs removed")
    wait_until(lambda: _reader_threads(server) == 0, message="reader threads ended")


def test_exit_is_reported_from_the_pane_with_its_code(cao_factory):
    server = cao_factory(**PIPE).start()
    tid = server.create_session()["id"]
    assert server.client.post(f"/terminals/{tid}/exit").status_code == 200
    server.wait_status(tid, "error", timeout=10)
    detail = server.client.get(f"/terminals/{tid}").json()
    assert detail["status_source"] == "pane"
    # tmux 3.3a now and then never reaps a dead pane's process: the kernel still holds its code.
    assert re.search(r"exited \(code 0\)", detail["status_reason"]), detail["status_reason"]
    assert server.client.post(f"/terminals/{tid}/input", json={"message": "anyone?"}).status_code == 409


def test_closed_window_is_reported_gone(cao_factory):
    server = cao_factory(**PIPE).start()
    term = server.create_session()
    assert server.tmux("kill-window", "-t", f"{term['session_name']}:{term['name']}").returncode == 0
    server.wait_status(term["id"], "error", timeout=10)
    assert "window was closed" in server.client.get(f"/terminals/{term['id']}").json()["status_reason"]


def test_kill9_restart_readopts_and_a_new_turn_completes(cao_factory, tmp_path: Path):
    record = tmp_path / "rec.jsonl"
    server = cao_factory(CAO_MOCK_RECORD=str(record), **PIPE).start()
    term = server.create_session()
    tid, target = term["id"], f"{term['session_name']}:{term['name']}"
    server.send(tid, "before crash")
    server.wait_status(tid, "completed")
    server.kill9()
    server.start()
    server.wait_status(tid, "completed")  # read afresh from the screen by the new pipe's snapshot
    assert _reader_threads(server) == 1
    server.send(tid, "after crash")
    wait_until(lambda: _last(server, tid) == "MOCK: after crash", message="turn after restart")
    server.wait_status(tid, "completed")
    assert read_records(record) == ["before crash", "after crash"]

    # Someone closes the pipe behind cao's back: the reader sees the FIFO end while
    # the pane lives, pipes it again, and the next turn is seen as usual.
    def piped() -> bool:
        return server.tmux("display-message", "-p", "-t", target, "#{pane_pipe}").stdout.strip() == "1"

    assert piped() and server.tmux("pipe-pane", "-t", target).returncode == 0
    wait_until(piped, message="pipe restarted")
    server.send(tid, "after repipe")
    log = server.home / "logs" / "terminal" / f"{tid}.log"  # written from the output stream
    wait_until(
        lambda: log.exists() and b"MOCK: after repipe" in log.read_bytes(), message="reply read from the new pipe"
    )
    server.wait_status(tid, "completed")


def test_an_unreaped_process_s_exit_code_is_read_from_the_kernel():
    """What a dead pane's code is read from when tmux never reaped its process (tmux 3.3a does
    that now and then): the zombie's status, an exit code or a signal."""
    import os
    import signal as signals

    from cli_agent_orchestrator.backends.tmux_pane_watch import zombie_exit_code

    exits = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(7)"])
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        killed.send_signal(signals.SIGTERM)
        for proc, expected in ((exits, 7), (killed, -signals.SIGTERM)):
            wait_until(lambda p=proc: zombie_exit_code(p.pid) is not None, 10, message="a zombie")  # not reaped yet
            assert zombie_exit_code(proc.pid) == expected
        assert zombie_exit_code(os.getpid()) is None  # alive
    finally:
        for proc in (exits, killed):
            proc.kill()
            proc.wait(10)  # reaped now
    assert zombie_exit_code(exits.pid) is None
