"""`cao workflow ...` end to end: the CLI as a subprocess against one real cao-server
(module-scoped), running scripts that drive the mock agent."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cao_support import CAO, CaoServer, cli, free_port

from cli_agent_orchestrator.cli.commands.workflow_output import parse_sse

VERBS = ("validate", "list", "get", "delete", "run", "status", "runs", "wait", "result", "events", "resume", "cancel")
OK_SCRIPT = """from cao_workflow import run_step, step, emit_output
h = run_step("mock_cli", "reviewer", "review part 1")
emit_output({"out": h.output})
"""
INPUTS_SCRIPT = """from cao_workflow import run_step, emit_output, get_inputs
INPUTS = {"tag": {"type": "string"}, "n": {"type": "int", "default": 1}}
emit_output({"inputs": get_inputs()})
"""
FAILING_SCRIPT = """from cao_workflow import run_step
run_step("mock_cli", "reviewer", "before the crash")
raise SystemExit(3)
"""
# Fails on its first drive after a manual step; any resume gets past that point.
MANUAL_SCRIPT = """import os
from cao_workflow import step, emit_output
h = step("mock_cli", "reviewer", "x", recovery="manual")
if not os.environ.get("CAO_WORKFLOW_RESUME"):
    raise SystemExit(3)
emit_output({"out": h.output})
"""
SLOW_SCRIPT = """from cao_workflow import run_step, emit_output
h = run_step("mock_cli", "reviewer", "__mock_sleep_{seconds}")
emit_output({{"out": h.output}})
"""
YAML_SPEC = """name: seqflow
description: one review step
steps:
  - id: a
    provider: mock_cli
    agent: reviewer
    prompt: hi
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = CaoServer(tmp_path_factory.mktemp("wfcli") / "home").start()
    specs = srv.home / "workflows"
    specs.mkdir(exist_ok=True)
    for name, text in [
        ("ok", OK_SCRIPT),
        ("inputs", INPUTS_SCRIPT),
        ("failing", FAILING_SCRIPT),
        ("manual", MANUAL_SCRIPT),
        ("slow", SLOW_SCRIPT.format(seconds=3)),
        # Outlives any CLI start-up on a loaded machine: a test that cancels it finds it running.
        ("long", SLOW_SCRIPT.format(seconds=120)),
    ]:
        (specs / f"{name}.py").write_text(text, encoding="utf-8")
    (specs / "seqflow.yaml").write_text(YAML_SPEC, encoding="utf-8")
    try:
        yield srv
    finally:
        srv.cleanup()


def cao(server: CaoServer, *args: str, stdin: str = "", timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    """`cao workflow ARGS` with stdin and stdout not a terminal."""
    return cli(server, "workflow", *args, input=stdin, env=env, timeout=timeout)


def ok(server: CaoServer, *args: str, **kwargs) -> str:
    proc = cao(server, *args, **kwargs)
    assert proc.returncode == 0, f"workflow {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def fails(server: CaoServer, *args: str, code: int = 1, **kwargs) -> subprocess.CompletedProcess:
    proc = cao(server, *args, **kwargs)
    assert proc.returncode == code, f"workflow {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def submit(server: CaoServer, name: str) -> str:
    return json.loads(ok(server, "run", name, "--detach", "--json"))["run_id"]


def on_tty(
    server: CaoServer,
    *args: str,
    when: bytes | None = None,
    then: Callable[[subprocess.Popen], object] | None = None,
    timeout: float = 30,
) -> tuple[int, str]:
    """Run `cao workflow ARGS` with stdout on a pseudo-terminal; call then(process) once
    `when` shows up. Returns (exit code, everything shown)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [CAO, "workflow", *args],
        env=server.env,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        # Ctrl-C in a terminal always reaches the program; a suite started in the background
        # inherits SIGINT ignored (the shell's rule for background jobs), and Python then never
        # raises KeyboardInterrupt: give the CLI the disposition a terminal gives it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    os.close(slave)
    seen, done = b"", False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.05)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the pty
                    chunk = b""
                if not chunk:
                    break
                seen += chunk
            if then is not None and not done and when in seen:
                then(proc)
                done = True
        else:
            raise AssertionError(f"pty run timed out; saw {seen[-2000:]!r}")
        return proc.wait(10), seen.decode(errors="replace").replace("\r\n", "\n")
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_help_lists_all_twelve_verbs():
    out = cli(None, "workflow", "--help", check=True).stdout
    listed = out.split("Commands:")[1].split()
    assert all(verb in listed for verb in VERBS)


def test_parse_sse_frames():
    lines = [
        ": keepalive",
        "",
        "event: step.started",
        "id: 7",
        'data: {"seq": 7,',
        'data: "x": 1}',
        "",
        "event: run_absent",
        "data: {}",
        "",
    ]
    frames = list(parse_sse(iter(lines)))
    assert [(f.event, f.id) for f in frames] == [("step.started", "7"), ("run_absent", None)]
    assert json.loads(frames[0].data) == {"seq": 7, "x": 1}


def test_validate(server, tmp_path: Path):
    good = tmp_path / "good.py"  # any path: the text is sent, not the path
    good.write_text(OK_SCRIPT)
    assert ok(server, "validate", str(good)).splitlines() == ["valid"]

    warned = tmp_path / "warned.py"
    warned.write_text("import random\n" + OK_SCRIPT)
    out = ok(server, "validate", str(warned))
    assert out.startswith("valid\n") and "line 1: [nondeterminism]" in out

    bad = tmp_path / "bad.py"
    bad.write_text('from cao_workflow import step\nstep("mock_cli", "reviewer", "x")\n')
    out = fails(server, "validate", str(bad)).stdout
    assert out.startswith("invalid\n") and "line 2: [missing-recovery-policy]" in out
    result = json.loads(fails(server, "validate", str(bad), "--json").stdout)
    assert result["status"] == "fail" and result["findings"][0]["rule_id"] == "missing-recovery-policy"

    spec = tmp_path / "flow.yml"
    spec.write_text(YAML_SPEC)
    assert json.loads(ok(server, "validate", str(spec), "--json"))["status"] == "pass"
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nsteps: []\n")
    assert fails(server, "validate", str(broken)).stdout.startswith("invalid\n")

    other = tmp_path / "notes.txt"
    other.write_text("hello")
    assert "a workflow is a .py script or a .yaml/.yml spec" in fails(server, "validate", str(other)).stderr
    assert "cannot read" in fails(server, "validate", str(tmp_path / "missing.py")).stderr


def test_list_get_delete(server, tmp_path: Path):
    table = ok(server, "list").splitlines()
    assert table[0].split() == ["NAME", "TIER", "MODE", "STEPS", "DESCRIPTION"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert rows["ok"][1:4] == ["script", "script", "-"]
    assert rows["seqflow"][1:4] == ["yaml", "sequential", "1"] and "one review step" in "\n".join(table)
    names = [s["name"] for s in json.loads(ok(server, "list", "--json"))]
    assert {"ok", "inputs", "seqflow"} <= set(names)
    assert ok(server, "list", "--dir", str(server.home / "workflows")).splitlines()[0].startswith("NAME")
    err = fails(server, "list", "--dir", str(tmp_path)).stderr
    assert "Error:" in err and "server's workflow directory" in err

    shown = ok(server, "get", "inputs")
    assert "Tier:" in shown and "script" in shown and str(server.home / "workflows" / "inputs.py") in shown
    assert "tag: string, n: int = 1" in shown and shown.rstrip().endswith('emit_output({"inputs": get_inputs()})')
    spec = json.loads(ok(server, "get", "inputs", "--json"))
    assert spec["inputs"]["n"] == {"type": "int", "default": 1} and spec["findings"] == []
    assert "no workflow named 'nope'" in fails(server, "get", "nope").stderr
    assert "cannot be addressed by name" in fails(server, "get", "runs").stderr  # a route, not a spec

    doomed = server.home / "workflows" / "doomed.py"
    doomed.write_text(OK_SCRIPT)
    fails(server, "delete", "doomed", stdin="n\n")  # declined: nothing happens
    assert doomed.exists()
    assert "Deleted workflow doomed." in ok(server, "delete", "doomed", "-y")
    assert not doomed.exists()
    fails(server, "get", "doomed")


def test_run_wait_prints_result_and_output(server):
    out = ok(server, "run", "ok", "--wait")
    assert "State:" in out and "completed" in out and '"out": "MOCK: review part 1"' in out
    assert "call-1" in out  # steps table
    data = json.loads(ok(server, "run", "ok", "--wait", "--json", "--run-id", "mine-1"))
    assert data["run_id"] == "mine-1" and data["state"] == "completed"
    assert data["output"] == {"out": "MOCK: review part 1"}
    assert "already taken" in fails(server, "run", "ok", "--wait", "--run-id", "mine-1").stderr


def test_run_detach_then_wait_then_result(server):
    run_id, state = ok(server, "run", "ok", "--detach").split()
    assert run_id.startswith("run-") and state == "running"
    assert ok(server, "wait", run_id).strip() == f"{run_id} completed"
    assert json.loads(ok(server, "wait", run_id, "--json"))["finished"] is True
    result = ok(server, "result", run_id)
    assert "completed" in result and "MOCK: review part 1" in result and "Failure:" not in result
    assert json.loads(ok(server, "result", run_id, "--json"))["output"] == {"out": "MOCK: review part 1"}


def test_run_json_without_wait_prints_one_json_line(server):
    out = ok(server, "run", "ok", "--json")
    assert len(out.splitlines()) == 1
    started = json.loads(out)
    assert set(started) == {"run_id", "state"} and started["state"] == "running"
    ok(server, "wait", started["run_id"])


def test_run_follows_events_on_a_terminal(server):
    code, seen = on_tty(server, "run", "ok")
    assert code == 0, seen
    assert "[step.started] call-1 attempt 1" in seen and "[run.completed]" in seen
    assert "MOCK: review part 1" in seen  # the closing summary carries the output


def test_ctrl_c_detaches_and_never_cancels(server):
    code, seen = on_tty(
        server, "run", "slow", when=b"[terminal.created]", then=lambda proc: proc.send_signal(signal.SIGINT)
    )
    assert code == 0, seen
    assert "detached; the run goes on: cao workflow status run-" in seen
    run_id = seen.split("cao workflow status ")[1].split()[0]
    assert json.loads(ok(server, "status", run_id, "--json"))["state"] in ("running", "completed")
    assert ok(server, "wait", run_id).strip() == f"{run_id} completed"


def test_failing_script_shows_failure_envelope(server):
    proc = fails(server, "run", "failing", "--wait", "--json")
    data = json.loads(proc.stdout)
    assert data["state"] == "failed" and data["kind"] == "error"
    assert any("exited with code 3" in w for w in data["warnings"])
    run_id = data["run_id"]
    shown = fails(server, "result", run_id).stdout  # a failed run's result exits 1
    assert "Failure:" in shown and "error kind:   error" in shown
    assert f"next command: cao workflow resume {run_id}" in shown
    assert json.loads(fails(server, "result", run_id, "--json").stdout)["failure_envelope"]["error_kind"] == "error"
    assert fails(server, "wait", run_id).stdout.strip() == f"{run_id} failed (error)"


def test_inputs_are_typed_by_the_declaration(server):
    data = json.loads(ok(server, "run", "inputs", "--wait", "--json", "--input", "tag=123"))
    assert data["output"] == {"inputs": {"tag": "123", "n": 1}}
    data = json.loads(ok(server, "run", "inputs", "--wait", "--json", "--input", "n=5", "--input", "tag=a=b"))
    assert data["output"] == {"inputs": {"tag": "a=b", "n": 5}}
    err = fails(server, "run", "inputs", "--wait", "--input", "nope=1").stderr
    assert "Error: unknown input 'nope' (not declared by the workflow)" in err
    assert "expected KEY=VALUE" in fails(server, "run", "inputs", "--input", "tag", code=2).stderr
    assert "given twice" in fails(server, "run", "inputs", "--input", "n=1", "--input", "n=2", code=2).stderr


def test_status_and_runs(server):
    run_id = json.loads(ok(server, "run", "ok", "--wait", "--json"))["run_id"]
    newest = ok(server, "status")
    assert run_id in newest and "completed" in newest and "ID" in newest and "call-1" in newest
    status = json.loads(ok(server, "status", run_id, "--json"))
    assert status["run_id"] == run_id and status["steps"][0]["id"] == "call-1"
    assert "unknown workflow run 'run-nope'" in fails(server, "status", "run-nope").stderr

    table = ok(server, "runs", "--state", "completed").splitlines()
    assert table[0].split() == ["RUN_ID", "WORKFLOW", "TIER", "STATE", "KIND", "STARTED", "FINISHED"]
    assert table[1].split()[:4] == [run_id, "ok", "script", "completed"]
    failed = json.loads(ok(server, "runs", "--state", "failed", "--json"))
    assert run_id not in {r["run_id"] for r in failed} and all(r["state"] == "failed" for r in failed)
    assert len(json.loads(ok(server, "runs", "--limit", "1", "--json"))) == 1
    fails(server, "runs", "--state", "bogus", code=2)


def test_events_batch_and_follow(server):
    run_id = json.loads(ok(server, "run", "ok", "--wait", "--json"))["run_id"]
    batch = ok(server, "events", run_id, "--no-follow").splitlines()
    assert batch[0] == "[run.started] ok (script)" and "[step.started] call-1 attempt 1" in batch
    assert batch[-1].startswith("[run.completed]")
    assert ok(server, "events", run_id).splitlines() == batch  # follow of a finished run ends by itself
    rows = [json.loads(line) for line in ok(server, "events", run_id, "--no-follow", "--json").splitlines()]
    assert [r["type"] for r in rows][0] == "run.started" and all(r["run_id"] == run_id for r in rows)
    later = [
        json.loads(line)
        for line in ok(server, "events", run_id, "--json", "--after-seq", str(rows[1]["seq"])).splitlines()
    ]
    assert later == rows[2:]
    assert "unknown run" in fails(server, "events", "run-nope", "--no-follow").stderr
    assert "unknown run" in fails(server, "events", "run-nope").stderr


def test_resume_halts_on_manual_step_until_decided(server):
    run_id = submit(server, "manual")
    fails(server, "wait", run_id)  # the first drive exits 3 after the manual step
    out = fails(server, "resume", run_id).stdout  # the manual step halts: a human must decide
    assert "policy_manual" in out and "decision_required" in out
    assert "--decide call-1=rerun|skip" in out
    status = json.loads(ok(server, "status", run_id, "--json"))
    assert status["kind"] == "halted" and status["halts"][-1]["rule"] == "policy_manual"
    data = json.loads(ok(server, "resume", run_id, "--decide", "call-1=skip", "--json"))
    assert data["state"] == "completed" and data["output"] == {"out": "MOCK: x"}
    assert "nothing to resume" in fails(server, "resume", run_id).stderr


@pytest.mark.parametrize("decide", [["call-1"], ["call-1=maybe"], ["=skip"], ["a=skip", "a=rerun"]])
def test_bad_decide_is_a_usage_error(server, decide):
    args = [arg for d in decide for arg in ("--decide", d)]
    assert "--decide" in fails(server, "resume", "run-x", *args, code=2).stderr


def test_wait_timeout_and_cancel(server):
    run_id = submit(server, "long")
    out = fails(server, "wait", run_id, "--timeout", "0.5").stdout
    assert out.strip() == f"{run_id} still running after 0.5s"
    assert ok(server, "cancel", run_id).strip() == f"Cancelled {run_id}."
    assert fails(server, "wait", run_id).stdout.strip() == f"{run_id} cancelled (cancelled)"
    assert "Error: run is already finished" in fails(server, "cancel", run_id).stderr
    assert "Error: unknown run 'run-nope'" in fails(server, "cancel", "run-nope").stderr
    assert "invalid run id" in fails(server, "cancel", "../x").stderr


def test_server_not_running_is_a_clear_error(server):
    err = fails(server, "runs", CAO_API_PORT=str(free_port())).stderr
    assert "cao-server is not running" in err


def test_lost_contact_while_following_leaves_a_hint(cao: CaoServer):
    (cao.home / "workflows").mkdir(exist_ok=True)
    (cao.home / "workflows" / "slow.py").write_text(SLOW_SCRIPT.format(seconds=30), encoding="utf-8")
    code, seen = on_tty(cao, "run", "slow", when=b"[terminal.created]", then=lambda _proc: cao.kill9())
    assert code == 0, seen
    assert "lost contact with cao-server; check with: cao workflow status run-" in seen
