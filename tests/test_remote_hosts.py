"""Agents on other hosts, end to end: each simulated host is a login of its own (its own
user name and home, its own tmux server) reached through a private sshd on loopback
(ssh_support.py), one ssh connection per host carrying the tmux control client, the commands
and the reverse forward through which the host's cao-mcp-server and cao-hook reach cao-server.

The host logins share root's uid (`useradd -o -u 0`): the test's Python (and so the mock agent
and cao's tools) lives under /root, which another uid cannot enter. So these tests show
separate homes, tmux servers and connections, not a separate uid (test_host_other_uid.py has a
host that is another uid, with its own installation). Logins made here are removed again, with
the tmux servers cao started for them.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import wait_until
from ssh_support import Netns, Sshd, cannot_run, ssh_cao_running, sshd_running

MOCK = {"provider": "mock_cli"}


class HostUser:
    """A local user standing for a host: its own home (0700) and a login for the client key."""

    def __init__(self, root: Path, tag: str):
        self.name = f"cao{tag}{secrets.token_hex(3)}"
        self.home = root / self.name
        self.made = False

    def create(self) -> HostUser:
        made = subprocess.run(
            ["useradd", "-o", "-u", "0", "-g", "0", "-M", "-d", str(self.home), "-s", "/bin/sh", self.name],
            capture_output=True,
            text=True,
        )
        if made.returncode != 0:
            cannot_run(f"cannot add a user for a simulated host: {made.stderr.strip()}")
        self.made = True
        # Not locked ("!"), so sshd without PAM lets the key in; no password works either.
        subprocess.run(["usermod", "-p", "*", self.name], check=True, capture_output=True)
        self.home.mkdir(mode=0o700)
        return self

    def authorize(self, public_key: Path) -> None:
        dot_ssh = self.home / ".ssh"
        dot_ssh.mkdir(mode=0o700, exist_ok=True)
        with open(dot_ssh / "authorized_keys", "a") as fh:
            fh.write(public_key.read_text())

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["runuser", "-u", self.name, "--", *argv], capture_output=True, text=True, timeout=30)

    def kill_tmux(self, socket_name: str) -> None:
        """End a tmux server cao started for this login (and its agents)."""
        self.run("tmux", "-L", socket_name, "kill-server")
        Path(f"/tmp/tmux-{os.getuid()}/{socket_name}").unlink(missing_ok=True)  # tmux leaves the file

    def remove(self, tmux_sockets: list[str]) -> None:
        if not self.made:
            return
        for socket_name in tmux_sockets:
            self.kill_tmux(socket_name)
        # -f: the login shares uid 0, so userdel would otherwise refuse ("used by process 1").
        gone = subprocess.run(["userdel", "-f", self.name], capture_output=True, text=True)
        assert gone.returncode == 0, gone.stderr


@pytest.fixture(scope="module")
def users(tmp_path_factory):
    for tool in ("useradd", "runuser"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode != 0:
            cannot_run(f"{tool} is missing")
    # Not under pytest's temp root: that is private to root, and these users must reach their homes.
    root = Path(tempfile.mkdtemp(prefix="cao-hosts-"))
    os.chmod(root, 0o755)
    made = [HostUser(root, "b"), HostUser(root, "c")]
    sockets: list[str] = []
    try:
        for user in made:
            user.create()
        yield made, sockets
    finally:
        for user in made:
            user.remove(sockets)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory, users):
    for server in sshd_running(tmp_path_factory, tuple(u.name for u in users[0])):
        for user in users[0]:
            user.authorize(server.client_key.with_suffix(".pub"))
        yield server


@pytest.fixture
def hosted(tmp_path, sshd, users):
    """A cao-server with hosts `b` and `c` registered (each a user on the test sshd)."""
    yield from hosted_server(tmp_path, sshd, users, dead_after_s=4)


@pytest.fixture
def patient(tmp_path, sshd, users):
    """As `hosted`, but its hosts' agents are declared gone only after 5 minutes unreachable:
    for a cut that lasts longer than a connect timeout (10 s) and must be survived."""
    yield from hosted_server(tmp_path, sshd, users, dead_after_s=300)


def hosted_server(tmp_path, sshd, users, dead_after_s: int):
    (b, c), sockets = users
    gen = ssh_cao_running(tmp_path, sshd, {"CAO_HOST_DEAD_AFTER_SECONDS": str(dead_after_s)})
    server = next(gen)
    local_socket = server.client.get("/health").json()["tmux_socket"]
    sockets += [f"{local_socket}-b", f"{local_socket}-c", f"{local_socket}-d"]
    for name, user in (("b", b), ("c", c)):
        body = {"name": name, "ssh": f"{user.name}@127.0.0.1:{sshd.port}", "identity": str(sshd.client_key)}
        assert server.client.post("/hosts", json=body).status_code == 201
    server.users = {"b": b, "c": c}
    server.local_socket = local_socket
    try:
        yield server
    finally:
        for name, user in (("b", b), ("c", c)):
            user.kill_tmux(f"{local_socket}-{name}")
        next(gen, None)


def write_profile(server, name: str, text: str) -> None:
    store = server.home / "agent-store"
    store.mkdir(exist_ok=True)
    (store / f"{name}.md").write_text(text)


def environ_of(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def link_masters(server, user: str | None = None) -> list[int]:
    """The pids of the ssh masters cao-server started (its children running `ssh -M`), those
    logging in as `user` if given."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == server.proc.pid and argv[:2] == [b"ssh", b"-M"] and (user is None or user.encode() in argv):
            found.append(int(entry.name))
    return found


def link_masters_of_socket(server) -> list[int]:
    """Masters left by a killed server (no longer its children): found by their control socket."""
    found = []
    sockets = {str(p) for p in server.control_sockets()}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if argv[:2] == ["ssh", "-M"] and any(a.startswith("ControlPath=") and a[12:] in sockets for a in argv):
            found.append(int(entry.name))
    return found


def test_an_agent_on_a_host_runs_there_as_that_user_with_its_files_there(hosted):
    b = hosted.users["b"]
    resp = hosted.client.post("/sessions", params={"agent_profile": "developer", **MOCK, "host": "b"})
    assert resp.status_code == 201, resp.text
    term = resp.json()
    assert term["host"] == "b"
    assert term["working_directory"] == str(b.home)  # the host user's home, not the server's directory
    tid = term["id"]
    hosted.wait_status(tid, "idle", timeout=30)
    # The agent's pane runs on b's tmux server, as b's user.
    panes = b.run("tmux", "-L", f"{hosted.local_socket}-b", "list-panes", "-a", "-F", "#{pane_pid} #{window_name}")
    assert panes.returncode == 0, panes.stderr
    homes = {environ_of(int(line.split()[0])).get("HOME") for line in panes.stdout.splitlines()}
    assert str(b.home) in homes, panes.stdout
    # Its files were written on the host (in b's cao home), none left here.
    there = b.home / ".cao-host" / f"{hosted.local_socket}-b"
    assert oct((there / "auth-token").stat().st_mode & 0o777) == "0o600"
    assert (there / "tmp" / tid).is_dir()
    assert not (hosted.home / "tmp" / tid).exists()
    # On the host, cao-server answers at the forwarded port, and only to its token: the
    # forward's own connection is cao's, so who opened it there cannot be known.
    port = int((there / "api-port").read_text())
    token = (there / "auth-token").read_text().strip()
    probe = (
        "import sys, urllib.request, urllib.error\n"
        "req = urllib.request.Request(sys.argv[1], headers={'Authorization': 'Bearer ' + sys.argv[2]} if sys.argv[2] else {})\n"
        "try:\n    print(urllib.request.urlopen(req, timeout=10).status)\n"
        "except urllib.error.HTTPError as e:\n    print(e.code)\n"
    )
    url = f"http://127.0.0.1:{port}/terminals"
    assert b.run(sys.executable, "-c", probe, url, "").stdout.strip() == "401"
    assert b.run(sys.executable, "-c", probe, url, token).stdout.strip() == "200"
    # A turn goes through: input typed over ssh, output read back over the same connection.
    hosted.send(tid, "hello from far away")
    hosted.wait_status(tid, "completed", timeout=30)
    out = hosted.client.get(f"/terminals/{tid}/output", params={"mode": "last"}).json()["output"]
    assert "hello from far away" in out
    # Deleting it removes its window and its files there.
    assert hosted.client.delete(f"/terminals/{tid}").status_code == 200
    wait_until(lambda: not (there / "tmp" / tid).exists(), 15, message="the terminal's files on b removed")


SUPERVISOR = """---
name: supervisor
provider: mock_cli
mock:
  rules:
    - match: "Run the survey"
      steps:
        - tool: assign
          args: {agent_profile: analyst, message: "Analyze north data"}
          save: north
        - tool: assign
          args: {agent_profile: analyst, message: "Analyze south data"}
          save: south
        - tool: handoff
          args: {agent_profile: reporter, message: "Create report template", host: b}
          save: template
      reply: "assigned {north} and {south}; template {template}"
    - match: 'Analysis result: ([^\\n]*)'
      collect: results
      until: {results: 2}
      waiting: "got {results_count} of 2"
      reply: "FINAL: {results}"
---
Supervisor.
"""

ANALYST = """---
name: analyst
provider: mock_cli
host: c
mock:
  delay_ms: DELAY
  rules:
    - match: 'Analyze (\\w+) data'
      steps:
        - tool: send_message
          args: {message: "Analysis result: {g1} is fine"}
      reply: "sent {g1}"
---
Analyst.
"""

REPORTER = """---
name: reporter
provider: mock_cli
mock:
  rules:
    - match: "Create report template"
      reply: "TEMPLATE-XYZ"
---
Reporter.
"""


def start_supervisor(server, delay_ms: int) -> str:
    write_profile(server, "supervisor", SUPERVISOR)
    write_profile(server, "analyst", ANALYST.replace("DELAY", str(delay_ms)))
    write_profile(server, "reporter", REPORTER)
    resp = server.client.post("/sessions", params={"agent_profile": "supervisor", **MOCK})
    assert resp.status_code == 201, resp.text
    sup = resp.json()
    assert sup["host"] is None
    server.wait_status(sup["id"], "idle", timeout=30)
    server.send(sup["id"], "Run the survey")
    return sup["id"]


def inbox_of(server, terminal_id: str) -> list[dict]:
    return server.client.get(f"/terminals/{terminal_id}/inbox/messages", params={"limit": 100}).json()


def test_a_local_supervisor_hands_off_to_host_b_and_assigns_two_workers_on_host_c(hosted):
    sup = start_supervisor(hosted, 20)
    final = wait_until(
        lambda: (
            "FINAL:"
            in (o := hosted.client.get(f"/terminals/{sup}/output", params={"mode": "last"}).json().get("output", ""))
            and o
        ),
        90,
        message="the supervisor's final answer",
    )
    assert "north is fine" in final and "south is fine" in final
    history = hosted.client.get(f"/terminals/{sup}/output").json()["output"]
    assert "TEMPLATE-XYZ" in history  # the handoff to b came back
    terms = hosted.client.get(f"/sessions/{hosted.client.get(f'/terminals/{sup}').json()['session_name']}").json()
    analysts = [t for t in terms["terminals"] if t["agent_profile"] == "analyst"]
    assert len(analysts) == 2 and {t["host"] for t in analysts} == {"c"}, analysts
    messages = inbox_of(hosted, sup)
    assert sorted(m["sender_id"] for m in messages) == sorted(t["id"] for t in analysts)
    assert [m["status"] for m in messages] == ["delivered", "delivered"], messages
    # The reporter ran on b, was torn down after the handoff, and its screen (read over ssh) was kept.
    snapshots = [json.loads(p.read_text()) for p in (hosted.home / "logs" / "terminal").glob("*.snapshot.json")]
    reporters = [s for s in snapshots if s["agent_profile"] == "reporter"]
    assert len(reporters) == 1 and reporters[0]["host"] == "b", snapshots
    scrollback = hosted.home / "logs" / "terminal" / f"{reporters[0]['terminal_id']}.scrollback"
    assert "TEMPLATE-XYZ" in scrollback.read_text()


def test_a_cut_connection_mid_turn_loses_nothing_and_doubles_nothing(hosted):
    sup = start_supervisor(hosted, 6000)
    analysts = wait_until(
        lambda: (
            len(a := [t for t in hosted.client.get("/terminals").json() if t["agent_profile"] == "analyst"]) == 2 and a
        ),
        60,
        message="two analysts on c",
    )
    hosted.wait_status(sup, "completed", timeout=30)  # its handoff to b is back; the analysts work on
    for analyst in analysts:
        assert hosted.status(analyst["id"]) == "processing"
    masters = link_masters(hosted, hosted.users["c"].name)
    assert len(masters) == 1, masters
    os.kill(masters[0], signal.SIGKILL)  # host c's connection is cut mid-turn
    unknown = wait_until(
        lambda: (t := hosted.client.get(f"/terminals/{analysts[0]['id']}").json())["status"] == "unknown" and t,
        15,
        message="the analyst unreachable",
    )
    assert "unreachable" in (unknown["status_reason"] or ""), unknown
    # Reconnected with backoff: the analysts come back, re-read, and finish their turns.
    for analyst in analysts:
        try:
            hosted.wait_status(analyst["id"], "completed", timeout=60)
        except AssertionError:
            raise AssertionError(hosted.client.get("/terminals").json()) from None
    wait_until(lambda: len(inbox_of(hosted, sup)) == 2, 60, message="both results in the supervisor's inbox")
    wait_until(
        lambda: [m["status"] for m in inbox_of(hosted, sup)] == ["delivered", "delivered"], 60, message="both delivered"
    )
    time.sleep(2)  # nothing arrives twice later
    messages = inbox_of(hosted, sup)
    assert len(messages) == 2 and {m["sender_id"] for m in messages} == {a["id"] for a in analysts}, messages
    final = hosted.client.get(f"/terminals/{sup}/output", params={"mode": "last"}).json()["output"]
    assert "FINAL:" in final and final.count("is fine") == 2


def test_an_sshd_restart_mid_turn_holds_the_results_until_the_host_is_back(hosted, sshd):
    """The host's sshd is down while its workers finish: their send_message calls cannot
    connect (cao-mcp-server tries again), cao reconnects with backoff once sshd is back, and
    each result arrives exactly once."""
    sup = start_supervisor(hosted, 2500)
    analysts = wait_until(
        lambda: (
            len(a := [t for t in hosted.client.get("/terminals").json() if t["agent_profile"] == "analyst"]) == 2 and a
        ),
        60,
        message="two analysts on c",
    )
    hosted.wait_status(sup, "completed", timeout=30)
    sshd.stop()  # the listener only: b's connection (a child of it) lives on
    try:
        masters = link_masters(hosted, hosted.users["c"].name)
        assert len(masters) == 1, [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in masters]
        os.kill(masters[0], signal.SIGKILL)
        hosted.wait_status(analysts[0]["id"], "unknown", timeout=15)
        time.sleep(5)  # the analysts finish meanwhile; their results cannot reach the server yet
        assert inbox_of(hosted, sup) == []
    finally:
        sshd.relaunch()
    for analyst in analysts:
        hosted.wait_status(analyst["id"], "completed", timeout=60)
    wait_until(
        lambda: [m["status"] for m in inbox_of(hosted, sup)] == ["delivered", "delivered"], 60, message="both delivered"
    )
    time.sleep(2)
    messages = inbox_of(hosted, sup)
    assert len(messages) == 2 and {m["sender_id"] for m in messages} == {a["id"] for a in analysts}, messages


def test_agents_on_a_host_survive_a_server_restart(hosted):
    resp = hosted.client.post("/sessions", params={"agent_profile": "developer", **MOCK, "host": "c"})
    assert resp.status_code == 201, resp.text
    tid = resp.json()["id"]
    hosted.wait_status(tid, "idle", timeout=30)
    masters = link_masters(hosted)
    hosted.kill9()
    hosted.start()
    # The old server's ssh master was ended by the new one (not left behind).
    wait_until(lambda: all(not Path(f"/proc/{pid}").exists() for pid in masters), 15, message="old masters ended")
    term = hosted.client.get(f"/terminals/{tid}").json()
    assert term["host"] == "c" and not term["gone"], term
    hosted.wait_status(tid, "idle", timeout=30)
    hosted.send(tid, "still there?")
    hosted.wait_status(tid, "completed", timeout=30)
    assert "still there?" in hosted.client.get(f"/terminals/{tid}/output", params={"mode": "last"}).json()["output"]


def agent_on_a_host_of_its_own(hosted, lone: Sshd, user: HostUser, name: str = "d", address: str = "127.0.0.1") -> str:
    """Host `name`: `user` on an sshd of its own at `address` (which the test may stop or cut
    off); an idle agent there."""
    lone.root.mkdir(exist_ok=True)
    lone.start()
    user.authorize(lone.client_key.with_suffix(".pub"))
    with open(hosted.dot_ssh / "known_hosts", "a") as fh:
        fh.write(lone.known_hosts_line())
    body = {"name": name, "ssh": f"{user.name}@{address}:{lone.port}", "identity": str(lone.client_key)}
    assert hosted.client.post("/hosts", json=body).status_code == 201
    resp = hosted.client.post("/sessions", params={"agent_profile": "developer", **MOCK, "host": name})
    assert resp.status_code == 201, resp.text
    tid = resp.json()["id"]
    hosted.wait_status(tid, "idle", timeout=30)
    return tid


def test_a_restart_while_a_host_is_down_adopts_its_agents_when_it_is_back(hosted, tmp_path, users):
    (b, _c), _sockets = users
    lone = Sshd(tmp_path / "lone", (b.name,))
    try:
        tid = agent_on_a_host_of_its_own(hosted, lone, b)
        hosted.kill9()
        lone.stop()
        for pid in link_masters_of_socket(hosted):
            os.kill(pid, signal.SIGKILL)
        hosted.start()
        term = hosted.client.get(f"/terminals/{tid}").json()
        assert term["status"] == "unknown" and "unreachable" in (term["status_reason"] or ""), term
        assert not term["gone"]
        lone.relaunch()
        hosted.wait_status(tid, "idle", timeout=30)
        hosted.send(tid, "back again")
        hosted.wait_status(tid, "completed", timeout=30)
    finally:
        lone.stop()
        b.kill_tmux(f"{hosted.local_socket}-d")


def test_a_host_that_stays_unreachable_has_its_agents_marked_gone(hosted, tmp_path, users):
    """A second sshd, stopped after the agent starts: cao reconnects in vain, and after
    CAO_HOST_DEAD_AFTER_SECONDS (4 here) the host's agent is gone, saying why."""
    (b, _c), _sockets = users
    lone = Sshd(tmp_path / "lone", (b.name,))
    try:
        tid = agent_on_a_host_of_its_own(hosted, lone, b)
        lone.stop()
        for pid in link_masters(hosted):
            os.kill(pid, signal.SIGKILL)
        gone = wait_until(
            lambda: (t := hosted.client.get(f"/terminals/{tid}").json()).get("gone") and t, 40, message="the agent gone"
        )
        assert "unreachable for more than 4s" in (gone["status_reason"] or ""), gone
        # A new agent for that host is refused with the reason, not left hanging.
        again = hosted.client.post("/sessions", params={"agent_profile": "developer", **MOCK, "host": "d"})
        assert again.status_code == 503 and "host d unreachable" in again.json()["detail"], again.text
    finally:
        lone.stop()
        b.kill_tmux(f"{hosted.local_socket}-d")


def test_placement_honours_drain_and_max_agents_and_hosts_show_their_load(hosted, sshd, users):
    (_b, c), _sockets = users
    body = {"name": "e", "ssh": f"{c.name}@127.0.0.1:{sshd.port}", "identity": str(sshd.client_key), "max_agents": 1}
    assert hosted.client.post("/hosts", json=body).status_code == 201
    first = hosted.client.post("/sessions", params={"agent_profile": "developer", **MOCK, "host": "e"})
    assert first.status_code == 201, first.text
    tid = first.json()["id"]
    full = hosted.client.post("/sessions", params={"agent_profile": "developer", **MOCK, "host": "e"})
    assert full.status_code == 400 and "host 'e' is full" in full.json()["detail"], full.text
    shown = hosted.client.get("/hosts/e").json()
    assert shown["agents"] == 1 and shown["connection"]["status"] == "ok", shown
    # How a human watches it: ssh to the host, then that host's tmux.
    attach = hosted.client.get(f"/terminals/{tid}/attach").json()
    assert attach["host"] == "e" and attach["argv"][:2] == ["ssh", "-t"], attach
    assert c.name in attach["argv"] and f"{hosted.local_socket}-e" in attach["command"]
    # A host with agents is not removed; a drained one takes no new agents.
    removed = hosted.client.delete("/hosts/e")
    assert removed.status_code == 409 and "drain" in removed.json()["detail"]
    assert hosted.client.post("/hosts/e/drain").status_code == 200
    assert hosted.client.delete(f"/terminals/{tid}").status_code == 200
    drained = hosted.client.post("/sessions", params={"agent_profile": "developer", **MOCK, "host": "e"})
    assert drained.status_code == 400 and "draining" in drained.json()["detail"]
    assert hosted.client.delete("/hosts/e").status_code == 200
    c.kill_tmux(f"{hosted.local_socket}-e")


def test_a_host_whose_tmux_server_ends_loses_its_agents_and_only_those(hosted):
    """As after a reboot: the connection lives, the host's tmux server does not."""
    here = hosted.client.post("/sessions", params={"agent_profile": "developer", **MOCK})
    there = hosted.client.post("/sessions", params={"agent_profile": "developer", **MOCK, "host": "b"})
    assert here.status_code == 201 and there.status_code == 201, (here.text, there.text)
    local_id, remote_id = here.json()["id"], there.json()["id"]
    hosted.wait_status(remote_id, "idle", timeout=30)
    hosted.users["b"].kill_tmux(f"{hosted.local_socket}-b")
    gone = wait_until(
        lambda: (t := hosted.client.get(f"/terminals/{remote_id}").json())["gone"] and t, 20, message="b's agent gone"
    )
    assert "tmux server on host b ended" in gone["status_reason"], gone
    assert hosted.status(local_id) == "idle" and not hosted.client.get(f"/terminals/{local_id}").json()["gone"]
    # The next agent placed on b starts a new tmux server there.
    again = hosted.client.post("/sessions", params={"agent_profile": "developer", **MOCK, "host": "b"})
    assert again.status_code == 201, again.text
    hosted.wait_status(again.json()["id"], "idle", timeout=30)


def test_a_network_cut_holds_messages_until_the_host_is_back(patient, tmp_path, users):
    """Host n is in a network namespace of its own behind a veth link. Taking the link down
    drops packets and closes nothing: cao learns of it from ssh's keep-alives (≤ 20 s), the
    agent turns unknown, a message sent to it meanwhile waits, and once the link is back the
    agent is re-adopted and gets the message exactly once. The server waits longer than the cut
    (and the 10 s connect timeout of its first reconnect) before it gives the agent up."""
    (b, _c), _sockets = users
    if shutil.which("nsenter") is None:
        cannot_run("nsenter is missing")
    ns = Netns().create()
    root = tmp_path / "nsd"
    root.mkdir()
    far = Sshd(root, (b.name,), address=ns.inside, netns=ns.name)
    try:
        tid = agent_on_a_host_of_its_own(patient, far, b, name="n", address=ns.inside)

        ns.cut()
        cut = wait_until(
            lambda: (t := patient.client.get(f"/terminals/{tid}").json())["status"] == "unknown" and t,
            45,
            message="the agent unknown after the cut",
        )
        assert "host n unreachable" in cut["status_reason"], cut
        sent = patient.client.post(
            f"/terminals/{tid}/inbox/messages", json={"sender_id": "cafecafe", "message": "while you were away"}
        )
        assert sent.status_code == 200, sent.text
        time.sleep(3)
        assert [m["status"] for m in inbox_of(patient, tid)] == ["pending"]

        ns.mend()
        wait_until(lambda: [m["status"] for m in inbox_of(patient, tid)] == ["delivered"], 90, message="delivered")
        patient.wait_status(tid, "completed", timeout=30)
        history = patient.client.get(f"/terminals/{tid}/output").json()["output"]
        assert history.count("MOCK: while you were away") == 1, history[-2000:]
        assert patient.client.get("/hosts/n").json()["connection"]["status"] == "ok"
    finally:
        far.stop()
        ns.remove()
        b.kill_tmux(f"{patient.local_socket}-n")


CALLER = """---
name: caller
provider: mock_cli
mock:
  rules:
    - match: 'Assign (\\w+)'
      steps:
        - tool: assign
          args: {agent_profile: helper, message: "Work on {g1}"}
          save: worker
      reply: "assigned {worker}"
---
Caller.
"""

HELPER = """---
name: helper
provider: mock_cli
---
Helper.
"""


def test_a_caller_on_a_draining_host_gets_its_new_worker_placed_here(hosted):
    """A worker goes to its caller's host by default, but never to a host that is draining:
    there placement falls back to the policy (CAO_PLACEMENT, `local` here), this machine."""
    write_profile(hosted, "caller", CALLER)
    write_profile(hosted, "helper", HELPER)
    resp = hosted.client.post("/sessions", params={"agent_profile": "caller", **MOCK, "host": "b"})
    assert resp.status_code == 201, resp.text
    caller = resp.json()["id"]
    hosted.wait_status(caller, "idle", timeout=30)

    def helpers() -> list[dict]:
        return [t for t in hosted.client.get("/terminals").json() if t["agent_profile"] == "helper"]

    hosted.send(caller, "Assign north")
    hosted.wait_status(caller, "completed", timeout=30)
    [first] = wait_until(lambda: len(h := helpers()) == 1 and h, 30, message="the first helper")
    assert first["host"] == "b", first  # beside its caller while b is active

    assert hosted.client.post("/hosts/b/drain").status_code == 200
    hosted.send(caller, "Assign south")
    wait_until(lambda: len(helpers()) == 2, 30, message="the second helper")
    [second] = [t for t in helpers() if t["id"] != first["id"]]
    assert second["host"] is None, second  # b takes no new agents: this machine does
    assert second["caller_id"] == caller, second
    wait_until(  # the assign told the caller the worker it got
        lambda: (
            f"assigned {second['id']}"
            in hosted.client.get(f"/terminals/{caller}/output", params={"mode": "last"}).json().get("output", "")
        ),
        30,
        message="the caller's reply naming the second helper",
    )
    assert hosted.client.get("/hosts/b").json()["agents"] == 2  # the caller and the first helper only
