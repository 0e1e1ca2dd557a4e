#!/usr/bin/env python3
"""Agents on other hosts over SSH, measured against local agents on the same cao-server.

Each simulated host is a login of its own on this machine (its own user name, home and tmux
server; `useradd -o -u 0`, as tests/test_remote_hosts.py does), reached through a private
Debian sshd on a loopback port (tests/ssh_support.py: own config, host key, authorized_keys).
cao-server runs inside `unshare --mount` with a temporary ~/.ssh (known_hosts holding that
sshd's host key, a config naming the client key) where root's would be, so the real ~/.ssh
is never read or written. Unlike the tests, nothing shared is created or removed for this:
the server's ~/.ssh sits on an overlay of root's home, and the sshd runs in a mount namespace
with a /run of its own for its /run/sshd (see IsolatedSshServer and Bench.start for why: a
test run next to this one would otherwise break it). Agents are mock agents answering at
once (profile `instant`, `mock: {delay_ms: 0}`; CAO_MOCK_DELAY_MS=0 in the server's env).

Measures, host (loopback SSH) vs local:
 1. spawn → IDLE: POST /sessions (which waits until the agent is ready) until the agent is
    idle; median and p90 of --spawns each, after one warm-up each (the warm-up on the host
    also opens its ssh master).
 2. turn overhead: POST /input to an idle agent until its `completed` status event (over
    GET /events, SSE) for that turn; median and p90 of --turns each.
 3. input → status event: from POST /input to the first `processing` status event of that
    turn (its source is printed: `screen` is the agent's screen as the tmux control client,
    over ssh for a host agent, delivered it), on agents thinking --think-ms (300) per answer:
    an instant mock goes from idle straight to completed, with no processing to see.
    The JSON has every turn's status events (ms after the POST, status, source).
 4. scale: --agents agents spread round-robin over --hosts hosts (one login each), spawned
    --concurrency at a time: wall time until all are up; then one turn each (inputs sent
    --concurrency at a time) until every agent's `completed` event is in (wall time); then
    cao-server's CPU (utime+stime from /proc/<pid>/stat) while all of them idle for
    --idle-seconds, as % of one core (and its ssh masters' CPU, for reference).

Needs root (users, sshd, mount namespace), Debian's openssh-server, tmux, unshare, useradd,
runuser. Everything it starts is stopped by pid; the host logins' tmux servers are killed by
socket name (`<local socket>-<host>`), the logins removed, the temp dirs deleted.

    .venv/bin/python bench/hosts_bench.py                 # 10 spawns, 20 turns, 100 agents / 4 hosts
    .venv/bin/python bench/hosts_bench.py --quick         # 3 spawns, 3 turns, 10 agents / 2 hosts
    .venv/bin/python bench/hosts_bench.py --json bench/results/hosts.json [--agents N --hosts H ...]

Prints a table; --json PATH writes the raw figures. The server and sshd logs are kept in
/tmp (their paths printed) when something fails, or with --keep-log. A default run takes
about 75 s on a 2-core machine; --quick about 30 s.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _harness import EventFollower, machine  # noqa: E402

INSTANT = "---\nname: instant\nprovider: mock_cli\nmock: {delay_ms: 0}\n---\nInstant.\n"
THINKER = "---\nname: thinker\nprovider: mock_cli\nmock: {delay_ms: DELAY}\n---\nThinker.\n"
TICKS = os.sysconf("SC_CLK_TCK")
FULL = {"spawns": 10, "turns": 20, "agents": 100, "hosts": 4, "idle_seconds": 10.0}
QUICK = {"spawns": 3, "turns": 3, "agents": 10, "hosts": 2, "idle_seconds": 5.0}


def refuse(reason: str) -> None:
    raise SystemExit(f"hosts_bench: {reason}")


def preflight() -> None:
    if os.getuid() != 0:
        refuse(f"must run as root (it adds users, runs an sshd and a mount namespace); it runs as uid {os.getuid()}")
    for tool in ("ssh", "ssh-keygen", "unshare", "useradd", "usermod", "userdel", "runuser", "tmux"):
        if shutil.which(tool) is None:
            refuse(f"{tool} is not installed")
    if not Path("/usr/sbin/sshd").exists():
        refuse("/usr/sbin/sshd is missing (Debian: apt-get install openssh-server)")
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        refuse(f"cannot make a mount namespace to isolate ~/.ssh: {probe.stderr.strip()}")


# ssh_support imports pytest and conftest (both importable with the test extra installed).
try:
    import ssh_support  # noqa: E402
    from conftest import wait_until  # noqa: E402
    from ssh_support import Sshd, SshHomeServer  # noqa: E402
except ImportError as exc:  # pragma: no cover - a setup problem, said plainly
    refuse(f"cannot import tests/ssh_support.py ({exc}); run with the project's .venv/bin/python")


class HostUser:
    """A local login standing for a host (as in tests/test_remote_hosts.py)."""

    def __init__(self, root: Path, tag: str):
        self.name = f"caob{tag}{secrets.token_hex(3)}"
        self.home = root / self.name
        self.made = False

    def create(self, public_key: Path) -> HostUser:
        made = subprocess.run(
            ["useradd", "-o", "-u", "0", "-g", "0", "-M", "-d", str(self.home), "-s", "/bin/sh", self.name],
            capture_output=True,
            text=True,
        )
        if made.returncode != 0:
            refuse(f"cannot add a user for a simulated host: {made.stderr.strip()}")
        self.made = True
        subprocess.run(["usermod", "-p", "*", self.name], check=True, capture_output=True)
        self.home.mkdir(mode=0o700)
        dot_ssh = self.home / ".ssh"
        dot_ssh.mkdir(mode=0o700)
        (dot_ssh / "authorized_keys").write_text(public_key.read_text())
        return self

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["runuser", "-u", self.name, "--", *argv], capture_output=True, text=True, timeout=30)

    def remove(self, tmux_socket: str | None) -> None:
        if not self.made:
            return
        if tmux_socket:
            self.run("tmux", "-L", tmux_socket, "kill-server")
            # The socket file outlives the server here; remove it once nothing answers on it.
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if "no server running" in self.run("tmux", "-L", tmux_socket, "list-sessions").stderr:
                    Path(f"/tmp/tmux-{os.getuid()}", tmux_socket).unlink(missing_ok=True)
                    break
                time.sleep(0.1)
        # -f: the login shares uid 0, which always has processes; plain userdel refuses then
        subprocess.run(["userdel", "-f", self.name], capture_output=True)
        self.made = False


class IsolatedSshServer(SshHomeServer):
    """tests/ssh_support.py's SshHomeServer, but without needing root's real ~/.ssh to exist:
    in the server's mount namespace an overlay over root's home (writes go to a temp dir)
    gets a `.ssh` that is the temp `<HOME>/.ssh` bind-mounted. Bind-mounting straight onto
    the real ~/.ssh, as the tests do, breaks when another run (a test fixture that made
    ~/.ssh) removes that directory meanwhile: the kernel then detaches the bind mount in
    every namespace, and ssh stops finding the known_hosts."""

    def __init__(self, home: Path, user_home: Path, root_home: Path, scratch: Path, env: dict[str, str]):
        super().__init__(home, user_home, root_home / ".ssh", env)
        self.root_home = root_home
        self.scratch = scratch

    def start(self) -> IsolatedSshServer:
        (self.scratch / "upper").mkdir(parents=True)
        (self.scratch / "work").mkdir()
        log = open(self.home / "server.out", "ab")
        script = (
            'mount -t overlay overlay -o "lowerdir=$1,upperdir=$2/upper,workdir=$2/work" "$1"'
            ' && mkdir -p "$1/.ssh" && mount --bind "$3" "$1/.ssh" && shift 3 && exec "$@"'
        )
        # unshare execs sh, which mounts and execs python: the pid is the server's throughout.
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]
            + [str(self.root_home), str(self.scratch), str(self.user_home / ".ssh")]
            + [sys.executable, "-m", "cli_agent_orchestrator.cli.server"],
            cwd=self.home,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._healthy, timeout=20, message="cao-server health")
        return self


class Follower(EventFollower):
    """All status events, kept (with arrival time) per terminal, so many waiters can look."""

    def __init__(self, url: str):
        self.cond = threading.Condition()
        self.log: dict[str, list[tuple[float, dict]]] = {}
        super().__init__(url, "terminal.*.status")
        threading.Thread(target=self._sort, daemon=True).start()

    def _sort(self) -> None:
        while True:
            t, ev = self.events.get()
            with self.cond:
                self.log.setdefault(ev.get("terminal_id", ""), []).append((t, ev))
                self.cond.notify_all()

    def first(self, tid: str, pred, timeout: float) -> tuple[float, dict]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for t, ev in self.log.get(tid, []):
                    if pred(ev):
                        return t, ev
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{tid}: no matching status event in {timeout:.0f}s; saw {self.log.get(tid)}")
                self.cond.wait(left)

    def forget(self, tid: str) -> None:
        with self.cond:
            self.log.pop(tid, None)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14, 15)


def ssh_masters(server_pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == server_pid and argv[:2] == [b"ssh", b"-M"]:
            found.append(int(entry.name))
    return found


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * len(s) + 0.5)) - 1))]


def summary(values: list[float]) -> dict:
    return {
        "median": round(statistics.median(values), 1),
        "p90": round(pct(values, 0.9), 1),
        "min": round(min(values), 1),
        "max": round(max(values), 1),
        "n": len(values),
        "all": [round(v, 1) for v in values],
    }


class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.root = Path(tempfile.mkdtemp(prefix="cao-hb-"))  # private: sshd files, server home
        self.users_root = Path(tempfile.mkdtemp(prefix="cao-hb-users-"))
        os.chmod(self.users_root, 0o755)  # the host logins must reach their homes
        self.sshd: Sshd | None = None
        self.server: SshHomeServer | None = None
        self.users: list[HostUser] = []
        self.local_socket: str | None = None
        self.root_home = Path(pwd.getpwuid(0).pw_dir)
        self.follower: Follower | None = None
        self.failed = False

    # --- setup / teardown -----------------------------------------------------------
    def start(self) -> None:
        n_users = max(self.args.hosts, 1)
        # sshd needs /run/sshd (its privilege separation directory) at every login. Another
        # run's test fixture may remove the shared one while we run (it does when it made it),
        # and sshd then drops every new connection ("Missing privilege separation directory",
        # which cao reports as "Connection reset"). So our sshd gets a /run of its own, in a
        # mount namespace of its own; the real /run/sshd is never touched.
        wrapper = self.root / "sshd-wrapper"
        wrapper.write_text(
            "#!/bin/sh\n"
            "exec unshare --mount --propagation private sh -c "
            "'mount -t tmpfs -o mode=755 tmpfs /run && mkdir -m 755 /run/sshd && exec /usr/sbin/sshd \"$@\"' "
            'sh "$@"\n'
        )
        wrapper.chmod(0o755)
        ssh_support.SSHD = wrapper  # Sshd.start runs this (exec all the way: the pid is sshd's)
        names = [f"{i}{secrets.token_hex(2)}" for i in range(n_users)]
        self.users = [HostUser(self.users_root, tag) for tag in names]
        (self.root / "sshd").mkdir()
        self.sshd = Sshd(self.root / "sshd", tuple(u.name for u in self.users))
        self.sshd.start()
        for user in self.users:
            user.create(self.sshd.client_key.with_suffix(".pub"))
        user_home = self.root / "u"
        dot_ssh = user_home / ".ssh"
        dot_ssh.mkdir(parents=True, mode=0o700)
        (dot_ssh / "known_hosts").write_text(self.sshd.known_hosts_line())
        (dot_ssh / "config").write_text(f"Host *\n  IdentityFile {self.sshd.client_key}\n  IdentitiesOnly yes\n")
        os.chmod(dot_ssh / "config", 0o600)
        env = {"CAO_MOCK_DELAY_MS": "0", "CAO_LOG_LEVEL": self.args.log_level}
        self.server = IsolatedSshServer(self.root / "h", user_home, self.root_home, self.root / "overlay", env)
        self.server.client.close()
        self.server.client = httpx.Client(base_url=self.server.url, timeout=180)
        self.server.start()
        self.local_socket = self.server.client.get("/health").json()["tmux_socket"]
        store = self.server.home / "agent-store"
        store.mkdir(exist_ok=True)
        (store / "instant.md").write_text(INSTANT)
        (store / "thinker.md").write_text(THINKER.replace("DELAY", str(self.args.think_ms)))
        for i, user in enumerate(self.users):
            body = {
                "name": f"h{i}",
                "ssh": f"{user.name}@127.0.0.1:{self.sshd.port}",
                "identity": str(self.sshd.client_key),
            }
            resp = self.server.client.post("/hosts", json=body)
            if resp.status_code != 201:
                refuse(f"POST /hosts {body['name']}: {resp.status_code} {resp.text}")
        self.follower = Follower(self.server.url)

    def close(self) -> None:
        kept: list[str] = []
        if self.server is not None:
            try:
                self.server.end_masters()
            except Exception:  # noqa: BLE001 - cleanup goes on
                pass
            self.server.cleanup()  # stops the server by pid, kills its local tmux server
            if self.failed or self.args.keep_log:
                logs = [(self.server.home / "server.out", "server"), (self.root / "sshd" / "sshd.log", "sshd")]
                for src, what in logs:
                    if src.exists():
                        fd, name = tempfile.mkstemp(prefix=f"cao-hosts-bench-{what}-", suffix=".log")
                        os.close(fd)
                        shutil.copyfile(src, name)
                        kept.append(name)
        for i, user in enumerate(self.users):
            user.remove(f"{self.local_socket}-h{i}" if self.local_socket else None)
        if self.sshd is not None:
            self.sshd.stop()
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.users_root, ignore_errors=True)
        for name in kept:
            print(f"log kept: {name}", file=sys.stderr)

    # --- helpers ------------------------------------------------------------------------
    @property
    def http(self) -> httpx.Client:
        assert self.server is not None
        return self.server.client

    def spawn(
        self, host: str | None, client: httpx.Client | None = None, profile: str = "instant"
    ) -> tuple[float, dict]:
        """POST /sessions until the agent is idle: (seconds, terminal)."""
        params = {"agent_profile": profile, "provider": "mock_cli"}
        if host:
            params["host"] = host
        t0 = time.perf_counter()
        resp = (client or self.http).post("/sessions", params=params)
        if resp.status_code != 201:
            raise RuntimeError(f"POST /sessions host={host}: {resp.status_code} {resp.text[:500]}")
        term = resp.json()
        t1 = time.perf_counter()
        if (client or self.http).get(f"/terminals/{term['id']}").json()["status"] != "idle":
            assert self.follower is not None
            t1, _ = self.follower.first(term["id"], lambda ev: ev["status"] == "idle", 60)
        return t1 - t0, term

    def turn(self, tid: str, text: str, client: httpx.Client | None = None) -> dict:
        """One input turn: ms to the POST's answer, to the first `processing` event, to the first
        `processing` not decided by the input itself, to `completed`."""
        assert self.follower is not None
        t0 = time.perf_counter()
        resp = (client or self.http).post(f"/terminals/{tid}/input", json={"message": text})
        t_post = time.perf_counter()
        if resp.status_code != 200:
            raise RuntimeError(f"POST /terminals/{tid}/input: {resp.status_code} {resp.text[:500]}")
        n = resp.json().get("turn", 0)
        this_turn = lambda ev: ev.get("turn", 0) >= n  # noqa: E731
        t_done, _ = self.follower.first(tid, lambda ev: this_turn(ev) and ev["status"] == "completed", 120)
        out: dict = {"post_ms": (t_post - t0) * 1000, "completed_ms": (t_done - t0) * 1000}
        with self.follower.cond:
            out["events"] = [
                (round((t - t0) * 1000, 1), ev["status"], ev.get("source"))
                for t, ev in self.follower.log.get(tid, [])
                if this_turn(ev) and t <= t_done
            ]
        try:
            t_proc, ev = self.follower.first(tid, lambda ev: this_turn(ev) and ev["status"] == "processing", 0)
            out["processing_ms"] = (t_proc - t0) * 1000
            out["processing_source"] = ev.get("source")
        except TimeoutError:
            pass
        try:
            t_seen, ev = self.follower.first(
                tid,
                lambda ev: this_turn(ev) and ev["status"] == "processing" and ev.get("source") != "input",
                0,
            )
            out["processing_seen_ms"] = (t_seen - t0) * 1000
            out["processing_seen_source"] = ev.get("source")
        except TimeoutError:
            pass
        return out

    def turns(self, agents: dict[str, str], text: str) -> dict[str, list[dict]]:
        """--turns turns on each agent, local and host interleaved, after one warm-up turn each."""
        out: dict[str, list[dict]] = {kind: [] for kind in agents}
        for i in range(self.args.turns + 1):
            for kind, tid in agents.items():
                r = self.turn(tid, f"{text} {i}")
                if i:
                    out[kind].append(r)
        return out

    # --- the measures -----------------------------------------------------------------
    def latencies(self) -> dict:
        a = self.args
        res: dict = {}
        spawned: dict[str, list[dict]] = {"local": [], "host": []}
        times: dict[str, list[float]] = {"local": [], "host": []}
        for kind, host in (("local", None), ("host", "h0")):  # warm-up each
            s, term = self.spawn(host)
            res[f"warmup_spawn_{kind}_ms"] = round(s * 1000, 1)
            spawned[kind].append(term)
            log(f"warm-up spawn {kind}: {s * 1000:.0f} ms")
        for i in range(a.spawns):  # interleaved, so load on the shared machine hits both alike
            for kind, host in (("local", None), ("host", "h0")):
                s, term = self.spawn(host)
                times[kind].append(s * 1000)
                spawned[kind].append(term)
            log(f"spawn {i + 1}/{a.spawns}: local {times['local'][-1]:.0f} ms, host {times['host'][-1]:.0f} ms")
        for kind in times:
            res[f"spawn_to_idle_{kind}_ms"] = summary(times[kind])

        # 2. Turn overhead: instant agents (think time 0).
        agents = {kind: spawned[kind][0]["id"] for kind in spawned}
        turns = self.turns(agents, "bench turn")
        for kind, rows in turns.items():
            res[f"turn_overhead_{kind}_ms"] = summary([r["completed_ms"] for r in rows])
            res[f"input_post_{kind}_ms"] = summary([r["post_ms"] for r in rows])
            res[f"turn_events_{kind}"] = [r["events"] for r in rows]

        # 3. Input → status event: agents that think --think-ms, so `processing` is on screen
        # long enough to be seen (an instant mock goes straight from idle to completed).
        for kind, host in (("local", None), ("host", "h0")):
            _, term = self.spawn(host, profile="thinker")
            spawned[kind].append(term)
            agents[kind] = term["id"]
        turns = self.turns(agents, "think turn")
        for kind, rows in turns.items():
            proc = [r["processing_ms"] for r in rows if "processing_ms" in r]
            res[f"input_to_processing_event_{kind}_ms"] = summary(proc) if proc else None
            res[f"input_to_processing_event_{kind}_sources"] = sorted(
                {r.get("processing_source") for r in rows} - {None}
            )
            seen = [r["processing_seen_ms"] for r in rows if "processing_seen_ms" in r]
            res[f"input_to_processing_seen_{kind}_ms"] = summary(seen) if seen else None
            res[f"input_to_processing_seen_{kind}_sources"] = sorted(
                {r.get("processing_seen_source") for r in rows} - {None}
            )
            res[f"think_turns_without_processing_event_{kind}"] = sum(1 for r in rows if "processing_ms" not in r)
            res[f"think_turn_completed_{kind}_ms"] = summary([r["completed_ms"] for r in rows])
            res[f"think_turn_events_{kind}"] = [r["events"] for r in rows]
        # Leave nothing from here running into the scale measure.
        for kind in spawned:
            for term in spawned[kind]:
                self.http.delete(f"/sessions/{term['session_name']}")
                assert self.follower is not None
                self.follower.forget(term["id"])
        return res

    def scale(self) -> dict:
        a = self.args
        assert self.server is not None and self.server.proc is not None and self.follower is not None
        hosts = [f"h{i % a.hosts}" for i in range(a.agents)]
        res: dict = {"agents": a.agents, "hosts": a.hosts, "concurrency": a.concurrency}
        local = threading.local()
        url = self.server.url

        def client() -> httpx.Client:
            if not hasattr(local, "c"):
                local.c = httpx.Client(base_url=url, timeout=300)
            return local.c

        def one(host: str):
            try:
                s, term = self.spawn(host, client())
                return host, s * 1000, term, None
            except Exception as exc:  # noqa: BLE001 - counted and reported
                return host, None, None, f"{type(exc).__name__}: {exc}"

        done = 0
        t0 = time.perf_counter()
        outcomes = []
        with ThreadPoolExecutor(a.concurrency) as pool:
            for out in pool.map(one, hosts):
                outcomes.append(out)
                done += 1
                if done % max(1, a.agents // 10) == 0:
                    log(f"spawned {done}/{a.agents} after {time.perf_counter() - t0:.1f}s")
        res["spawn_all_wall_s"] = round(time.perf_counter() - t0, 2)
        ok = [o for o in outcomes if o[2] is not None]
        failed = [o for o in outcomes if o[2] is None]
        res["spawned"] = len(ok)
        res["spawn_failures"] = [{"host": h, "error": e} for h, _, _, e in failed]
        if ok:
            res["spawn_each_ms"] = summary([o[1] for o in ok])
        if failed:
            self.failed = True
            log(f"{len(failed)} of {a.agents} spawns failed; first: {failed[0][3]}")
        terms = [o[2] for o in ok]

        def go(term: dict):
            try:
                return term["id"], self.turn(term["id"], f"scale turn {term['id']}", client()), None
            except Exception as exc:  # noqa: BLE001
                return term["id"], None, f"{type(exc).__name__}: {exc}"

        t0 = time.perf_counter()
        with ThreadPoolExecutor(a.concurrency) as pool:
            turned = list(pool.map(go, terms))
        res["one_turn_each_wall_s"] = round(time.perf_counter() - t0, 2)
        good = [r for _, r, e in turned if r]
        bad = [{"terminal": t, "error": e} for t, _, e in turned if e]
        res["turns_completed"] = len(good)
        res["turn_failures"] = bad
        if good:
            res["turn_each_completed_ms"] = summary([r["completed_ms"] for r in good])
        if bad:
            self.failed = True
            log(f"{len(bad)} turns failed; first: {bad[0]['error']}")

        time.sleep(2.0)  # let the last output settle
        pid = self.server.proc.pid
        masters = ssh_masters(pid)
        c0, m0, w0 = cpu_seconds(pid), sum(cpu_seconds(p) for p in masters), time.monotonic()
        time.sleep(a.idle_seconds)
        c1, wall = cpu_seconds(pid), time.monotonic() - w0
        m1 = sum(cpu_seconds(p) for p in masters if Path(f"/proc/{p}").exists())
        res["idle_seconds"] = round(wall, 2)
        res["idle_server_cpu_percent_of_one_core"] = round(100 * (c1 - c0) / wall, 2)
        res["idle_ssh_masters"] = len(masters)
        res["idle_ssh_masters_cpu_percent_of_one_core"] = round(100 * (m1 - m0) / wall, 2)
        status = self.http.get("/health").json()
        res["server_rss_mb"] = round(int(_status_field(pid, "VmRSS")) / 1024, 1)
        res["health"] = {k: v for k, v in status.items() if k in ("status", "terminals")}
        return res


def _status_field(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split()[1]
    return "0"


def log(msg: str) -> None:
    print(f"  {msg}", file=sys.stderr, flush=True)


def table(res: dict, args: argparse.Namespace) -> list[tuple[str, str]]:
    def mp(key: str) -> str:
        v = res.get(key)
        return f"{v['median']:.1f} / {v['p90']:.1f}" if v else "n/a (no such event)"

    rows: list[tuple[str, str]] = []
    for kind in ("local", "host"):
        rows.append((f"spawn → IDLE, {kind}, median / p90 ms (N={args.spawns})", mp(f"spawn_to_idle_{kind}_ms")))
    for kind in ("local", "host"):
        rows.append(
            (
                f"turn overhead (input → completed), {kind}, median / p90 ms (N={args.turns})",
                mp(f"turn_overhead_{kind}_ms"),
            )
        )
    for kind in ("local", "host"):
        srcs = ",".join(res.get(f"input_to_processing_event_{kind}_sources", [])) or "-"
        rows.append(
            (
                f"input → first processing event, {kind} [{srcs}], median / p90 ms",
                mp(f"input_to_processing_event_{kind}_ms"),
            )
        )
    for kind in ("local", "host"):
        if res.get(f"input_to_processing_seen_{kind}_ms") == res.get(f"input_to_processing_event_{kind}_ms"):
            continue  # the first processing event came from the agent's side already
        srcs = ",".join(res.get(f"input_to_processing_seen_{kind}_sources", [])) or "-"
        rows.append(
            (
                f"input → processing seen on the agent's side, {kind} [{srcs}], median / p90 ms",
                mp(f"input_to_processing_seen_{kind}_ms"),
            )
        )
    for kind in ("local", "host"):
        rows.append((f"POST /input answered, {kind}, median / p90 ms", mp(f"input_post_{kind}_ms")))
    s = res.get("scale")
    if s:
        n, h, c = s["agents"], s["hosts"], s["concurrency"]
        rows += [
            (
                f"{n} agents on {h} hosts, {c} at a time: spawn all, wall s",
                f"{s['spawn_all_wall_s']} ({s['spawned']}/{n} up)",
            ),
            ("... each spawn, median / p90 ms", mp_of(s.get("spawn_each_ms"))),
            (
                f"... one turn each ({c} inputs at a time) until all completed, wall s",
                f"{s['one_turn_each_wall_s']} ({s['turns_completed']}/{s['spawned']} completed)",
            ),
            ("... each turn input → completed, median / p90 ms", mp_of(s.get("turn_each_completed_ms"))),
            (
                f"... all idle {s['idle_seconds']} s: cao-server CPU % of one core",
                f"{s['idle_server_cpu_percent_of_one_core']}",
            ),
            (
                f"... its {s['idle_ssh_masters']} ssh masters, CPU % of one core",
                f"{s['idle_ssh_masters_cpu_percent_of_one_core']}",
            ),
            ("... cao-server RSS MB", f"{s['server_rss_mb']}"),
        ]
    return rows


def mp_of(v: dict | None) -> str:
    return f"{v['median']:.1f} / {v['p90']:.1f}" if v else "n/a"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spawns", type=int, help="spawns measured per kind, after one warm-up (10; quick 3)")
    ap.add_argument("--turns", type=int, help="turns measured per kind, after one warm-up (20; quick 3)")
    ap.add_argument("--agents", type=int, help="agents in the scale measure, 0 skips it (100; quick 10)")
    ap.add_argument("--hosts", type=int, help="simulated hosts (logins) for the scale measure (4; quick 2)")
    ap.add_argument("--concurrency", type=int, default=8, help="spawns / inputs in flight at once")
    ap.add_argument("--idle-seconds", type=float, help="idle CPU window (10; quick 5)")
    ap.add_argument("--think-ms", type=int, default=300, help="think time of the agents for input → processing")
    ap.add_argument("--quick", action="store_true", help="smaller defaults: 3 spawns, 3 turns, 10 agents on 2 hosts")
    ap.add_argument("--json", metavar="PATH", help="write the raw figures here")
    ap.add_argument("--keep-log", action="store_true", help="keep a copy of the server log even on success")
    ap.add_argument("--log-level", default="info", help="cao-server's CAO_LOG_LEVEL")
    args = ap.parse_args()
    defaults = QUICK if args.quick else FULL
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.hosts < 1 or args.spawns < 1 or args.turns < 1 or args.concurrency < 1:
        refuse("--hosts, --spawns, --turns and --concurrency must be at least 1")
    preflight()

    results: dict = {"machine": machine(), "args": vars(args)}
    bench = Bench(args)
    t_start = time.perf_counter()
    try:
        bench.start()
        assert bench.sshd is not None and bench.server is not None and bench.server.proc is not None
        log(f"sshd on 127.0.0.1:{bench.sshd.port}, {args.hosts} host logins, server pid {bench.server.proc.pid}")
        results.update(bench.latencies())
        if args.agents:
            results["scale"] = bench.scale()
    except BaseException:
        bench.failed = True
        raise
    finally:
        bench.close()
    results["total_seconds"] = round(time.perf_counter() - t_start, 1)
    rows = table(results, args)
    width = max(len(r[0]) for r in rows)
    for label, shown in rows:
        print(f"{label:<{width}}  {shown}")
    print(f"(whole run {results['total_seconds']} s)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 1 if bench.failed else 0


if __name__ == "__main__":
    sys.exit(main())
