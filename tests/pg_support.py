"""A throwaway PostgreSQL server from Debian's packages, started by the tests: its own data
directory and socket directory under a temporary path, listening on a free loopback port,
trust authentication for its one role; each test gets a fresh database. It runs as the
`postgres` system user when the tests run as root (PostgreSQL refuses to run as root).

Without Debian's PostgreSQL (/usr/lib/postgresql/*/bin) the PostgreSQL tests skip, unless
CAO_REQUIRE_REAL_CLIS=1 (CI, whose .ci/run installs the package), where they fail.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from conftest import free_port

ROLE = "cao"


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return Path(found[-1]).parent if found else None


class Postgres:
    def __init__(self) -> None:
        bin_dir = _bin_dir()
        if bin_dir is None:
            message = "Debian's postgresql is not installed (apt-get install postgresql)"
            if os.environ.get("CAO_REQUIRE_REAL_CLIS") == "1":
                pytest.fail(message)
            pytest.skip(message)
        self.bin = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="cao-pg-"))
        self.data, self.sockets = self.root / "data", self.root / "run"
        self.sockets.mkdir()
        self.port = free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            os.chmod(self.root, 0o755)
            shutil.chown(self.root, "postgres", "postgres")
            shutil.chown(self.sockets, "postgres", "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.proc: subprocess.Popen | None = None

    def _run(self, *argv: str) -> None:
        subprocess.run([*self.as_user, *argv], check=True, capture_output=True, timeout=120)

    def start(self) -> Postgres:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", ROLE, "--auth=trust", "-E", "UTF8", "--no-sync")
        log = open(self.root / "server.log", "ab")
        self.proc = subprocess.Popen(
            [
                *self.as_user,
                str(self.bin / "postgres"),
                "-D",
                str(self.data),
                "-k",
                str(self.sockets),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-c",
                "fsync=off",  # a test server: durability across power loss is not under test
                "-c",
                "max_connections=200",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ready = subprocess.run(
                [str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)], capture_output=True
            )
            if ready.returncode == 0:
                return self
            if self.proc.poll() is not None:
                raise AssertionError((self.root / "server.log").read_text()[-2000:])
            time.sleep(0.1)
        raise AssertionError("PostgreSQL did not start within 30 s")

    def new_database(self) -> str:
        """A fresh, empty database; its URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        import psycopg

        with psycopg.connect(f"postgresql://{ROLE}@127.0.0.1:{self.port}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://{ROLE}@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # "smart" shutdown: waits for clients; then fast
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.root, ignore_errors=True)
