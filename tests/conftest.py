"""Shared fixtures: a real cao-server process per test (or per module), each with
its own port, home (CAO_HOME_DIR) and tmux socket directory (TMUX_TMPDIR).

Good citizenship: a fixture ends only the processes it started (by pid) and
kills only the tmux server on its own socket.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from stranger_support import stranger  # noqa: F401 (the `stranger` fixture, for every test module)

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(
    predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.02, message: str = "condition"
) -> object:
    """Poll a condition with a deadline (test side only; product code waits on events)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message} (last: {last!r})")


class CaoServer:
    """A cao-server subprocess in an isolated home; restartable (kill -9 included)."""

    def __init__(self, home: Path, extra_env: dict[str, str] | None = None):
        self.home = home
        self.port = free_port()
        self.tmux_tmpdir = home / "tmux"
        # cao refuses a home others can open (private_files.private_home), so the harness
        # makes it 0700 as cao would, before the tmux directory inside it.
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.tmux_tmpdir.mkdir(mode=0o700, exist_ok=True)
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
        wait_until(self._healthy, timeout=20, message="cao-server health")
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
        import hashlib

        return "cao-" + hashlib.sha1(str(self.home.resolve()).encode()).hexdigest()[:8]

    def cleanup(self) -> None:
        self.stop()
        env = {k: v for k, v in self.env.items() if k != "TMUX"}
        subprocess.run(["tmux", "-L", self._socket_name(), "kill-server"], env=env, capture_output=True)
        self.client.close()

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


@pytest.fixture
def cao(tmp_path: Path):
    server = CaoServer(tmp_path / "home").start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def cao_factory(tmp_path: Path):
    servers: list[CaoServer] = []

    def make(name: str = "home", **env: str) -> CaoServer:
        server = CaoServer(tmp_path / name, env)
        servers.append(server)
        return server

    try:
        yield make
    finally:
        for server in servers:
            server.cleanup()


def read_records(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="session")
def postgres():
    """One throwaway PostgreSQL server for the session (pg_support.py); skips without it."""
    from pg_support import Postgres

    server = Postgres().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_cao_factory(tmp_path: Path, postgres):
    """Like cao_factory, each server's state in a fresh PostgreSQL database (CAO_DATABASE_URL)."""
    servers: list[CaoServer] = []

    def make(name: str = "home", **env: str) -> CaoServer:
        server = CaoServer(tmp_path / name, {"CAO_DATABASE_URL": postgres.new_database(), **env})
        servers.append(server)
        return server

    try:
        yield make
    finally:
        for server in servers:
            server.cleanup()
