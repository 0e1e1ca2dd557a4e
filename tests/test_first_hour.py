"""The first hour of a new user, end to end (issue 11 part 7): the README's commands, the
attach command printed where it is needed, `--json` everywhere, and `cao workflow` verbs that
take the same names and tell the cause of a failure first. Real cao-server, real tmux."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cao_support import CAO, REPO, CaoServer, cli, free_port, wait_until

OK_SCRIPT = """from cao_workflow import run_step, emit_output
h = run_step("mock_cli", "reviewer", "review part 1")
emit_output({"out": h.output})
"""
RAISING_SCRIPT = """from cao_workflow import run_step
run_step("mock_cli", "reviewer", "before the crash")
raise ValueError("the input file has no header")
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = CaoServer(tmp_path_factory.mktemp("firsthour") / "home").start()
    specs = srv.home / "workflows"
    specs.mkdir(exist_ok=True)
    (specs / "ok.py").write_text(OK_SCRIPT, encoding="utf-8")
    (specs / "raising.py").write_text(RAISING_SCRIPT, encoding="utf-8")
    try:
        yield srv
    finally:
        srv.cleanup()


def cao(server: CaoServer, *args: str, timeout: float = 90, **env: str) -> subprocess.CompletedProcess:
    """`cao ARGS` with stdin and stdout not a terminal."""
    return cli(server, *args, env=env, timeout=timeout)


def ok(server: CaoServer, *args: str, **env: str) -> str:
    proc = cao(server, *args, **env)
    assert proc.returncode == 0, f"cao {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def fails(server: CaoServer, *args: str, **env: str) -> subprocess.CompletedProcess:
    proc = cao(server, *args, **env)
    assert proc.returncode == 1, f"cao {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def launch_headless(server: CaoServer) -> dict:
    return json.loads(
        ok(server, "launch", "--agents", "developer", "--provider", "mock_cli", "--headless", "--yolo", "--json")
    )


def read_pty(master: int, seen: bytearray, until: bytes, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while until not in seen:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {until!r}; saw {bytes(seen[-3000:])!r}")
        if select.select([master], [], [], 0.1)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                raise AssertionError(f"the process closed the terminal before {until!r}; saw {bytes(seen[-3000:])!r}")
            seen += chunk


# 1 -------------------------------------------------------------------------------------------
def test_readme_says_how_to_get_cao_on_the_path_next_to_its_first_commands():
    top = (REPO / "README.md").read_text(encoding="utf-8").split("## Using it")[0]
    assert ". .venv/bin/activate" in top and ".venv/bin/cao" in top
    assert (REPO / ".venv" / "bin" / "cao").exists() and (REPO / ".venv" / "bin" / "cao-server").exists()


# 2 -------------------------------------------------------------------------------------------
def test_demo_on_a_terminal_keeps_the_printed_tmux_session_until_enter(tmp_path: Path):
    tmux_dir = tmp_path / "tmux"
    tmux_dir.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if k != "TMUX"},
        "CAO_DEMO_DIR": str(tmp_path / "demo"),
        "CAO_API_PORT": str(free_port()),
        "TMUX_TMPDIR": str(tmux_dir),
        "CAO_DEMO_DELAY_MS": "20",
    }
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        ["bash", str(REPO / "scripts" / "demo.sh")],
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    seen = bytearray()
    socket = None
    try:
        read_pty(master, seen, b"press Enter", timeout=180)
        text = seen.decode(errors="replace")
        assert "FINAL REPORT" in text
        match = re.search(r"tmux -L (\S+) attach -t (\S+)\s*$", text.split("press Enter")[1].splitlines()[0])
        assert match, text[-2000:]
        socket, session = match.groups()
        # The run is over, and the command just printed still attaches to a live session.
        alive = subprocess.run(["tmux", "-L", socket, "has-session", "-t", session], env=env, capture_output=True)
        assert alive.returncode == 0, alive.stderr
        os.write(master, b"\n")
        assert proc.wait(30) == 0
        gone = subprocess.run(["tmux", "-L", socket, "has-session", "-t", session], env=env, capture_output=True)
        assert gone.returncode != 0
    finally:
        os.close(master)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the demo's own process group: it and its cao-server
            proc.wait(10)
        if socket:
            subprocess.run(["tmux", "-L", socket, "kill-server"], env=env, capture_output=True)


# 3 -------------------------------------------------------------------------------------------
def test_info_and_headless_launch_print_the_attach_command(server: CaoServer):
    socket = server.client.get("/health").json()["tmux_socket"]
    info = ok(server, "info")
    assert f"tmux -L {socket} attach-session -t SESSION" in info and "cao attach SESSION|TERMINAL" in info
    out = ok(server, "launch", "--agents", "developer", "--provider", "mock_cli", "--headless", "--yolo")
    session = re.search(r"Session:\s+(\S+)", out).group(1)
    assert f"tmux -L {socket} attach-session -t ={session}" in out
    term = server.client.get(f"/sessions/{session}").json()["terminals"][0]
    inside = json.loads(ok(server, "info", "--json", CAO_TERMINAL_ID=term["id"]))
    assert inside["attach"] == (
        f"tmux -L {socket} attach-session -t ={session} ';' select-window -t ={session}:={term['name']}"
    )
    ok(server, "session", "delete", session)


def test_attach_refuses_without_a_terminal_and_names_unknown_targets(server: CaoServer):
    term = launch_headless(server)
    socket = server.client.get("/health").json()["tmux_socket"]
    refused = fails(server, "attach", term["session_name"])
    assert refused.stdout.strip() == f"tmux -L {socket} attach-session -t ={term['session_name']}"
    assert "stdin is not a terminal" in refused.stderr
    unknown = fails(server, "attach", "nope")
    assert "no session or terminal 'nope'" in unknown.stderr and unknown.stdout == ""
    ok(server, "session", "delete", term["session_name"])


def test_attach_to_a_terminal_shows_its_window_on_the_homes_tmux(server: CaoServer):
    first = launch_headless(server)
    session = first["session_name"]
    second = server.client.post(
        f"/sessions/{session}/terminals", params={"agent_profile": "reviewer", "provider": "mock_cli"}
    ).json()
    server.tmux("select-window", "-t", f"={session}:={second['name']}")  # attach must switch back
    master, slave = pty.openpty()
    proc = subprocess.Popen([CAO, "attach", first["id"]], env=server.env, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    try:

        def client_window() -> str:
            select.select([master], [], [], 0.05) and os.read(master, 65536)
            return server.tmux("list-clients", "-t", session, "-F", "#{window_name}").stdout.strip()

        assert wait_until(client_window, timeout=15, message="a tmux client") == first["name"]
        server.tmux("detach-client", "-s", session)
        assert proc.wait(15) == 0
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        ok(server, "session", "delete", session)


# 4 -------------------------------------------------------------------------------------------
def test_json_on_terminal_session_and_shutdown_commands(server: CaoServer):
    term = launch_headless(server)
    tid = term["id"]
    assert json.loads(ok(server, "terminal", "send", tid, "hello", "--json"))["success"] is True
    server.wait_status(tid, "completed", timeout=20)
    assert json.loads(ok(server, "terminal", "output", tid, "--mode", "last", "--json")) == {
        "output": "MOCK: hello",
        "mode": "last",
    }
    assert json.loads(ok(server, "terminal", "key", tid, "Enter", "--json")) == {"success": True}
    assert json.loads(ok(server, "terminal", "delete", tid, "--json")) == {"success": True}
    second = launch_headless(server)
    deleted = json.loads(ok(server, "session", "delete", second["session_name"], "--json"))
    assert deleted["deleted"] == [second["session_name"]] and deleted["errors"] == []
    third = launch_headless(server)
    shut = json.loads(ok(server, "shutdown", "--all", "--json"))
    assert [(a["session"], a["deleted"]) for a in shut] == [(third["session_name"], [third["session_name"]])]
    assert json.loads(ok(server, "shutdown", "--all", "--json")) == []


# 5 -------------------------------------------------------------------------------------------
def test_launch_to_attach_without_a_terminal_refuses_before_creating_anything(server: CaoServer):
    before = server.client.get("/sessions").json()
    refused = fails(server, "launch", "--agents", "developer", "--provider", "mock_cli", "--yolo")
    assert "stdin is not a terminal" in refused.stderr and "--headless" in refused.stderr
    assert server.client.get("/sessions").json() == before


# 6 -------------------------------------------------------------------------------------------
def test_workflow_run_into_a_pipe_follows_to_the_end(server: CaoServer):
    out = ok(server, "workflow", "run", "ok")
    assert "[step.started] call-1 attempt 1" in out and "[run.completed]" in out
    assert "MOCK: review part 1" in out
    failed = fails(server, "workflow", "run", "raising")
    assert "[run.failed]" in failed.stdout


# 7 -------------------------------------------------------------------------------------------
def test_failed_result_puts_the_cause_first_and_exits_non_zero(server: CaoServer):
    run_id = json.loads(ok(server, "workflow", "run", "raising", "--detach", "--json"))["run_id"]
    cao(server, "workflow", "wait", run_id)
    shown = fails(server, "workflow", "result", run_id).stdout
    cause = shown.index("cause:")
    assert "ValueError: the input file has no header" in shown[cause:].splitlines()[0]
    assert cause < shown.index("Traceback")
    assert f"cao workflow result {run_id}" not in shown
    assert f"next command: cao workflow resume {run_id}" in shown
    assert json.loads(fails(server, "workflow", "result", run_id, "--json").stdout)["state"] == "failed"
    completed = json.loads(ok(server, "workflow", "run", "ok", "--detach", "--json"))["run_id"]
    cao(server, "workflow", "wait", completed)
    ok(server, "workflow", "result", completed)


# 8 -------------------------------------------------------------------------------------------
def test_workflow_validate_takes_the_names_run_takes(server: CaoServer):
    assert ok(server, "workflow", "validate", "ok").splitlines() == ["valid"]
    assert ok(server, "workflow", "validate", "ok.py").splitlines() == ["valid"]
    assert json.loads(ok(server, "workflow", "validate", "raising", "--json"))["status"] == "pass"
    assert fails(server, "workflow", "validate", "nope").stderr.startswith("Error:")
