"""Issue 24: faults told truthfully, against a real cao-server. A store that fails (disk full, a
read-only file system, PostgreSQL stopped and restarted) and a tmux server that stops answering
(SIGSTOP) are answered 503 with the reason on a kept-alive connection that stays open; /health
says `degraded` with the reason while it lasts and `ok` after; no accepted message is lost. An
exception nobody mapped is a JSON 500 that keeps the connection too.

Faults are made for real, as root: the db directory on a small tmpfs filled up; on an ext4
image whose file system the kernel turns read-only (`errors=remount-ro` plus ext4's own error
trigger — `mount -o remount,ro` is refused while cao-server holds the file open for writing);
the test's own PostgreSQL stopped and started; the test's own tmux server stopped and continued.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cao_support import CaoServer, free_port, read_records, wait_until
from pg_support import Postgres


class KeptAlive:
    """One HTTP client whose requests must all travel on one TCP connection: every answer
    records the local port it came on."""

    def __init__(self, url: str):
        self.client = httpx.Client(base_url=url, timeout=30)
        self.ports: list[int] = []

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        resp = self.client.request(method, path, **kwargs)
        self.ports.append(resp.extensions["network_stream"].get_extra_info("client_addr")[1])
        assert resp.headers.get("connection") != "close", (resp.status_code, resp.text)
        return resp

    def one_connection(self) -> bool:
        return len(set(self.ports)) == 1

    def close(self) -> None:
        self.client.close()


@contextlib.contextmanager
def kept_alive(cao: CaoServer) -> Iterator[KeptAlive]:
    client = KeptAlive(cao.url)
    try:
        yield client
    finally:
        client.close()


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def _unmount(where: Path) -> None:
    if _run("umount", str(where)).returncode != 0:
        _run("umount", "-l", str(where))  # still held (a server that did not stop): detach it


def _private_db_dir(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    db = home / "db"
    db.mkdir(mode=0o700)
    return db


def _inbox(cao: CaoServer, receiver: str) -> list[dict]:
    return cao.client.get(f"/terminals/{receiver}/inbox/messages").json()


def _delivered(cao: CaoServer, receiver: str, message_id: int) -> bool:
    return any(m["id"] == message_id and m["status"] == "delivered" for m in _inbox(cao, receiver))


def _message_waiting(cao: CaoServer, record: Path, text: str) -> tuple[str, int]:
    """A terminal busy with a turn, and a message accepted for it that waits in its inbox."""
    sender, receiver = cao.create_session(), cao.create_session()
    cao.send(receiver["id"], "__mock_sleep_4")
    cao.wait_status(receiver["id"], "processing")
    accepted = cao.client.post(
        f"/terminals/{receiver['id']}/inbox/messages", json={"sender_id": sender["id"], "message": text}
    )
    assert accepted.status_code == 200, accepted.text
    assert [m["status"] for m in _inbox(cao, receiver["id"])] == ["pending"]
    return receiver["id"], accepted.json()["message_id"]


def _refused_while_it_lasts(cao: CaoServer, receiver: str, reason: str) -> None:
    """On one kept-alive connection: writes answer 503 with `reason`, /health says degraded
    with it, and the connection stays open throughout."""
    with kept_alive(cao) as http:
        for _ in range(3):
            refused = http.request(
                "POST", f"/terminals/{receiver}/inbox/messages", json={"sender_id": "t", "message": "m" * 200_000}
            )
            assert refused.status_code == 503, refused.text
            assert refused.headers["content-type"] == "application/json"
            detail = refused.json()["detail"]
            assert isinstance(detail, str) and reason in detail and "\n" not in detail, detail
            health = http.request("GET", "/health").json()
            assert health["status"] == "degraded" and health["components"]["store"] == "down", health
            assert reason in health["reason"], health
        refused = http.request("POST", "/sessions", params={"agent_profile": "developer", "provider": "mock_cli"})
        assert refused.status_code == 503 and reason in refused.json()["detail"], refused.text
        assert http.one_connection(), http.ports


# --- an exception nobody mapped ---------------------------------------------------------------
BUGGY_APP = """
from fastapi import FastAPI
from cli_agent_orchestrator.api.errors import install_error_handlers

app = FastAPI()
install_error_handlers(app)


@app.get("/bug")
async def bug() -> dict:
    raise ZeroDivisionError("a secret the client must not see")


@app.get("/fine")
async def fine() -> dict:
    return {"fine": True}
"""


def test_an_unmapped_exception_is_a_json_500_and_the_connection_stays_open(tmp_path: Path):
    """cao's error handlers in a real uvicorn: the route raising a bug is the test's own."""
    (tmp_path / "buggy_app.py").write_text(BUGGY_APP)
    port = free_port()
    log = open(tmp_path / "uvicorn.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "buggy_app:app", "--host", "127.0.0.1", "--port", str(port)],
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    http = KeptAlive(f"http://127.0.0.1:{port}")
    try:
        wait_until(lambda: _answers(port), timeout=20, message="uvicorn up")
        for _ in range(3):
            assert http.request("GET", "/fine").json() == {"fine": True}
            bug = http.request("GET", "/bug")
            assert bug.status_code == 500
            assert bug.json() == {"detail": "internal error: ZeroDivisionError; see the server log"}
            assert "secret" not in bug.text
        assert http.one_connection(), http.ports
        logged = (tmp_path / "uvicorn.log").read_text()
        assert "Traceback" in logged and "a secret the client must not see" in logged
    finally:
        http.close()
        proc.terminate()
        proc.wait(10)


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/fine").status_code == 200
    except httpx.HTTPError:
        return False


# --- disk full ------------------------------------------------------------------------------------
@pytest.fixture
def small_db_disk(tmp_path: Path) -> Iterator[Path]:
    """The cao home's db directory on a 4 MiB tmpfs of its own (set up before the server,
    unmounted after it stopped)."""
    db = _private_db_dir(tmp_path)
    mounted = _run("mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(db))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the database (needs root): {mounted.stderr.strip()}")
    try:
        yield db
    finally:
        _unmount(db)


def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as exc:
        assert exc.errno == 28, exc  # ENOSPC: the disk is full
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_is_503_with_the_reason_degraded_health_and_loses_nothing(small_db_disk, cao_factory, tmp_path):
    record = tmp_path / "rec.jsonl"
    cao = cao_factory(CAO_MOCK_RECORD=str(record), CAO_INBOX_SWEEP_SECONDS="1").start()
    receiver, message_id = _message_waiting(cao, record, "accepted before the disk filled up")
    filler = _fill(small_db_disk)

    _refused_while_it_lasts(cao, receiver, "disk is full")
    assert "no space left" in cao.client.get("/health").json()["reason"]

    filler.unlink()
    with kept_alive(cao) as http:
        after = http.request("POST", f"/terminals/{receiver}/inbox/messages", json={"sender_id": "t", "message": "x"})
        assert after.status_code == 200, after.text
        health = http.request("GET", "/health").json()
        assert health["status"] == "ok" and health["components"]["store"] == "ok" and "reason" not in health
    wait_until(lambda: _delivered(cao, receiver, message_id), timeout=20, message="the waiting message delivered")
    assert "accepted before the disk filled up" in read_records(record)


# --- a read-only file system ---------------------------------------------------------------------
@pytest.fixture
def ext4_db(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """The cao home's db directory on an ext4 image mounted `errors=remount-ro`: (the
    directory, the image)."""
    db = _private_db_dir(tmp_path)
    image = tmp_path / "db.ext4"
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    made = _run("mkfs.ext4", "-q", "-F", "-O", "^has_journal", str(image))
    if made.returncode != 0:
        pytest.skip(f"cannot make an ext4 image: {made.stderr.strip()}")
    mounted = _run("mount", "-o", "loop,errors=remount-ro", str(image), str(db))
    if mounted.returncode != 0:
        pytest.skip(f"cannot loop-mount an ext4 image (needs root and loop devices): {mounted.stderr.strip()}")
    try:
        os.chmod(db, 0o700)
        yield db, image
    finally:
        _unmount(db)


def _turn_read_only(db: Path) -> None:
    """What the kernel does to an ext4 file system that found an error: read-only at once,
    under every file open for writing."""
    device = Path(_run("findmnt", "-n", "-o", "SOURCE", str(db)).stdout.strip()).name
    trigger = Path(f"/sys/fs/ext4/{device}/trigger_fs_error")
    if not trigger.exists():
        pytest.skip(f"this kernel has no {trigger}")
    os.sync()  # what was committed before the fault is on the image
    trigger.write_text("cao test: a read-only file system\n")
    with pytest.raises(OSError, match="Read-only file system"):
        os.utime(db)


def test_a_read_only_file_system_is_503_with_the_reason_and_loses_nothing(ext4_db, cao_factory, tmp_path):
    db, image = ext4_db
    record = tmp_path / "rec.jsonl"
    cao = cao_factory(CAO_MOCK_RECORD=str(record), CAO_INBOX_SWEEP_SECONDS="1").start()
    receiver, message_id = _message_waiting(cao, record, "accepted before the file system turned read-only")
    _turn_read_only(db)

    _refused_while_it_lasts(cao, receiver, "read-only")

    # The fault ends the only way a file system in this state comes back: unmounted, checked
    # and mounted again, which needs cao-server's files closed. The same home and tmux server.
    cao.stop()
    _unmount(db)
    checked = _run("e2fsck", "-f", "-y", str(image))
    assert checked.returncode in (0, 1), checked.stdout + checked.stderr  # 1: errors corrected
    assert _run("mount", "-o", "loop,errors=remount-ro", str(image), str(db)).returncode == 0
    cao.start()
    health = cao.client.get("/health").json()
    assert health["status"] == "ok" and health["components"]["store"] == "ok", health
    wait_until(lambda: _delivered(cao, receiver, message_id), timeout=20, message="the waiting message delivered")
    assert "accepted before the file system turned read-only" in read_records(record)


# --- PostgreSQL stopped and started again ----------------------------------------------------------
class RestartablePostgres(Postgres):
    """A PostgreSQL of this test's own (the session's shared one stays up for other tests),
    stopped and started again on the same data directory and port."""

    def _run(self, *argv: str) -> None:
        if argv[0].endswith("/initdb") and self.data.exists():
            return  # started again: the cluster is already there
        super()._run(*argv)

    def halt(self) -> None:
        """A fast shutdown, as for a restart: open sessions are ended at once."""
        self._run(str(self.bin / "pg_ctl"), "stop", "-D", str(self.data), "-m", "fast", "-w")
        assert self.proc is not None
        self.proc.wait(15)


@pytest.fixture
def own_postgres() -> Iterator[RestartablePostgres]:
    server = RestartablePostgres().start()
    try:
        yield server
    finally:
        server.stop()


def test_postgres_stopped_is_503_with_the_reason_and_ok_after_its_restart(own_postgres, cao_factory, tmp_path):
    record = tmp_path / "rec.jsonl"
    cao = cao_factory(
        CAO_DATABASE_URL=own_postgres.new_database(), CAO_MOCK_RECORD=str(record), CAO_INBOX_SWEEP_SECONDS="1"
    ).start()
    receiver, message_id = _message_waiting(cao, record, "accepted before PostgreSQL stopped")
    own_postgres.halt()

    with kept_alive(cao) as http:
        for _ in range(3):
            refused = http.request(
                "POST", f"/terminals/{receiver}/inbox/messages", json={"sender_id": "t", "message": "m"}
            )
            assert refused.status_code == 503, refused.text
            detail = refused.json()["detail"]
            assert "the database postgresql+psycopg://" in detail and "failed:" in detail and "\n" not in detail
            health = http.request("GET", "/health").json()
            assert health["status"] == "degraded" and health["components"]["store"] == "down", health
            assert "the database postgresql+psycopg://" in health["reason"]
        assert http.one_connection(), http.ports

    own_postgres.start()
    with kept_alive(cao) as http:
        after = http.request("POST", f"/terminals/{receiver}/inbox/messages", json={"sender_id": "t", "message": "x"})
        assert after.status_code == 200, after.text
        health = http.request("GET", "/health").json()
        assert health["status"] == "ok" and health["components"]["store"] == "ok", health
    wait_until(lambda: _delivered(cao, receiver, message_id), timeout=20, message="the waiting message delivered")
    assert "accepted before PostgreSQL stopped" in read_records(record)


# --- tmux stopped (SIGSTOP) ------------------------------------------------------------------------
@contextlib.contextmanager
def tmux_stopped(cao: CaoServer) -> Iterator[None]:
    """The tmux server on this test's own socket, stopped; always continued after."""
    pid = int(cao.tmux("display-message", "-p", "#{pid}").stdout.strip())
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _tmux_component(http: KeptAlive) -> str:
    return http.request("GET", "/health").json()["components"]["tmux"]


def test_a_stopped_tmux_is_degraded_health_and_loses_no_message(cao_factory, tmp_path):
    record = tmp_path / "rec.jsonl"
    cao = cao_factory(CAO_MOCK_RECORD=str(record), CAO_INBOX_SWEEP_SECONDS="1").start()
    receiver, message_id = _message_waiting(cao, record, "accepted before tmux stopped")
    with kept_alive(cao) as http, tmux_stopped(cao):
        wait_until(lambda: _tmux_component(http) == "not answering", timeout=2, message="health says so")
        health = http.request("GET", "/health").json()
        assert health["status"] == "degraded" and "tmux does not answer" in health["reason"], health
        assert health["components"]["store"] == "ok"
        # Accepting a message needs only the store: it is taken, and waits for tmux.
        late = http.request("POST", f"/terminals/{receiver}/inbox/messages", json={"sender_id": "t", "message": "x"})
        assert late.status_code == 200, late.text
        assert http.one_connection(), http.ports
    with kept_alive(cao) as http:
        wait_until(lambda: _tmux_component(http) == "ok", timeout=5, message="health ok again")
    wait_until(lambda: _delivered(cao, receiver, message_id), timeout=30, message="the waiting message delivered")
    assert "accepted before tmux stopped" in read_records(record)
    assert not cao.client.get(f"/terminals/{receiver}").json()["gone"]


def test_input_to_a_stopped_tmux_is_503_with_the_reason_and_works_after_sigcont(cao_factory, tmp_path):
    record = tmp_path / "rec.jsonl"
    cao = cao_factory(CAO_MOCK_RECORD=str(record)).start()
    term = cao.create_session()
    with kept_alive(cao) as http, tmux_stopped(cao):
        wait_until(lambda: _tmux_component(http) == "not answering", timeout=2, message="health says so")
        refused = http.request("POST", f"/terminals/{term['id']}/input", json={"message": "typed while stopped"})
        assert refused.status_code == 503, refused.text
        detail = refused.json()["detail"]
        assert "tmux did not answer" in detail and "may still take effect" in detail, detail
        assert _tmux_component(http) == "not answering"
        assert http.one_connection(), http.ports
    with kept_alive(cao) as http:
        wait_until(lambda: _tmux_component(http) == "ok", timeout=5, message="health ok again")
    # As the answer said: the paste sent before the 503 lands once tmux runs again (no Enter).
    wait_until(
        lambda: "typed while stopped" in cao.client.get(f"/terminals/{term['id']}/output").json()["output"],
        timeout=10,
        message="the late paste on the screen",
    )
    assert cao.client.post(f"/terminals/{term['id']}/key", json={"key": "Enter"}).status_code == 200
    cao.wait_status(term["id"], "completed")
    cao.send(term["id"], "after SIGCONT")
    wait_until(lambda: "after SIGCONT" in read_records(record), message="the agent got the input")
    assert read_records(record).count("typed while stopped") == 1


def test_tmux_stopped_past_the_stall_limit_keeps_its_agents_and_reconnects(cao_factory, tmp_path):
    """Stopped longer than a reply may take (STALL_S, 15 s), the control channel is given up;
    a server that lives but does not answer is waited for, never reported lost."""
    record = tmp_path / "rec.jsonl"
    cao = cao_factory(CAO_MOCK_RECORD=str(record)).start()
    term = cao.create_session()
    with kept_alive(cao) as http, tmux_stopped(cao):
        wait_until(
            lambda: "cao reconnects when it does" in http.request("GET", "/health").json().get("reason", ""),
            timeout=40,
            interval=1,
            message="the channel given up, the server waited for",
        )
        health = http.request("GET", "/health").json()
        assert health["status"] == "degraded" and health["components"]["tmux"] == "not answering", health
        refused = http.request("POST", "/sessions", params={"agent_profile": "developer", "provider": "mock_cli"})
        assert refused.status_code == 503, refused.text
        assert any(said in refused.json()["detail"] for said in ("tmux did not answer", "tmux does not answer"))
        assert http.one_connection(), http.ports
    with kept_alive(cao) as http:
        wait_until(lambda: _tmux_component(http) == "ok", timeout=20, message="reconnected")
    assert not cao.client.get(f"/terminals/{term['id']}").json()["gone"]
    cao.send(term["id"], "after a long stop")
    wait_until(lambda: "after a long stop" in read_records(record), message="the agent got the input")
    assert cao.create_session()["status"] == "idle"
