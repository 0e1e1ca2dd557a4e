"""A host that is another user, uid and all: a fresh non-root login with its own installation of
cao and the testkit, for the host tests that must not lean on root's files.

The installation is what a person would have on such a host: a venv in the user's home, made by
an interpreter that user can run, with cao and the testkit installed into it by the user's own
pip (from wheels built here, without an index) and their dependencies, pip included, copied
from this checkout's venv (there is no network to fetch them, and they are the same files pip
would unpack). So the
console scripts (`cao-hook`, `cao-mcp-server`, `cao-mock-agent`) exist only on that user's PATH,
and nothing of root's (/root is closed to the user) is reachable from it.

Good citizenship: the user's name is unique per test run; `remove` ends the tmux servers cao
started for it (by their sockets), then any process of that uid by pid, then deletes the user
and its home (`userdel -r`).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as metadata
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from ssh_support import cannot_run

OWN_DISTRIBUTIONS = {"cli-agent-orchestrator": "cli_agent_orchestrator", "cao-testkit": "cao_testkit"}
PROCESS_WAIT_S = 15.0  # how long the user's processes get to end after their tmux server did


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dependency_closure(roots: list[str]) -> dict[str, metadata.Distribution]:
    """The installed distributions `roots` need at run time (no extras), the roots included."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if _key(name) in found:
            continue
        dist = metadata.distribution(name)
        found[_key(name)] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return found


def build_wheel(dist: metadata.Distribution, package: str, out_dir: Path) -> Path:
    """A pure-Python wheel of `package` as this checkout has it (an editable install has no
    wheel to reuse, and building one needs the `wheel` package, which is not installed): its
    files, and a dist-info with the installed metadata and entry points, hashed as pip checks."""
    source = Path(__import__(package).__file__).parent
    name, version = dist.metadata["Name"], dist.version
    stem = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    info = f"{stem}.dist-info"
    entries: dict[str, bytes] = {}
    for path in sorted(source.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            entries[f"{package}/{path.relative_to(source).as_posix()}"] = path.read_bytes()
    entries[f"{info}/METADATA"] = (dist.read_text("METADATA") or f"Metadata-Version: 2.1\nName: {name}\n").encode()
    entries[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: cao-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries[f"{info}/entry_points.txt"] = (dist.read_text("entry_points.txt") or "").encode()
    record = [f"{path},sha256={_digest(data)},{len(data)}" for path, data in entries.items()]
    entries[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    wheel = out_dir / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in entries.items():
            zf.writestr(path, data)
    wheel.chmod(0o644)
    return wheel


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


class HostUser:
    """A non-root user standing for a host: its own uid, home and venv."""

    def __init__(self) -> None:
        self.name = f"cao-host-{secrets.token_hex(3)}"
        self.made = False
        self.uid = -1
        self.home = Path("/nonexistent")

    @property
    def venv(self) -> Path:
        return self.home / "venv"

    @property
    def path(self) -> str:
        """The PATH its ssh commands get: its own venv, then the system's directories."""
        return f"{self.venv / 'bin'}:/usr/local/bin:/usr/bin:/bin"

    def create(self) -> HostUser:
        for tool in ("useradd", "userdel", "runuser"):
            if shutil.which(tool) is None:
                cannot_run(f"{tool} is missing")
        made = subprocess.run(
            ["useradd", "--create-home", "--shell", "/bin/bash", self.name], capture_output=True, text=True
        )
        if made.returncode != 0:
            cannot_run(f"cannot add a user for a host of another uid: {made.stderr.strip()}")
        self.made = True
        # Not locked ("!"), so sshd without PAM lets the key in; no password works either.
        subprocess.run(["usermod", "-p", "*", self.name], check=True, capture_output=True)
        entry = pwd.getpwnam(self.name)
        self.uid, self.home = entry.pw_uid, Path(entry.pw_dir)
        assert self.uid != 0
        return self

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
        # The user's own environment (its HOME, the PATH its ssh commands get), none of root's.
        return subprocess.run(
            ["runuser", "-u", self.name, "--", "env", "-i", f"HOME={self.home}", f"PATH={self.path}", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def authorize(self, public_key: Path) -> None:
        dot_ssh = self.home / ".ssh"
        dot_ssh.mkdir(mode=0o700, exist_ok=True)
        keys = dot_ssh / "authorized_keys"
        keys.write_text(public_key.read_text())
        keys.chmod(0o600)
        shutil.chown(dot_ssh, self.name, self.name)
        shutil.chown(keys, self.name, self.name)

    def install(self) -> None:
        """cao and the testkit in a venv of the user's own, installed by the user's pip."""
        python = self._interpreter()
        # Without ensurepip (Debian's python3-venv may be absent): pip is copied in like the rest.
        made = self.run(python, "-m", "venv", "--without-pip", str(self.venv))
        if made.returncode != 0:
            cannot_run(f"cannot make a venv as {self.name} ({python}): {made.stderr.strip()[-300:]}")
        dists = dependency_closure([*OWN_DISTRIBUTIONS, "pip"])
        site = Path(
            self.run(
                f"{self.venv}/bin/python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"
            ).stdout.strip()
        )
        assert site.is_dir(), site
        for key, dist in dists.items():
            if key not in OWN_DISTRIBUTIONS:
                _copy_distribution(dist, site)
        subprocess.run(["chown", "-R", f"{self.name}:{self.name}", str(site)], check=True)
        wheels = Path(tempfile.mkdtemp(prefix="cao-wheels-"))
        try:
            wheels.chmod(0o755)
            built = [str(build_wheel(dists[key], package, wheels)) for key, package in OWN_DISTRIBUTIONS.items()]
            pip = [f"{self.venv}/bin/python", "-m", "pip", "install", "--no-deps", "--no-index", "--no-cache-dir"]
            done = self.run(*pip, "--disable-pip-version-check", "--quiet", *built)
            assert done.returncode == 0, done.stderr[-2000:]
        finally:
            shutil.rmtree(wheels, ignore_errors=True)

    def _interpreter(self) -> str:
        """A Python the user can run, of this one's version (the copied dependencies include
        compiled extensions): this venv's base interpreter if the user can reach it, else the
        system's python3.X."""
        wanted = f"{sys.version_info.major}.{sys.version_info.minor}"
        candidates = [
            getattr(sys, "_base_executable", ""),
            f"/usr/bin/python{wanted}",
            f"/usr/local/bin/python{wanted}",
        ]
        for candidate in candidates:
            if not candidate or not Path(candidate).exists():
                continue
            probe = self.run(candidate, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])")
            if probe.returncode == 0 and probe.stdout.strip() == wanted:
                return candidate
        cannot_run(f"no Python {wanted} that user {self.name} can run (tried {', '.join(filter(None, candidates))})")
        raise AssertionError("unreachable")

    def pids(self) -> list[int]:
        """The processes running as this user."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            uid_line = next((line for line in status.splitlines() if line.startswith("Uid:")), "")
            if uid_line.split()[1:2] == [str(self.uid)]:
                found.append(int(entry.name))
        return found

    def kill_tmux(self, socket_name: str) -> None:
        self.run("tmux", "-L", socket_name, "kill-server", timeout=30)

    def remove(self, tmux_sockets: list[str]) -> None:
        if not self.made:
            return
        for socket_name in tmux_sockets:
            self.kill_tmux(socket_name)
        deadline = time.monotonic() + PROCESS_WAIT_S
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in self.pids():  # the user is this test's alone: whatever still runs as it is ours
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        tmux_dir = Path(f"/tmp/tmux-{self.uid}")  # tmux leaves its socket directory behind
        if tmux_dir.is_dir() and tmux_dir.stat().st_uid == self.uid:
            shutil.rmtree(tmux_dir, ignore_errors=True)
        gone = subprocess.run(["userdel", "-r", self.name], capture_output=True, text=True)
        assert gone.returncode == 0 or not self.home.exists(), gone.stderr


def _copy_distribution(dist: metadata.Distribution, site: Path) -> None:
    """The distribution's files under site-packages (not its scripts: the host runs none)."""
    for file in dist.files or []:
        relative = Path(str(file))
        if relative.parts[0] == ".." or "__pycache__" in relative.parts:
            continue
        source = Path(str(dist.locate_file(file)))
        if not source.is_file():
            continue
        target = site / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
