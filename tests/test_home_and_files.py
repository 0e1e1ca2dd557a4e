"""The cao home is private, and so is everything in it (issue 24, "Trust, round two"):

- `<home>/.env` writers are serialised and atomic: concurrent `cao env set`s lose no name, and a
  reader during rewrites never sees a name missing;
- a home that exists must be the user's own and closed to others, or cao refuses it (no chmod);
- the socket directory of a home too long for socket paths is private and unguessable
  (XDG_RUNTIME_DIR, else mkdtemp recorded in the home): a stranger cannot take it first;
- every file under the home is 0600 and every directory 0700;
- `cao install URL` has one deadline for the whole fetch.

Real parts: the `cao` CLI and cao-server as subprocesses, real files, a real second user
(`cao-stranger`, stranger_support.py) and a real HTTP server that drips its answer.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cao_support import CAO, REPO, CaoServer, cli
from stranger_support import Stranger

from cli_agent_orchestrator.profiles.env_file import read_env_values
from cli_agent_orchestrator.runtime_dir import MAX_SOCKET_PATH, RECORD_NAME, SOCKET_NAME_ROOM, socket_dir


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAO_") and k != "TMUX"}
    return {**env, "CAO_HOME_DIR": str(home), **extra}


def cao(home: Path, *args: str, stdin: str | None = None, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CAO, *args],
        env=cli_env(home, **extra),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# --- 1. <home>/.env: serialised, atomic writes ----------------------------------------------------
def test_twenty_concurrent_env_sets_keep_every_name(tmp_path: Path):
    home = tmp_path / "home"
    procs = [
        subprocess.Popen(
            [CAO, "env", "set", f"K{i}", f"v{i}"],
            env=cli_env(home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(20)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert read_env_values(home) == {f"K{i}": f"v{i}" for i in range(20)}
    assert mode_of(home) == 0o700 and mode_of(home / ".env") == 0o600 and mode_of(home / ".env.lock") == 0o600
    assert not list(home.glob(".*.tmp")), "a temp file was left behind"


# A writer process: the same function `cao env set` calls, N times (a process per rewrite
# would take minutes; the lock and the rename are what is tested, not the CLI's start-up).
REWRITER = r"""
import sys
from pathlib import Path
from cli_agent_orchestrator.profiles.env_file import set_env_value, unset_env_value
home, count = Path(sys.argv[1]), int(sys.argv[2])
print("started", flush=True)
for i in range(count):
    set_env_value(home, "CHURN", "x" * (i % 50))
    if i % 3 == 0:
        unset_env_value(home, "CHURN")
"""


def test_a_reader_never_sees_a_name_missing_while_the_file_is_rewritten(tmp_path: Path):
    home = tmp_path / "home"
    before = {f"KEEP{i}": f"value-{i}-" + "y" * 200 for i in range(30)}  # a file of some kilobytes
    home.mkdir(mode=0o700)
    (home / ".env").write_text("".join(f"{key}={value}\n" for key, value in before.items()))
    writer = subprocess.Popen(
        [sys.executable, "-c", REWRITER, str(home), "200"], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "started"
        reads, torn = 0, []
        while writer.poll() is None:
            seen = read_env_values(home)
            reads += 1
            missing = sorted(set(before) - set(seen))
            if missing or any(seen[k] != v for k, v in before.items() if k in seen):
                torn.append(len(missing))
    finally:
        writer.wait(60)
    assert writer.returncode == 0
    assert reads > 20, f"only {reads} reads overlapped the rewrites"
    assert torn == [], f"{len(torn)} of {reads} reads saw names missing or changed (missing: {torn[:5]}…)"
    assert {k: v for k, v in read_env_values(home).items() if k != "CHURN"} == before


# --- 3. the home must be the user's own ----------------------------------------------------------
def server_exit(home: Path) -> subprocess.CompletedProcess:
    """cao-server started on `home`, expected to refuse it at once (a timeout fails the test)."""
    env = cli_env(home, CAO_API_PORT="1", TMUX_TMPDIR=str(home.parent))
    return subprocess.run(
        [sys.executable, "-m", "cli_agent_orchestrator.cli.server"], env=env, capture_output=True, text=True, timeout=60
    )


def test_a_home_open_to_others_is_refused_and_left_as_it_was(tmp_path: Path):
    home = tmp_path / "shared"
    home.mkdir()
    os.chmod(home, 0o755)
    started = server_exit(home)
    lines = started.stderr.strip().splitlines()
    assert started.returncode == 1 and len(lines) == 1, started.stderr
    message = lines[0]
    owner = pwd.getpwuid(os.getuid()).pw_name
    assert str(home) in message and f"owner {owner}" in message and "mode 0755" in message, message
    assert f"chmod 700 {home}" in message and "CAO_HOME_DIR" in message, message
    for args in (["env", "set", "K", "v"], ["init"], ["install", "developer", "--provider", "mock_cli"]):
        refused = cao(home, *args)
        assert refused.returncode == 1 and f"cao home {home}" in refused.stderr, (args, refused.stderr)
        assert "Traceback" not in refused.stderr
    assert mode_of(home) == 0o755 and list(home.iterdir()) == []  # not chmodded, nothing written

    os.chmod(home, 0o700)  # what the message says to do
    assert cao(home, "env", "set", "K", "v").returncode == 0


def test_a_missing_home_is_created_private_with_its_parents(tmp_path: Path):
    home = tmp_path / "not" / "yet" / "home"
    assert cao(home, "env", "set", "K", "v").returncode == 0
    assert mode_of(home) == 0o700 and mode_of(home / ".env") == 0o600
    made = tmp_path / "by-init"
    assert cao(made, "init").returncode == 0
    assert all(mode_of(p) == 0o700 for p in [made, *made.rglob("*")] if p.is_dir())


def test_another_users_home_is_refused_directly_or_through_a_symlink(tmp_path: Path, stranger: Stranger):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, stranger.uid, stranger.gid)
    link = tmp_path / "link-to-theirs"
    link.symlink_to(theirs)
    for home in (theirs, link):
        started = server_exit(home)
        message = started.stderr.strip()
        assert started.returncode == 1 and "\n" not in message, message
        assert str(theirs) in message and "owner cao-stranger" in message and "another user" in message, message
        assert "chmod" not in message and "CAO_HOME_DIR" in message, message
        refused = cao(home, "env", "set", "K", "v")
        assert refused.returncode == 1 and "another user" in refused.stderr, refused.stderr
    assert os.stat(theirs).st_uid == stranger.uid and mode_of(theirs) == 0o700 and list(theirs.iterdir()) == []


# --- 2. the socket directory of a long home -------------------------------------------------------
def long_home(tmp_path: Path) -> Path:
    home = tmp_path / ("a-home-whose-path-leaves-no-room-for-a-socket-name-" + "x" * 20)
    assert len(str(home / "tmp" / "ssh")) + 1 + SOCKET_NAME_ROOM > MAX_SOCKET_PATH
    return home


def short_tmux_dir(tmp_path: Path) -> dict[str, str]:
    """TMUX_TMPDIR outside the long home: tmux's own socket path must fit too."""
    (tmp_path / "t").mkdir(mode=0o700, exist_ok=True)
    return {"TMUX_TMPDIR": str(tmp_path / "t")}


def old_predictable_dir(home: Path) -> Path:
    """The name cao used before: /tmp/cao-ssh-<uid>-<hash of home/tmp>."""
    digest = hashlib.sha256(str(home.resolve() / "tmp").encode()).hexdigest()[:8]
    return Path("/tmp") / f"cao-ssh-{os.getuid()}-{digest}"


def as_stranger_mkdir(stranger: Stranger, path: Path) -> None:
    made = subprocess.run(
        stranger.argv("import os, sys; os.mkdir(sys.argv[1], 0o755)", str(path)), capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    assert os.lstat(path).st_uid == stranger.uid


def recorded_dir(home: Path) -> Path:
    record = home / "tmp" / RECORD_NAME
    assert mode_of(record) == 0o600
    return Path(record.read_text().strip())


def assert_private_socket_dir(directory: Path, home: Path) -> None:
    info = os.lstat(directory)
    assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700
    assert directory.parent == Path("/tmp") and directory != old_predictable_dir(home)
    assert stat.S_ISSOCK(os.lstat(directory / "api.sock").st_mode)


@pytest.fixture
def tmp_dirs_made() -> Iterator[list[Path]]:
    """Directories a test's servers made in /tmp: removed at the end (they are ours)."""
    made: list[Path] = []
    yield made
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def test_a_stranger_cannot_take_the_socket_dir_of_a_long_home(
    tmp_path: Path, stranger: Stranger, tmp_dirs_made: list[Path]
):
    home = long_home(tmp_path)
    squatted = old_predictable_dir(home)
    tmp_dirs_made.append(squatted)
    as_stranger_mkdir(stranger, squatted)
    server = CaoServer(home, {"XDG_RUNTIME_DIR": "", **short_tmux_dir(tmp_path)})
    try:
        server.start()  # before: "… is not a directory of this user's; remove it", and no server
        first = recorded_dir(home)
        tmp_dirs_made.append(first)
        assert_private_socket_dir(first, home)
        assert os.lstat(squatted).st_uid == stranger.uid  # left alone

        # The recorded directory vanished (a /tmp cleaner) and a stranger made one of that name:
        # the next start makes and records a new one instead.
        server.stop()
        shutil.rmtree(first)
        as_stranger_mkdir(stranger, first)
        server.start()
        second = recorded_dir(home)
        tmp_dirs_made.append(second)
        assert second != first
        assert_private_socket_dir(second, home)
        # Every use checks again and finds the same directory.
        assert socket_dir(home / "tmp", environ={}) == second
    finally:
        server.cleanup()


def test_a_private_xdg_runtime_dir_holds_the_sockets_of_a_long_home(tmp_path: Path, tmp_dirs_made: list[Path]):
    runtime = Path(tempfile.mkdtemp(prefix="xdg-"))  # 0700, short like /run/user/<uid>
    tmp_dirs_made.append(runtime)
    home = long_home(tmp_path)
    server = CaoServer(home, {"XDG_RUNTIME_DIR": str(runtime), **short_tmux_dir(tmp_path)})
    try:
        server.start()
        [sockets] = list(runtime.iterdir())
        assert sockets.name == "cao-" + hashlib.sha256(str(home.resolve() / "tmp").encode()).hexdigest()[:8]
        assert mode_of(sockets) == 0o700 and stat.S_ISSOCK(os.lstat(sockets / "api.sock").st_mode)
        assert not (home / "tmp" / RECORD_NAME).exists()  # no /tmp directory was needed
    finally:
        server.cleanup()


def test_an_xdg_runtime_dir_that_is_not_private_is_passed_over(
    tmp_path: Path, stranger: Stranger, tmp_dirs_made: list[Path]
):
    open_to_all = tmp_path / "run-open"
    open_to_all.mkdir()
    os.chmod(open_to_all, 0o755)
    theirs = tmp_path / "run-theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, stranger.uid, stranger.gid)
    home = long_home(tmp_path)
    (home / "tmp").mkdir(parents=True, mode=0o700)
    for runtime in (open_to_all, theirs):
        chosen = socket_dir(home / "tmp", environ={"XDG_RUNTIME_DIR": str(runtime)})
        tmp_dirs_made.append(chosen)
        assert chosen.parent == Path("/tmp") and chosen == recorded_dir(home) and mode_of(chosen) == 0o700
        assert list(runtime.iterdir()) == []


# --- 4. 0600 files in 0700 directories ------------------------------------------------------------
# Skipped in the walk, not being cao's: the harness's own output file and the tmux directory it
# puts in the home (TMUX_TMPDIR), where tmux makes its socket 0770 inside a 0700 directory.
# Sockets and FIFOs of cao's are held to 0600 like files (api.sock, hooks.fifo).
HARNESS = {"server.out", "tmux"}
WORKFLOW = (
    "from cao_workflow import run_step, emit_output\nemit_output({'a': run_step('mock_cli', 'reviewer', 'x').output})\n"
)
FLOW_FILE = '---\nname: by-path\nschedule: "0 0 1 1 *"\nagent_profile: developer\nprovider: mock_cli\n---\nhi\n'


def test_everything_under_the_home_is_0600_in_0700_directories(cao_factory, tmp_path: Path):
    server = cao_factory().start()
    api = server.client
    fields = {"name": "by-fields", "schedule": "0 0 1 1 *", "agent_profile": "developer", "provider": "mock_cli"}
    assert api.post("/flows", json={**fields, "prompt_template": "hello"}).status_code == 201
    assert api.post("/flows/by-fields/run", params={"wait": "true"}, timeout=120).json()["run"]["state"] == "completed"
    (tmp_path / "by-path.flow.md").write_text(FLOW_FILE)
    added = cli(server, "flow", "add", str(tmp_path / "by-path.flow.md"))
    assert added.returncode == 0, added.stderr
    # A workflow file is the user's (cao never writes one); it is written as cao would.
    fd = os.open(server.home / "workflows" / "walk.py", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, WORKFLOW.encode())
    os.close(fd)
    run = api.post("/workflows/runs", json={"name_or_path": "walk", "inputs": {}}, timeout=120)
    assert run.status_code == 200 and run.json()["state"] == "completed", run.text
    installed = api.post("/agents/profiles/install", json={"source": "reviewer", "env_vars": {"A": "1"}})
    assert installed.status_code == 200, installed.text
    for args in (["install", "developer", "--provider", "kiro_cli", "--env", "B=2"], ["env", "set", "C", "3"]):
        done = cli(server, *args)
        assert done.returncode == 0, done.stderr

    wrong = []
    for path in sorted(server.home.rglob("*")):
        relative = path.relative_to(server.home)
        if relative.parts[0] in HARNESS:
            continue
        info = os.lstat(path)
        want = 0o700 if stat.S_ISDIR(info.st_mode) else 0o600
        if stat.S_IMODE(info.st_mode) != want or info.st_uid != os.getuid():
            wrong.append(f"{relative} {stat.filemode(info.st_mode)}")
    assert wrong == [], wrong
    seen = {str(p.relative_to(server.home)) for p in server.home.rglob("*")}
    for expected in ("flows/by-fields.flow.md", "agent-store/developer.md", "agent-store/reviewer.md", ".env"):
        assert expected in seen, f"{expected} missing: the walk would not have covered it"
    # The hosts' API socket is in the home's socket directory: tmp/ssh, or (a home whose path is
    # too long for a socket path, as pytest's numbered temporary directories can make it) the
    # private runtime directory the home records. Private either way.
    sockets = socket_dir(server.home / "tmp", server.env)
    assert (sockets / "api.sock").is_socket() and mode_of(sockets / "api.sock") == 0o600
    assert mode_of(sockets) == 0o700 and os.lstat(sockets).st_uid == os.getuid()
    assert mode_of(server.home) == 0o700


# --- 5. one deadline for `cao install URL` -------------------------------------------------------
class _Dripping(http.server.BaseHTTPRequestHandler):
    """Answers with a valid profile, one byte a second: each read is prompt, the whole is not."""

    protocol_version = "HTTP/1.1"
    stop = threading.Event()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b"---\nname: dripped\n---\n" + b"x" * 500
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        for byte in body:
            if self.stop.wait(1.0):
                return
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:
                return

    def log_message(self, *args: object) -> None:
        pass


def test_a_url_install_that_drips_stops_at_the_deadline_and_installs_nothing(tmp_path: Path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Dripping)
    _Dripping.stop.clear()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    home = tmp_path / "home"
    url = f"http://127.0.0.1:{server.server_address[1]}/dripped.md"
    try:
        started = time.monotonic()
        proc = cao(
            home,
            "install",
            url,
            "--provider",
            "mock_cli",
            CAO_PROFILE_ALLOWED_HOSTS="127.0.0.1",
            CAO_PROFILE_FETCH_TIMEOUT="3",
        )
        took = time.monotonic() - started
    finally:
        _Dripping.stop.set()
        server.shutdown()
        server.server_close()
    assert proc.returncode == 1, proc.stderr
    assert f"fetching {url} took longer than 3 s" in proc.stderr and "CAO_PROFILE_FETCH_TIMEOUT" in proc.stderr
    assert took < 3 + 10, f"the install ran {took:.1f} s"  # the deadline plus the CLI's start-up
    assert not (home / "agent-store" / "dripped.md").exists()
