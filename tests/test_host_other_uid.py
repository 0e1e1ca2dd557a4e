"""A host that is a separate non-root user (host_user_support.py): its own uid, home and
installation of cao and the testkit, reached over a private loopback sshd whose PATH is that
installation's alone. `cao host check` must find the registered mock_cli provider's CLI there,
and an agent placed there must start through the host's own `cao-mock-agent`, not a path of
cao-server's machine (which that uid cannot even read).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import CaoServer, wait_until
from host_user_support import HostUser
from ssh_support import CAO, ssh_cao_running, sshd_running

NAME = "other"  # the host's name in cao


@pytest.fixture(scope="module")
def host_user():
    user = HostUser()
    sockets: list[str] = []
    try:
        user.create()
        user.install()
        yield user, sockets
    finally:
        user.remove(sockets)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory, host_user):
    user, _sockets = host_user
    for server in sshd_running(tmp_path_factory, (user.name,), path=user.path):
        user.authorize(server.client_key.with_suffix(".pub"))
        yield server


@pytest.fixture
def server(tmp_path, sshd, host_user):
    _user, sockets = host_user
    gen = ssh_cao_running(tmp_path, sshd)
    cao = next(gen)
    sockets.append(f"{cao.client.get('/health').json()['tmux_socket']}-{NAME}")
    try:
        yield cao
    finally:
        next(gen, None)


def cli(server: CaoServer, *args: str) -> subprocess.CompletedProcess:
    env = {**server.env, "CAO_API_PORT": str(server.port)}
    return subprocess.run([CAO, *args], env=env, capture_output=True, text=True, timeout=120)


def uid_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])


def test_a_host_of_another_uid_runs_mock_cli_through_its_own_installation(server, sshd, host_user):
    user, sockets = host_user
    added = cli(server, "host", "add", NAME, "--ssh", f"{user.name}@127.0.0.1:{sshd.port}")
    assert added.returncode == 0, added.stderr

    # The check probes every registered provider's CLI, the entry-point mock_cli's included,
    # under the name the host's PATH resolves: there, the user's own console script.
    checked = cli(server, "host", "check", NAME, "--json")
    assert checked.returncode == 0, (checked.stdout, checked.stderr)
    report = json.loads(checked.stdout)
    items = {item["name"]: item for item in report["items"]}
    bin_dir = user.venv / "bin"
    mock = items["cao-mock-agent"]
    assert mock == {
        **mock,
        "ok": True,
        "kind": "cli",
        "provider": "mock_cli",
        "detail": str(bin_dir / "cao-mock-agent"),
    }
    for tool in ("cao-hook", "cao-mcp-server"):
        assert items[tool]["ok"] and items[tool]["detail"] == str(bin_dir / tool), items[tool]
    assert report["ready"], report
    shown = cli(server, "host", "check", NAME)
    assert "cao-mock-agent (mock_cli)" in shown.stdout and "is ready" in shown.stdout, shown.stdout

    # An agent there runs as that uid, from that installation, and answers a turn.
    resp = server.client.post("/sessions", params={"agent_profile": "developer", "provider": "mock_cli", "host": NAME})
    assert resp.status_code == 201, resp.text
    term = resp.json()
    assert term["host"] == NAME and term["working_directory"] == str(user.home), term
    server.wait_status(term["id"], "idle", timeout=30)
    [socket_name] = sockets
    panes = user.run("tmux", "-L", socket_name, "list-panes", "-a", "-F", "#{window_name} #{pane_pid}")
    assert panes.returncode == 0, panes.stderr
    pids = {int(line.split()[1]) for line in panes.stdout.splitlines() if line.split()[0] == term["name"]}
    assert len(pids) == 1, (panes.stdout, term["name"])
    [pane_pid] = pids
    assert uid_of(pane_pid) == user.uid != 0
    argv = Path(f"/proc/{pane_pid}/cmdline").read_bytes().decode().split("\0")
    assert any(arg.startswith(str(bin_dir)) for arg in argv), argv  # the host's cao-mock-agent
    server.send(term["id"], "hello from another uid")
    server.wait_status(term["id"], "completed", timeout=30)
    out = server.client.get(f"/terminals/{term['id']}/output", params={"mode": "last"}).json()["output"]
    assert "MOCK: hello from another uid" in out, out

    assert server.client.delete(f"/terminals/{term['id']}").status_code == 200
    assert cli(server, "host", "drain", NAME).returncode == 0
    wait_until(lambda: server.client.get(f"/hosts/{NAME}").json()["agents"] == 0, 15, message="no agents there")
    removed = cli(server, "host", "remove", NAME)
    assert removed.returncode == 0, removed.stderr
    assert server.control_sockets() == []
