"""Hosts: the registry over HTTP and the CLI, hostile names and targets refused with nothing
stored, and `check` against a real sshd on loopback.

The sshd is Debian's openssh-server with its own config, host key and authorized_keys in a
temp dir. OpenSSH finds ~/.ssh through the passwd entry, not $HOME, so the cao-server under
test runs in its own mount namespace where ~/.ssh is its temp HOME's `.ssh` (a known_hosts
holding the test sshd's key, a config naming the client key): the real ~/.ssh is never read
or written. Every process started here is stopped by its pid; masters by `ssh -O exit`.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from pathlib import Path

import pytest
from conftest import CaoServer, cli, free_port
from ssh_support import CAO, ssh_cao_running, sshd_running


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    yield from sshd_running(tmp_path_factory)


@pytest.fixture
def ssh_cao(tmp_path, sshd):
    yield from ssh_cao_running(tmp_path, sshd)


@pytest.fixture(scope="module")
def plain_cao(tmp_path_factory):
    """A cao-server for the registry alone (nothing connects)."""
    server = CaoServer(tmp_path_factory.mktemp("hosts") / "home").start()
    try:
        yield server
    finally:
        server.cleanup()


def stored_names(server: CaoServer) -> list[str]:
    return [row[0] for row in server.sql("SELECT name FROM hosts ORDER BY name")]


# --- the registry --------------------------------------------------------------------------


def test_hosts_are_added_listed_drained_and_removed_over_http(plain_cao):
    api = plain_cao.client
    resp = api.post("/hosts", json={"name": "build-1", "ssh": "deploy@build1.example.com:2222", "max_agents": 4})
    assert resp.status_code == 201, resp.text
    host = resp.json()
    assert host["ssh"] == "deploy@build1.example.com:2222" and host["state"] == "active"
    assert host["max_agents"] == 4 and host["identity"] is None and host["added_at"]
    assert api.post("/hosts", json={"name": "v6", "ssh": "[::1]:22"}).status_code == 201
    assert [h["name"] for h in api.get("/hosts").json()] == ["build-1", "v6"]
    assert api.get("/hosts/v6").json()["ssh"] == "[::1]:22"

    again = api.post("/hosts", json={"name": "build-1", "ssh": "other.example.com"})
    assert again.status_code == 409 and "exists" in again.json()["detail"]
    assert api.get("/hosts/build-1").json()["ssh"] == "deploy@build1.example.com:2222"

    drained = api.post("/hosts/build-1/drain")
    assert drained.status_code == 200 and drained.json()["state"] == "draining"
    assert plain_cao.sql("SELECT state FROM hosts WHERE name = 'build-1'") == [("draining",)]

    assert api.delete("/hosts/build-1").json() == {"success": True}
    assert api.delete("/hosts/v6").status_code == 200
    assert stored_names(plain_cao) == []
    for resp in (api.get("/hosts/build-1"), api.delete("/hosts/build-1"), api.post("/hosts/build-1/check")):
        assert resp.status_code == 404 and "build-1" in resp.json()["detail"], resp.text


def test_an_identity_must_be_an_existing_absolute_path(plain_cao, tmp_path):
    key = tmp_path / "key"
    key.write_text("not really a key; only its path is stored\n")
    for identity, reason in (("relative/key", "absolute path"), (str(tmp_path / "nope"), "does not exist")):
        resp = plain_cao.client.post("/hosts", json={"name": "idt", "ssh": "example.com", "identity": identity})
        assert resp.status_code == 400 and reason in resp.json()["detail"], resp.text
    resp = plain_cao.client.post("/hosts", json={"name": "idt", "ssh": "example.com", "identity": str(key)})
    assert resp.status_code == 201 and resp.json()["identity"] == str(key)
    assert plain_cao.client.delete("/hosts/idt").status_code == 200


HOSTILE_TARGETS = [
    "-oProxyCommand=touch /tmp/cao-pwned",
    "-oProxyCommand=sh",
    "a;b",
    "host:99999",
    "host:0",
    "host:22;id",
    "user@-oProxyCommand=x",
    "$(id)@host",
    "host name",
    "host\nname",
    "ho`id`st",
    "[not-ipv6]:22",
    "[::1]x",
    "Root@host",
    "host:+22",
    "é.example.com",
    "",
    "a" * 1000,
    "host.-bad",
    "1.2.3.999",
    "[fe80::1%eth0]:22",
]


@pytest.mark.parametrize("target", HOSTILE_TARGETS)
def test_hostile_targets_are_refused_and_nothing_is_stored(plain_cao, target):
    resp = plain_cao.client.post("/hosts", json={"name": "evil", "ssh": target})
    assert resp.status_code in (400, 422), (target, resp.status_code, resp.text)
    assert "detail" in resp.json() and len(resp.text) < 1000  # a one-line reason, never the whole input
    assert stored_names(plain_cao) == []


HOSTILE_NAMES = ["a/b", "../x", "-x", "Upper", "ümlaut", "a b", "a;b", "", "x" * 33, "n" * 1000, "a\nb"]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_names_are_refused_and_nothing_is_stored(plain_cao, name):
    resp = plain_cao.client.post("/hosts", json={"name": name, "ssh": "example.com"})
    assert resp.status_code in (400, 422), (name, resp.status_code, resp.text)
    assert stored_names(plain_cao) == []


def test_malformed_names_in_paths_are_refused_for_their_shape(plain_cao):
    for path in ("/hosts/UPPER", "/hosts/" + "n" * 1000, "/hosts/%C3%BC", "/hosts/a%3Bb/check"):
        resp = plain_cao.client.get(path) if "check" not in path else plain_cao.client.post(path)
        assert resp.status_code == 422, (path, resp.status_code, resp.text)


def test_max_agents_out_of_range_is_refused(plain_cao):
    for value in (0, -1, 1001):
        resp = plain_cao.client.post("/hosts", json={"name": "cap", "ssh": "example.com", "max_agents": value})
        assert resp.status_code == 422, resp.text
    assert stored_names(plain_cao) == []


def test_the_cli_adds_lists_drains_and_removes_hosts(plain_cao):
    added = cli(plain_cao, "host", "add", "cli-1", "--ssh", "ops@10.0.0.7:2200", "--max-agents", "2")
    assert added.returncode == 0 and "Added host cli-1 (ops@10.0.0.7:2200)" in added.stdout, added.stderr
    listed = cli(plain_cao, "host", "list")
    assert listed.returncode == 0 and "NAME" in listed.stdout, listed.stderr
    [row] = [line for line in listed.stdout.splitlines() if line.startswith("cli-1")]
    assert row.split()[:6] == ["cli-1", "ops@10.0.0.7:2200", "active", "0", "2", "idle"]  # agents, max, connection
    assert json.loads(cli(plain_cao, "host", "list", "--json").stdout)[0]["name"] == "cli-1"

    refused = cli(plain_cao, "host", "add", "bad", "--ssh=-oProxyCommand=sh")
    assert refused.returncode != 0 and "invalid ssh target" in refused.stderr, (refused.stdout, refused.stderr)

    drained = cli(plain_cao, "host", "drain", "cli-1", "--json")
    assert drained.returncode == 0 and json.loads(drained.stdout)["state"] == "draining"
    removed = cli(plain_cao, "host", "remove", "cli-1")
    assert removed.returncode == 0 and "Removed host cli-1." in removed.stdout
    assert "No hosts." in cli(plain_cao, "host", "list").stdout
    missing = cli(plain_cao, "host", "remove", "cli-1")
    assert missing.returncode != 0 and "no host cli-1" in missing.stderr
    assert stored_names(plain_cao) == []


# --- check against a real sshd -------------------------------------------------------------


def _items(report: dict) -> dict[str, dict]:
    return {item["name"]: item for item in report["items"]}


def test_check_reports_what_the_host_has_and_lacks(ssh_cao, sshd):
    user = pwd.getpwuid(os.getuid()).pw_name
    target = f"{user}@127.0.0.1:{sshd.port}"
    assert ssh_cao.client.post("/hosts", json={"name": "lo", "ssh": target}).status_code == 201
    resp = ssh_cao.client.post("/hosts/lo/check")
    assert resp.status_code == 200, resp.text
    report = resp.json()
    items = _items(report)
    assert report["items"][0]["name"] == "ssh" and items["ssh"]["ok"], report
    local_tmux = subprocess.run(["tmux", "-V"], capture_output=True, text=True).stdout.strip()
    assert items["tmux"]["ok"] and items["tmux"]["detail"].startswith(local_tmux + " at /"), items["tmux"]
    assert items["python3"]["ok"] and items["python3"]["detail"].startswith("Python 3."), items["python3"]
    for tool in ("cao-hook", "cao-mcp-server"):  # the sshd's PATH starts with this checkout's tools
        assert items[tool] == {**items[tool], "ok": True, "kind": "cao", "detail": str(Path(CAO).parent / tool)}
    kiro = items["kiro-cli"]
    assert kiro["kind"] == "cli" and kiro["provider"] == "kiro_cli" and not kiro["ok"], kiro
    assert kiro["detail"] == "missing" and kiro["fix"] == "curl -fsSL https://cli.kiro.dev/install | bash"
    clis = [item for item in report["items"] if item["kind"] == "cli"]
    assert {item["provider"] for item in clis} >= {"claude_code", "codex", "kiro_cli"}
    assert report["ready"] == any(item["ok"] for item in clis)

    # The master connection stays for the next command, and removing the host ends it.
    [sock] = ssh_cao.control_sockets()
    assert len(str(sock)) < 100
    assert ssh_cao.client.delete("/hosts/lo").status_code == 200
    assert ssh_cao.control_sockets() == []


def test_the_cli_check_prints_items_and_install_commands(ssh_cao, sshd):
    user = pwd.getpwuid(os.getuid()).pw_name
    assert cli(ssh_cao, "host", "add", "lo", "--ssh", f"{user}@127.0.0.1:{sshd.port}").returncode == 0
    out = cli(ssh_cao, "host", "check", "lo")
    assert "Host lo (" in out.stdout and "ITEM" in out.stdout, (out.stdout, out.stderr)
    lines = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
    assert lines["tmux"].split()[1] == "ok" and lines["cao-hook"].split()[1] == "ok"
    assert lines["kiro-cli"].split()[1:3] == ["(kiro_cli)", "missing"]
    assert "kiro-cli: curl -fsSL https://cli.kiro.dev/install | bash" in out.stdout
    assert out.returncode == (0 if "is ready" in out.stdout else 1)
    as_json = json.loads(cli(ssh_cao, "host", "check", "lo", "--json").stdout)
    assert _items(as_json)["ssh"]["ok"]
    # The master connection ends with the server, not ControlPersist later.
    assert len(ssh_cao.control_sockets()) == 1
    ssh_cao.stop()
    assert ssh_cao.control_sockets() == []


def test_check_refuses_an_unknown_host_key_and_never_adds_it(ssh_cao, sshd):
    known_hosts = ssh_cao.dot_ssh / "known_hosts"
    before = known_hosts.read_bytes()
    user = pwd.getpwuid(os.getuid()).pw_name
    # The same sshd under another name: its key is known as [127.0.0.1]:PORT only.
    assert ssh_cao.client.post("/hosts", json={"name": "named", "ssh": f"{user}@localhost:{sshd.port}"}).status_code
    report = ssh_cao.client.post("/hosts/named/check").json()
    assert report["ready"] is False and [i["name"] for i in report["items"]] == ["ssh"], report
    reason = report["items"][0]["detail"]
    assert "host key" in reason and "not in known_hosts" in reason, reason
    assert f"ssh-keyscan -p {sshd.port} localhost" in reason, reason
    assert known_hosts.read_bytes() == before
    assert sorted(p.name for p in ssh_cao.dot_ssh.iterdir()) == ["config", "known_hosts"]
    out = cli(ssh_cao, "host", "check", "named")
    assert out.returncode == 1 and "host key" in out.stdout and "not ready" in out.stdout


def test_check_of_a_closed_port_says_the_connection_was_refused(ssh_cao):
    closed = free_port()
    assert ssh_cao.client.post("/hosts", json={"name": "closed", "ssh": f"127.0.0.1:{closed}"}).status_code == 201
    report = ssh_cao.client.post("/hosts/closed/check").json()
    assert report["ready"] is False, report
    [item] = report["items"]
    assert item["name"] == "ssh" and not item["ok"]
    assert item["detail"] == "connection refused by 127.0.0.1:" + str(closed) + ": no ssh server listens there"


# --- the pieces that decide what reaches ssh ------------------------------------------------


def test_the_ssh_argv_never_accepts_host_keys_and_ends_options_before_the_host(tmp_path):
    from cli_agent_orchestrator.services.hosts.records import HostRecord, parse_target
    from cli_agent_orchestrator.services.hosts.ssh import control_path, ssh_argv

    host = HostRecord("b", parse_target("deploy@[2001:db8::1]:2222"), "/keys/id", 3, "active", "")
    argv = ssh_argv(host, tmp_path)
    assert argv[0] == "ssh" and argv[-2:] == ["--", "2001:db8::1"]
    options = [argv[i + 1] for i, word in enumerate(argv[:-2]) if word == "-o"]
    assert {"BatchMode=yes", "StrictHostKeyChecking=yes", "ConnectTimeout=10", "ControlMaster=auto"} <= set(options)
    assert f"ControlPath={control_path(tmp_path, host)}" in options
    assert not any(o.startswith(("UserKnownHostsFile", "ProxyCommand", "StrictHostKeyChecking=no")) for o in options)
    assert argv[argv.index("-i") + 1] == "/keys/id" and argv[argv.index("-l") + 1] == "deploy"
    assert argv[argv.index("-p") + 1] == "2222"


def test_the_probe_answer_is_read_strictly():
    from cli_agent_orchestrator.services.hosts.check import ProbeUnreadable, parse_probe

    good = "motd from a login script\ncao-probe-begin\nbin.tmux=/usr/bin/tmux\nos.kernel=Linux\nos.id=debian\ncao-probe-end\n"
    assert parse_probe(good)["bin.tmux"] == "/usr/bin/tmux"
    for bad in (
        good.replace("bin.tmux=/usr/bin/tmux", "rm -rf /"),
        good.replace("bin.tmux", "evil.key"),
        good.replace("os.id=debian", "os.id=debian\nos.id=alpine"),
        good.replace("os.id=debian\n", ""),
        good.replace("cao-probe-end", "cao-probe-ended"),
        good.replace("/usr/bin/tmux", "/usr/bin/\x1b[2Jtmux"),
    ):
        with pytest.raises(ProbeUnreadable):
            parse_probe(bad)


def test_check_probes_every_registered_providers_cli_by_its_name_on_a_host():
    """Built-in and entry-point providers alike; a provider that runs a path of cao-server's
    machine is probed by its `host_binary`, and without one it is reported, not skipped."""
    from cli_agent_orchestrator.services.hosts.check import report_items
    from cli_agent_orchestrator.services.hosts.service import _provider_clis

    clis, unplaceable = _provider_clis()
    assert clis["mock_cli"] == "cao-mock-agent" and clis["kiro_cli"] == "kiro-cli", clis
    assert unplaceable == {}
    values = {"os.kernel": "Linux", "os.id": "debian", "bin.cao-mock-agent": "/home/u/venv/bin/cao-mock-agent"}
    items = {i.name: i for i in report_items(values, {"mock_cli": "cao-mock-agent"}, {"odd": "/opt/odd/bin/odd"})}
    assert items["cao-mock-agent"].ok and items["cao-mock-agent"].provider == "mock_cli"
    odd = items["odd"]
    assert odd.kind == "cli" and not odd.ok and "/opt/odd/bin/odd" in odd.detail, odd
    assert odd.fix is not None and "host_binary" in odd.fix
