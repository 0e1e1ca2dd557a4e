"""Support for the end-to-end tests of real coding CLIs (tests/test_real_*.py).

* `npm_binary(package, version, binary)`: installs a pinned CLI from the npm
  registry once into a cache (CAO_TEST_CLI_DIR, default ~/.cache/cao-test-clis)
  and returns the binary's path. A file lock makes concurrent installs safe.
* `pip_binary(package, version, binary)`: the same for a CLI from PyPI, in its own virtual
  environment under the cache (the interpreter running the tests makes it); the binary is
  returned from a directory of its own, so putting it on PATH does not bring that
  environment's `python` or `pip` along. `constraints` pins the CLI's dependencies too.
* `last_reply`, `reply_or_empty`, `agent_processes`, `delete_and_check_nothing_left`: what
  every real-CLI module asks of a terminal (its reply; its processes, by CAO_TERMINAL_ID).
* `real_cli_server(...)`: a CaoServer whose HOME, XDG dirs and TMPDIR are the
  test's own (every CLI confined to a temporary home), with the scripted model
  server's endpoints in its environment and the CLI's binary on PATH.

A real-CLI test that cannot run (npm or tmux missing) skips with the reason on a
developer's machine; under CI (`CAO_REQUIRE_REAL_CLIS=1`, set by `.ci/run`) the same
reason is a failure, so CI cannot turn green without running them. An install
failure is an error either way.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import psutil
import pytest
from conftest import CaoServer, wait_until

CACHE = Path(os.environ.get("CAO_TEST_CLI_DIR") or Path.home() / ".cache" / "cao-test-clis")
# Set by .ci/run: a real-CLI test that cannot run fails instead of skipping.
REQUIRE_ENV = "CAO_REQUIRE_REAL_CLIS"


def real_clis_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def cannot_run(reason: str) -> NoReturn:
    """A real-CLI test that cannot run here: skipped on a developer's machine, failed under CI."""
    if real_clis_required():
        pytest.fail(f"{reason} ({REQUIRE_ENV} is set: real-CLI tests must run)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(autouse=True)
def real_cli_prerequisites() -> None:
    """Autouse in every module that imports it: tmux must be there (skip, or fail under CI)."""
    if shutil.which("tmux") is None:
        cannot_run("tmux not installed")


def npm_binary(package: str, version: str, binary: str) -> Path:
    if shutil.which("npm") is None:
        cannot_run("npm is not installed; the real-CLI tests need Node.js and npm")
    prefix = CACHE / f"{package.replace('/', '__').lstrip('@')}-{version}"
    path = prefix / "node_modules" / ".bin" / binary
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            env = {
                **os.environ,
                "HOME": str(prefix / ".npm-home"),
                "npm_config_update_notifier": "false",
                "npm_config_fund": "false",
                "npm_config_audit": "false",
            }
            subprocess.run(
                ["npm", "install", "--prefix", str(prefix), "--no-save", f"{package}@{version}"],
                env=env,
                check=True,
                capture_output=True,
                timeout=900,
            )
    if not path.exists():
        raise RuntimeError(f"npm installed {package}@{version} but {path} is missing")
    return path


def pip_binary(package: str, version: str, binary: str, constraints: Path | None = None) -> Path:
    prefix = CACHE / f"pypi-{package}-{version}-py{sys.version_info.major}{sys.version_info.minor}"
    venv_binary, path = prefix / "venv" / "bin" / binary, prefix / "bin" / binary
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            shutil.rmtree(prefix / "venv", ignore_errors=True)  # a half-made one from an interrupted run
            subprocess.run([sys.executable, "-m", "venv", str(prefix / "venv")], check=True, capture_output=True)
            pins = ["-c", str(constraints)] if constraints else []
            subprocess.run(
                [str(prefix / "venv" / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", *pins]
                + [f"{package}=={version}"],
                check=True,
                capture_output=True,
                timeout=900,
            )
            if not venv_binary.exists():
                raise RuntimeError(f"pip installed {package}=={version} but {venv_binary} is missing")
            path.parent.mkdir(exist_ok=True)
            path.symlink_to(venv_binary)  # its shebang names the environment's python
    return path


def isolated_home_env(root: Path) -> dict[str, str]:
    """HOME, XDG dirs and TMPDIR inside `root`: a CLI under test never sees the real home."""
    env = {"HOME": str(root / "home"), "TMPDIR": str(root / "tmp")}
    for name, sub in (
        ("XDG_CONFIG_HOME", ".config"),
        ("XDG_DATA_HOME", ".local/share"),
        ("XDG_CACHE_HOME", ".cache"),
        ("XDG_STATE_HOME", ".local/state"),
    ):
        env[name] = str(root / "home" / sub)
    for value in env.values():
        Path(value).mkdir(parents=True, exist_ok=True)
    return env


def real_cli_server(root: Path, binaries: list[Path], extra_env: dict[str, str] | None = None) -> CaoServer:
    """A cao-server (not yet started) for real-CLI tests: isolated home, the CLIs on PATH."""
    env = isolated_home_env(root)
    path = os.pathsep.join([*(str(b.parent) for b in binaries), os.environ.get("PATH", "")])
    return CaoServer(root / "cao-home", {**env, "PATH": path, **(extra_env or {})})


def store_profiles(cao: CaoServer, profiles: dict[str, str]) -> None:
    """Write profiles (name → file text) into the server's agent store."""
    store = cao.home / "agent-store"
    store.mkdir(parents=True, exist_ok=True)
    for name, text in profiles.items():
        (store / f"{name}.md").write_text(text)


def last_reply(cao: CaoServer, terminal_id: str) -> str:
    resp = cao.client.get(f"/terminals/{terminal_id}/output", params={"mode": "last"})
    assert resp.status_code == 200, resp.text
    return resp.json()["output"]


def reply_or_empty(cao: CaoServer, terminal_id: str) -> str:
    """The last reply, or "" while there is none yet (a turn still running)."""
    resp = cao.client.get(f"/terminals/{terminal_id}/output", params={"mode": "last"})
    return resp.json()["output"] if resp.status_code == 200 else ""


def agent_processes(terminal_id: str) -> list[psutil.Process]:
    """Every process (the CLI, its MCP relay, hooks, shell commands) carrying this terminal's identity."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("CAO_TERMINAL_ID") == terminal_id:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def delete_and_check_nothing_left(cao: CaoServer, terminal_id: str) -> None:
    assert agent_processes(terminal_id), "the agent should be running before the delete"
    assert cao.client.delete(f"/terminals/{terminal_id}").status_code == 200
    wait_until(
        lambda: not agent_processes(terminal_id),
        timeout=20,
        interval=0.2,
        message=f"no process with CAO_TERMINAL_ID={terminal_id}",
    )
