"""A private sshd on loopback for the host tests, and a cao-server whose ssh trusts it.

The sshd is Debian's openssh-server with its own config, host key and authorized_keys in a
temp dir. OpenSSH finds ~/.ssh through the passwd entry, not $HOME, so the cao-server under
test runs in its own mount namespace where ~/.ssh is its temp HOME's `.ssh` (a known_hosts
holding the test sshd's key, a config naming the client key): the real ~/.ssh is never read
or written. Every process started here is stopped by its pid; masters by `ssh -O exit`.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from cao_support import START_TIMEOUT, CaoServer, free_port, wait_until

SSHD = Path("/usr/sbin/sshd")
CAO = str(Path(sys.executable).parent / "cao")
PRIVSEP_DIR = Path("/run/sshd")  # compiled into Debian's sshd; created by its service otherwise


def cannot_run(reason: str) -> None:
    if os.environ.get("CAO_REQUIRE_REAL_CLIS") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "cao-test", "-f", str(path)], check=True)


class Sshd:
    """A private sshd on address:port (loopback unless given; inside network namespace
    `netns` if given) that takes one client key."""

    def __init__(
        self,
        root: Path,
        allow_users: tuple[str, ...] = (),
        address: str = "127.0.0.1",
        netns: str | None = None,
        path: str | None = None,
    ):
        self.root = root
        self.allow_users = allow_users
        self.address = address
        self.netns = netns
        # The PATH of every ssh command: by default cao's tools as this checkout has them, ahead
        # of the system's directories; a host of another uid names its own installation.
        self.path = path or f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"
        self.port = free_port()
        self.host_key = root / "host_key"
        self.client_key = root / "client_key"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Sshd:
        keygen(self.host_key)
        keygen(self.client_key)
        (self.root / "authorized_keys").write_text((self.root / "client_key.pub").read_text())
        user = pwd.getpwuid(os.getuid()).pw_name
        config = self.root / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    f"ListenAddress {self.address}",
                    # A client gone silent (a cut network) is dropped, and its forwards with it.
                    "ClientAliveInterval 5",
                    "ClientAliveCountMax 3",
                    f"HostKey {self.host_key}",
                    f"PidFile {self.root / 'sshd.pid'}",
                    # sshd reads the file as the user who logs in: a host user (test_remote_hosts)
                    # has its own copy in its home.
                    f"AuthorizedKeysFile {self.root / 'authorized_keys'} .ssh/authorized_keys",
                    "StrictModes no",
                    "UsePAM no",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    f"AllowUsers {' '.join((user, *self.allow_users))}",
                    f"SetEnv PATH={self.path}",
                    "",
                ]
            )
        )
        return self.relaunch()

    def relaunch(self) -> Sshd:
        """Start the listener (again, after `stop`): same port, keys and config. Sessions it
        accepted before a stop live on (sshd's children), as after a real sshd restart."""
        log = open(self.root / "sshd.log", "ab")
        config = self.root / "sshd_config"
        enter = ["nsenter", f"--net=/run/netns/{self.netns}"] if self.netns else []  # nsenter execs: same pid
        argv = [*enter, str(SSHD), "-D", "-e", "-f", str(config)]
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        wait_until(self._listening, timeout=10, message="sshd listening")
        return self

    def _listening(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"sshd exited: {(self.root / 'sshd.log').read_text()[-2000:]}")
        try:
            socket.create_connection((self.address, self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def known_hosts_line(self) -> str:
        kind, key = (self.root / "host_key.pub").read_text().split()[:2]
        return f"[{self.address}]:{self.port} {kind} {key}\n"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(10)
        self.proc = None


class Netns:
    """A network namespace joined to this one by a veth pair: this side `.outside`, the
    namespace's side `.inside`, on a random 10.231.x.y/30. `cut()` / `mend()` take this
    side's link down and up: packets are dropped, no connection is closed (a network cut)."""

    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.name, self.veth, self.peer = f"cao-{tag}", f"vc{tag}", f"vn{tag}"
        base = 4 * secrets.randbelow(16383)  # a /30 in 10.231.0.0/16
        self.outside = f"10.231.{base // 256}.{base % 256 + 1}"
        self.inside = f"10.231.{base // 256}.{base % 256 + 2}"
        self.made = False

    def create(self) -> Netns:
        for argv in (
            ["ip", "netns", "add", self.name],
            ["ip", "link", "add", self.veth, "type", "veth", "peer", "name", self.peer],
            ["ip", "link", "set", self.peer, "netns", self.name],
            ["ip", "addr", "add", f"{self.outside}/30", "dev", self.veth],
            ["ip", "link", "set", self.veth, "up"],
            ["ip", "-n", self.name, "addr", "add", f"{self.inside}/30", "dev", self.peer],
            ["ip", "-n", self.name, "link", "set", self.peer, "up"],
            ["ip", "-n", self.name, "link", "set", "lo", "up"],
        ):
            done = subprocess.run(argv, capture_output=True, text=True)
            if done.returncode != 0:
                self.remove()
                cannot_run(f"cannot make a network namespace ({' '.join(argv)}): {done.stderr.strip()}")
            self.made = True
        return self

    def cut(self) -> None:
        subprocess.run(["ip", "link", "set", self.veth, "down"], check=True)

    def mend(self) -> None:
        subprocess.run(["ip", "link", "set", self.veth, "up"], check=True)

    def remove(self) -> None:
        if self.made:
            subprocess.run(["ip", "link", "del", self.veth], capture_output=True)  # its peer goes too
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


class SshHomeServer(CaoServer):
    """A cao-server whose ~/.ssh (as ssh finds it, from the passwd entry) is `<HOME>/.ssh`."""

    def __init__(self, home: Path, user_home: Path, real_ssh_dir: Path, env: dict[str, str] | None = None):
        super().__init__(home, {"HOME": str(user_home), **(env or {})})
        self.user_home = user_home
        self.real_ssh_dir = real_ssh_dir

    def start(self) -> SshHomeServer:
        log = open(self.home / "server.out", "ab")
        # unshare execs sh, which mounts and execs python: the pid is the server's throughout.
        self.proc = subprocess.Popen(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                'mount --bind "$1" "$2" && shift 2 && exec "$@"',
                "sh",
                str(self.user_home / ".ssh"),
                str(self.real_ssh_dir),
                sys.executable,
                "-m",
                "cli_agent_orchestrator.cli.server",
            ],
            cwd=self.home,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._healthy, timeout=START_TIMEOUT, message="cao-server health")
        return self

    def control_sockets(self) -> list[Path]:
        # Beside cao-server's api.sock: <home>/tmp/ssh, or elsewhere when the home's path is too
        # long for a socket name (a pytest-xdist worker's tmp_path): ask cao where, as it does.
        from cli_agent_orchestrator.runtime_dir import socket_dir

        where = socket_dir(self.home / "tmp", self.env) if (self.home / "tmp").exists() else self.home / "tmp" / "ssh"
        # api.sock is cao-server's own listener for hosts, not an ssh master
        return sorted(p for p in where.iterdir() if p.is_socket() and p.name != "api.sock") if where.exists() else []

    def end_masters(self) -> None:
        """Good citizenship after a failed test: end any master this server left (by its socket)."""
        for sock in self.control_sockets():
            subprocess.run(
                ["ssh", "-F", "/dev/null", "-o", f"ControlPath={sock}", "-O", "exit", "--", "cao-test-placeholder"],
                capture_output=True,
                timeout=10,
            )


def sshd_running(tmp_path_factory, allow_users: tuple[str, ...] = (), path: str | None = None):
    """A started Sshd (a generator for a fixture: it is stopped after the yield)."""
    for tool in ("ssh", "ssh-keygen", "unshare"):
        if shutil.which(tool) is None:
            cannot_run(f"{tool} is not installed")
    if not SSHD.exists():
        cannot_run(f"{SSHD} is missing (Debian: apt-get install openssh-server)")
    if os.getuid() != 0:
        cannot_run("the ssh tests isolate ~/.ssh in a mount namespace, which needs root")
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        cannot_run(f"cannot make a mount namespace to isolate ~/.ssh: {probe.stderr.strip()}")
    # Made when missing and left in place: another xdist worker's sshd may be using it, and it
    # is the directory Debian's own sshd service makes (empty, root's).
    PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    server = Sshd(tmp_path_factory.mktemp("sshd"), allow_users, path=path)
    try:
        yield server.start()
    finally:
        server.stop()


def ssh_cao_running(tmp_path: Path, sshd: Sshd, env: dict[str, str] | None = None):
    """A cao-server whose ssh knows the test sshd's host key and uses the client key
    (a generator for a fixture)."""
    real_ssh_dir = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".ssh"
    # A mount point must exist. Made when missing and left in place (empty, 0700): another
    # xdist worker's server may have its private ~/.ssh mounted on it right now.
    real_ssh_dir.mkdir(mode=0o700, exist_ok=True)
    user_home = tmp_path / "u"
    dot_ssh = user_home / ".ssh"
    dot_ssh.mkdir(parents=True, mode=0o700)
    (dot_ssh / "known_hosts").write_text(sshd.known_hosts_line())
    (dot_ssh / "config").write_text(f"Host *\n  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n")
    os.chmod(dot_ssh / "config", 0o600)
    # A short home, so the control sockets are under <home>/tmp/ssh when the path fits (not under
    # a pytest-xdist worker's longer tmp_path: cao then picks another private dir, see runtime_dir).
    server = SshHomeServer(tmp_path / "h", user_home, real_ssh_dir, env)
    server.dot_ssh = dot_ssh
    try:
        yield server.start()
    finally:
        server.end_masters()
        server.cleanup()
