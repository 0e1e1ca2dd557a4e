"""The test harness: a real cao-server process in its own home, and the helpers every test
module uses with it (`cli`, `wait_until`, `free_port`, `read_records`).

Invariant: everything here is safe side by side — several pytest-xdist workers, or several
pytest runs on one machine. Each server has its own port (`free_port` hands a port to one
process only), its own home (CAO_HOME_DIR) and its own tmux socket directory (TMUX_TMPDIR);
a server ends only the processes it started (by pid) and the tmux server on its own socket.
The fixtures built on this live in conftest.py.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import httpx

REPO = Path(__file__).resolve().parent.parent
# The installed `cao` entry point (.venv/bin/cao), as a user runs it.
CAO = str(Path(sys.executable).parent / "cao")


# --- ports ---------------------------------------------------------------------------------
# Ports are taken from below Linux's ephemeral range (32768+), where the kernel never puts
# an outgoing connection or a `bind(0)`, and each one is claimed with a lock file held until
# this process exits: two xdist workers (or two pytest runs) can never be handed the same port
# between "it was free" and "a server listens on it", which bind-and-close alone allows.
_PORTS = range(20000, 32000)
_LOCK_DIR = Path(tempfile.gettempdir()) / "cao-test-ports"
_held: list[IO[bytes]] = []  # open lock files: the claims last as long as this process


def free_port() -> int:
    """A loopback TCP port nobody listens on, claimed for this process alone."""
    _LOCK_DIR.mkdir(mode=0o777, exist_ok=True)
    for _ in range(200):
        port = random.choice(_PORTS)
        lock = open(_LOCK_DIR / str(port), "ab")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()  # another process holds it
            continue
        if _bindable(port):
            _held.append(lock)
            return port
        lock.close()  # in use by something that takes no lock (not a test)
    raise AssertionError(f"no free port in {_PORTS} after 200 tries")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# --- waiting and reading ---------------------------------------------------------------------
def wait_until(
    predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.02, message: str = "condition"
) -> Any:
    """Poll a condition with a deadline (test side only; product code waits on events)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message} (last: {last!r})")


def read_records(path: Path) -> list[Any]:
    """The JSON lines the mock agent recorded (CAO_MOCK_RECORD); [] before the first."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --- the server ------------------------------------------------------------------------------
START_TIMEOUT = 60  # seconds for a cao-server to answer /health
# tmux's socket is TMUX_TMPDIR/tmux-<uid>/cao-<8 hex>, and a Unix socket path holds at most
# 107 bytes: xdist's worker directories (popen-gwN/) push long test names past it.
_MAX_TMUX_TMPDIR = 107 - len(f"/tmux-{os.getuid()}/cao-12345678")


def _tmux_dir(home: Path) -> Path:
    """The server's TMUX_TMPDIR: <home>/tmux, or a short private directory in /tmp when the
    socket path under the home would be too long (CaoServer.cleanup removes it)."""
    wanted = home / "tmux"
    if len(str(wanted)) <= _MAX_TMUX_TMPDIR:
        wanted.mkdir(mode=0o700, exist_ok=True)
        return wanted
    return Path(tempfile.mkdtemp(prefix="cao-tmux-", dir="/tmp"))


class CaoServer:
    """A cao-server subprocess in an isolated home; restartable (kill -9 included)."""

    def __init__(self, home: Path, extra_env: dict[str, str] | None = None):
        self.home = home
        self.port = free_port()
        # cao refuses a home others can open (private_files.private_home), so the harness
        # makes it 0700 as cao would, before the tmux directory inside it.
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.tmux_tmpdir = _tmux_dir(home)
        self.env = {
            **os.environ,
            "CAO_HOME_DIR": str(home),
            "CAO_API_PORT": str(self.port),
            "CAO_API_HOST": "127.0.0.1",
            "TMUX_TMPDIR": str(self.tmux_tmpdir),
            "CAO_MOCK_DELAY_MS": "20",
            "CAO_LOG_LEVEL": os.environ.get("CAO_LOG_LEVEL", "info"),
            # `cao install` (CLI or route) for kiro_cli writes here, never into the real ~/.kiro.
            "CAO_AGENTS_DIR": str(home / "kiro-agents"),
            **(extra_env or {}),
        }
        self.env.pop("TMUX", None)
        self.proc: subprocess.Popen | None = None
        # How the server is started (a test may wrap it: prlimit, or `--supervise`).
        self.start_argv = [sys.executable, "-m", "cli_agent_orchestrator.cli.server"]
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = httpx.Client(base_url=self.url, timeout=60)

    def start(self) -> CaoServer:
        log = open(self.home / "server.out", "ab")
        self.proc = subprocess.Popen(
            self.start_argv,
            # The server's directory is where agents work by default; never this repository
            # (a generated `use_worktree=true` would branch it).
            cwd=self.home,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        # Generous: on a loaded 2-core machine with several workers a start takes seconds.
        wait_until(self._healthy, timeout=START_TIMEOUT, message="cao-server health")
        return self

    def _healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"cao-server exited: {(self.home / 'server.out').read_text()[-2000:]}")
        try:
            return self.client.get("/health").status_code == 200
        except httpx.HTTPError:
            return False

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def hook_secret(self, terminal_id: str) -> str:
        """The secret a terminal's hooks carry (what CAO_HOOK_SECRET holds in its pane)."""
        rows = self.sql("SELECT hook_secret FROM terminals WHERE id = :id", id=terminal_id)
        assert rows and rows[0][0], f"no hook secret for {terminal_id}"
        return rows[0][0]

    def sql(self, statement: str, **params) -> list:
        """Run one statement on this server's database (its SQLite file, or CAO_DATABASE_URL),
        committed; the rows it returns, or [rowcount] for a statement that returns none."""
        import sqlalchemy as sa

        from cli_agent_orchestrator.store.db import engine_url

        engine = sa.create_engine(
            engine_url(self.env.get("CAO_DATABASE_URL") or self.home / "db" / "cli-agent-orchestrator.db"),
            poolclass=sa.pool.NullPool,
        )
        try:
            with engine.begin() as conn:
                result = conn.execute(sa.text(statement), params)
                return [tuple(r) for r in result] if result.returns_rows else [result.rowcount]
        finally:
            engine.dispose()

    def post_hook(
        self, terminal_id: str, event: str, payload: dict | None = None, secret: str | None = None
    ) -> httpx.Response:
        secret = self.hook_secret(terminal_id) if secret is None else secret
        return self.client.post(
            f"/terminals/{terminal_id}/hooks",
            json={"event": event, "payload": payload or {}},
            headers={"X-CAO-Hook-Secret": secret},
        )

    def tmux(self, *args: str) -> subprocess.CompletedProcess:
        socket_name = self.client.get("/health").json()["tmux_socket"] if self.proc else self._socket_name()
        env = {k: v for k, v in self.env.items() if k != "TMUX"}
        return subprocess.run(["tmux", "-L", socket_name, *args], env=env, capture_output=True, text=True)

    def _socket_name(self) -> str:
        return "cao-" + hashlib.sha1(str(self.home.resolve()).encode()).hexdigest()[:8]

    def cleanup(self) -> None:
        self.stop()
        env = {k: v for k, v in self.env.items() if k != "TMUX"}
        subprocess.run(["tmux", "-L", self._socket_name(), "kill-server"], env=env, capture_output=True)
        self.client.close()
        if not self.tmux_tmpdir.is_relative_to(self.home):
            shutil.rmtree(self.tmux_tmpdir, ignore_errors=True)

    # --- conveniences -------------------------------------------------------------
    def create_session(self, profile: str = "developer", **params) -> dict:
        params = {"agent_profile": profile, "provider": "mock_cli", **params}
        resp = self.client.post("/sessions", params=params)
        assert resp.status_code == 201, resp.text
        return resp.json()

    def status(self, terminal_id: str) -> str:
        return self.client.get(f"/terminals/{terminal_id}").json()["status"]

    def wait_status(self, terminal_id: str, wanted: str | set[str], timeout: float = 10) -> str:
        wanted_set = {wanted} if isinstance(wanted, str) else wanted
        return wait_until(
            lambda: (s := self.status(terminal_id)) in wanted_set and s,
            timeout,
            message=f"{terminal_id} status in {wanted_set}",
        )

    def send(self, terminal_id: str, message: str) -> dict:
        resp = self.client.post(f"/terminals/{terminal_id}/input", json={"message": message})
        assert resp.status_code == 200, resp.text
        return resp.json()


# --- the CLI ---------------------------------------------------------------------------------
def cli(
    server: CaoServer | None,
    *args: str,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = False,
    timeout: float = 90,
    cwd: Path | str | None = None,
) -> subprocess.CompletedProcess:
    """Run the installed `cao ARGS` against `server` (its home, port and tmux socket: the
    server's env, with `env` on top) and return the finished process, output as text.

    stdin is `input`, or empty: never the runner's terminal, so a command that asks for
    confirmation sees "not a TTY". With check=True a non-zero exit fails the test, showing
    the command's output. `server=None` runs it in this process's env (plus `env`).
    """
    base = server.env if server is not None else {k: v for k, v in os.environ.items() if k != "TMUX"}
    done = subprocess.run(
        [CAO, *args],
        env={**base, **(env or {})},
        input=input if input is not None else "",
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
    if check:
        assert done.returncode == 0, f"cao {' '.join(args)} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done
