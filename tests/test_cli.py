"""The `cao` console script end to end: a real cao-server, real tmux, the mock agent."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from cao_support import CAO, CaoServer, cli, free_port, wait_until


def run(
    server: CaoServer, *args: str, stdin: str | None = None, cwd: Path | None = None, timeout: float = 60, **env: str
) -> subprocess.CompletedProcess:
    # stdin is never the test runner's terminal: launch's confirmation must see "not a TTY".
    return cli(server, *args, input=stdin, env=env, timeout=timeout, cwd=cwd)


def ok(server: CaoServer, *args: str, **kwargs) -> str:
    proc = run(server, *args, **kwargs)
    assert proc.returncode == 0, f"cao {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def launch_headless(server: CaoServer, *extra: str) -> dict:
    return json.loads(
        ok(
            server,
            "launch",
            "--agents",
            "developer",
            "--provider",
            "mock_cli",
            "--headless",
            "--yolo",
            "--json",
            *extra,
        )
    )


def last_output(server: CaoServer, terminal_id: str) -> str | None:
    resp = server.client.get(f"/terminals/{terminal_id}/output", params={"mode": "last"})
    return resp.json()["output"] if resp.status_code == 200 else None


def test_version():
    out = subprocess.run([CAO, "-V"], capture_output=True, text=True, check=True).stdout
    assert "0.1.0" in out


def test_launch_headless_then_inspect_sessions_and_terminals(cao: CaoServer, tmp_path: Path):
    out = ok(
        cao,
        "launch",
        "--agents",
        "developer",
        "--provider",
        "mock_cli",
        "--headless",
        "--yolo",
        "--session-name",
        "demo",
        "hello",
        cwd=tmp_path,
    )
    assert "MOCK: hello" in out.splitlines()
    assert "cao-demo" in out
    (term,) = cao.client.get("/terminals").json()
    tid = term["id"]
    assert term["working_directory"] == str(tmp_path.resolve())
    assert tid in out

    sessions = json.loads(ok(cao, "session", "list", "--json"))
    assert [s["name"] for s in sessions] == ["cao-demo"]
    table = ok(cao, "session", "list").splitlines()
    assert table[0].split()[:3] == ["NAME", "STATUS", "TERMINALS"]
    assert table[1].split()[0] == "cao-demo" and "developer" in table[1]

    detail = json.loads(ok(cao, "session", "get", "demo", "--json"))
    assert detail["session"]["name"] == "cao-demo" and [t["id"] for t in detail["terminals"]] == [tid]
    shown = ok(cao, "session", "status", "cao-demo")
    assert "cao-demo" in shown and tid in shown and "completed" in shown

    assert tid in ok(cao, "terminal", "list")
    assert json.loads(ok(cao, "terminal", "status", tid, "--json"))["status"] == "completed"
    status_text = ok(cao, "terminal", "status", tid)
    assert "completed" in status_text and "mock_cli" in status_text
    assert ok(cao, "terminal", "output", tid, "--mode", "last").strip() == "MOCK: hello"
    assert "❯ hello" in ok(cao, "terminal", "output", tid)

    assert "turn" in ok(cao, "terminal", "send", tid, "second message")
    wait_until(lambda: last_output(cao, tid) == "MOCK: second message", message="reply to send")
    ok(cao, "terminal", "send", tid, "-", stdin="from stdin\n")
    wait_until(lambda: last_output(cao, tid) == "MOCK: from stdin", message="reply to send -")

    # A key reaches the agent: type text into its composer, then submit it with Enter.
    ok(cao, "terminal", "key", tid, "x")
    wait_until(
        lambda: "❯ x" in cao.client.get(f"/terminals/{tid}/output").json()["output"],
        message="typed key in the composer",
    )
    ok(cao, "terminal", "key", tid, "Enter")
    wait_until(lambda: last_output(cao, tid) == "MOCK: x", message="reply after Enter key")
    bad_key = run(cao, "terminal", "key", tid, "NoSuchKey")
    assert bad_key.returncode == 1 and "Error: invalid key" in bad_key.stderr


def test_delete_then_restore_creates_restored_window(cao: CaoServer):
    term = launch_headless(cao)
    tid, session = term["id"], term["session_name"]
    assert f"Deleted terminal {tid}" in ok(cao, "terminal", "delete", tid)
    gone = run(cao, "terminal", "status", tid)
    assert gone.returncode == 1 and f"Error: terminal {tid} not found" in gone.stderr

    out = ok(cao, "terminal", "restore", tid)
    socket = cao.client.get("/health").json()["tmux_socket"]
    assert f"tmux -L {socket} attach-session -t {session}" in out
    windows = cao.tmux("list-windows", "-a", "-F", "#{session_name} #{window_name}").stdout.splitlines()
    assert any(line.startswith(f"{session} restored-") for line in windows), windows


def test_shutdown_one_session_then_all(cao: CaoServer):
    first = launch_headless(cao, "--session-name", "one")
    launch_headless(cao, "--session-name", "two")
    launch_headless(cao, "--session-name", "three")
    assert "Deleted session cao-one" in ok(cao, "shutdown", "--session", "one")
    assert sorted(s["name"] for s in cao.client.get("/sessions").json()) == ["cao-three", "cao-two"]
    assert cao.client.get(f"/terminals/{first['id']}").status_code == 404

    out = ok(cao, "shutdown", "--all")
    assert "cao-two" in out and "cao-three" in out
    assert cao.client.get("/sessions").json() == []
    assert ok(cao, "session", "list").strip() == "No sessions."
    assert run(cao, "shutdown").returncode == 2  # neither --session nor --all: usage error


def test_init_creates_home_layout(cao: CaoServer, tmp_path: Path):
    home = tmp_path / "fresh-home"
    out = ok(cao, "init", CAO_HOME_DIR=str(home))
    assert str(home) in out
    for sub in ("db", "agent-store", "logs/terminal", "tmp", "workflows"):
        assert (home / sub).is_dir(), sub


def test_install_local_profile_then_launch_it(cao: CaoServer, tmp_path: Path):
    source = tmp_path / "my-profile.md"
    source.write_text(
        "---\nname: tester\ndescription: A test profile\nprovider: mock_cli\n---\nYou test things.\n", encoding="utf-8"
    )
    out = ok(cao, "install", str(source))
    installed = cao.home / "agent-store" / "tester.md"
    assert str(installed) in out and installed.read_text(encoding="utf-8") == source.read_text(encoding="utf-8")

    # No --provider: the installed profile's own provider (mock_cli) is used.
    out = ok(cao, "launch", "--agents", "tester", "--headless", "--yolo", "hi there")
    assert "MOCK: hi there" in out.splitlines()
    (term,) = cao.client.get("/terminals").json()
    assert term["agent_profile"] == "tester" and term["provider"] == "mock_cli"

    # reviewer names no provider, so it is installed for kiro_cli: its agent JSON goes to CAO_AGENTS_DIR.
    assert ok(cao, "install", "reviewer", CAO_AGENTS_DIR=str(tmp_path / "kiro-agents"))
    assert (cao.home / "agent-store" / "reviewer.md").is_file()
    assert (tmp_path / "kiro-agents" / "reviewer.json").is_file()
    bad_name = tmp_path / "bad.md"
    bad_name.write_text("---\nname: ../evil\n---\nx\n", encoding="utf-8")
    refused = run(cao, "install", str(bad_name))
    assert refused.returncode == 1 and "invalid profile name" in refused.stderr
    bad_yaml = tmp_path / "broken.md"
    bad_yaml.write_text("---\nname: [unclosed\n---\nx\n", encoding="utf-8")
    refused = run(cao, "install", str(bad_yaml))
    assert refused.returncode == 1 and "invalid YAML" in refused.stderr
    missing = run(cao, "install", "no-such-profile")
    assert missing.returncode == 1 and "neither a profile file nor a built-in" in missing.stderr


def test_errors_are_one_line_with_exit_code_1(cao: CaoServer):
    unknown = run(cao, "terminal", "status", "deadbeef")
    assert unknown.returncode == 1 and unknown.stderr.strip() == "Error: terminal deadbeef not found"
    invalid = run(cao, "terminal", "output", "../sessions")
    assert invalid.returncode == 1 and "invalid terminal id" in invalid.stderr
    no_session = run(cao, "session", "get", "nope")
    assert no_session.returncode == 1 and "Error: session 'cao-nope' not found" in no_session.stderr

    port = str(free_port())
    down = run(cao, "session", "list", CAO_API_PORT=port)
    assert down.returncode == 1
    assert f"cao-server is not running at http://127.0.0.1:{port} (start it with `cao-server`)" in down.stderr
    assert "Traceback" not in down.stderr

    refused = run(cao, "launch", "--agents", "developer", "--provider", "mock_cli", "--headless")
    assert refused.returncode == 1 and "--yolo" in refused.stderr
    assert cao.client.get("/sessions").json() == []

    failed = run(
        cao, "launch", "--agents", "developer", "--provider", "mock_cli", "--headless", "--yolo", "__mock_error__"
    )
    assert failed.returncode == 1 and "reported an error" in failed.stderr


def test_info_shows_server_home_and_current_terminal(cao: CaoServer):
    term = launch_headless(cao)
    data = json.loads(ok(cao, "info", "--json", CAO_TERMINAL_ID=term["id"]))
    health = cao.client.get("/health").json()
    assert data["server_url"] == cao.url and data["server"]["status"] == "ok"
    assert data["tmux_socket"] == health["tmux_socket"]
    assert data["db_path"] == str(cao.home.resolve() / "db" / "cli-agent-orchestrator.db")
    assert data["terminal"]["id"] == term["id"]
    text = ok(cao, "info", CAO_TERMINAL_ID=term["id"])
    assert health["tmux_socket"] in text and term["id"] in text and term["session_name"] in text

    down = run(cao, "info", CAO_API_PORT=str(free_port()))
    assert down.returncode == 0 and "cao-server is not running" in down.stdout


def _drive_pty(
    argv: list[str], env: dict[str, str], answer: bytes, until: Callable[[], bool], timeout: float = 20
) -> tuple[int, bytes, bool]:
    """Run argv on a pseudo-terminal and answer the [y/N] prompt.

    Ends when the program exits or, once answered, as soon as until() holds (the
    program is then killed); returns (wait status, everything shown, until() held).
    """
    pid, fd = pty.fork()
    if pid == 0:  # child: become cao
        os.execve(argv[0], argv, env)
    seen, answered, reached = b"", False, False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.05)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # EIO: the child closed the pty
                    break
                if not chunk:
                    break
                seen += chunk
            if not answered and b"[y/N]" in seen:
                os.write(fd, answer)
                answered = True
            if answered and until():
                reached = True
                os.kill(pid, 9)
                break
        else:
            os.kill(pid, 9)
            raise AssertionError(f"pty run timed out; saw {seen[-2000:]!r}")
        _, status = os.waitpid(pid, 0)
        return status, seen, reached
    finally:
        os.close(fd)


def test_launch_asks_for_trust_on_a_tty_then_attaches(cao: CaoServer, tmp_path: Path):
    env = {**cao.env, "TERM": "xterm"}
    argv = [
        CAO,
        "launch",
        "--agents",
        "developer",
        "--provider",
        "mock_cli",
        "--session-name",
        "tty",
        "--working-directory",
        str(tmp_path),
    ]
    status, seen, _ = _drive_pty(argv, env, b"n\r", until=lambda: False)
    assert os.waitstatus_to_exitcode(status) == 1
    assert b"Trust this workspace and launch?" in seen and str(tmp_path).encode() in seen
    assert b"mock_cli" in seen and b"Not launched." in seen
    assert cao.client.get("/sessions").json() == []

    def attached() -> bool:
        return "cao-tty" in cao.tmux("list-clients", "-F", "#{client_session}").stdout.split()

    _, seen, reached = _drive_pty(argv, env, b"y\r", until=attached)
    assert reached, seen[-2000:]
