"""Scheduled flows end to end: a real cao-server (its timer, its gate subprocesses, its
SQLite), the `cao flow` CLI, and mock agents in tmux that answer "MOCK: <prompt>".
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from conftest import CaoServer, wait_until
from sse_support import EventStream

CAO = str(Path(sys.executable).parent / "cao")
NEVER_SOON = "0 0 1 1 *"  # once a year: these flows run only when a test says so


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    server = CaoServer(tmp_path_factory.mktemp("flows") / "home").start()
    try:
        yield server
    finally:
        server.cleanup()


def cao(server: CaoServer, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CAO, *args], env=server.env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def ok(server: CaoServer, *args: str, **kwargs) -> str:
    proc = cao(server, *args, **kwargs)
    assert proc.returncode == 0, f"cao {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def write_flow(
    directory: Path,
    name: str,
    prompt: str = "hello",
    schedule: str = NEVER_SOON,
    gate: str | None = None,
    **frontmatter: str,
) -> Path:
    """A flow file (and its gate script, executable, when `gate` is its source)."""
    directory.mkdir(parents=True, exist_ok=True)
    meta = {"name": name, "schedule": schedule, "agent_profile": "developer", "provider": "mock_cli", **frontmatter}
    if gate is not None:
        script = directory / f"{name}-gate.sh"
        script.write_text(gate)
        script.chmod(0o755)
        meta["script"] = script.name
    lines = "\n".join(f"{key}: {json.dumps(value)}" for key, value in meta.items())
    path = directory / f"{name}.flow.md"
    path.write_text(f"---\n{lines}\n---\n\n{prompt}\n")
    return path


def gate_printing(decision: dict) -> str:
    return f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(decision)}\nEOF\n"


def add(server: CaoServer, path: Path) -> dict:
    resp = server.client.post("/flows", json={"path": str(path)})
    assert resp.status_code == 201, resp.text
    return resp.json()


def runs(server: CaoServer, name: str) -> list[dict]:
    resp = server.client.get(f"/flows/{name}/runs")
    assert resp.status_code == 200, resp.text
    return resp.json()


def wait_final_run(server: CaoServer, name: str, timeout: float = 60, **match: str) -> dict:
    def final() -> dict | None:
        for run in runs(server, name):
            if run["state"] != "running" and all(run[k] == v for k, v in match.items()):
                return run
        return None

    found = wait_until(final, timeout, interval=0.2, message=f"a finished run of {name} with {match}")
    assert isinstance(found, dict)
    return found


def test_cao_flow_run_fires_at_once_and_the_run_record_holds_the_reply(srv: CaoServer, tmp_path: Path):
    path = write_flow(tmp_path, "report", prompt="write the daily report")
    assert "Added flow report" in ok(srv, "flow", "add", str(path))
    out = ok(srv, "flow", "run", "report", "--wait")
    assert "executed successfully" in out and "MOCK: write the daily report" in out
    (run,) = runs(srv, "report")
    assert run["state"] == "completed" and run["trigger"] == "manual" and run["execute"] is None
    assert run["reply"] == "MOCK: write the daily report"
    assert run["session_name"] == "cao-flow-report" and run["terminal_id"]
    assert run["prompt"] == "write the daily report" and run["started_at"] and run["finished_at"]
    # The agent stays in its session for a human to look at; the next run replaces it.
    assert srv.tmux("has-session", "-t", "cao-flow-report").returncode == 0
    out = ok(srv, "flow", "run", "report")
    assert "executed successfully" in out
    second = wait_until(lambda: (r := runs(srv, "report")[0])["id"] != run["id"] and r["state"] != "running" and r, 60)
    assert isinstance(second, dict) and second["state"] == "completed", second
    assert second["id"] != run["id"] and second["terminal_id"] != run["terminal_id"]
    assert srv.client.get(f"/terminals/{run['terminal_id']}").status_code == 404
    assert ok(srv, "schedule", "get", "report").count("completed") == 1  # the alias, and the last run


def test_gate_execute_false_skips_the_run_and_records_why(srv: CaoServer, tmp_path: Path):
    gate = gate_printing({"execute": False, "output": {"reason": "no new tickets"}})
    add(srv, write_flow(tmp_path, "tickets", prompt="triage [[tickets]]", gate=gate))
    with EventStream(srv, "flow.tickets.*") as events:
        out = ok(srv, "flow", "run", "tickets")
        started = events.until(lambda f: f.event == "FlowRunStarted")
        finished = events.until(lambda f: f.event == "FlowRunFinished")
    assert started.data["trigger"] == "manual" and finished.data["run_id"] == started.data["run_id"]
    assert finished.data["state"] == "skipped" and "no new tickets" in finished.data["reason"]
    assert "skipped (execute=false)" in out and "no new tickets" in out
    (run,) = runs(srv, "tickets")
    assert run["state"] == "skipped" and run["execute"] is False
    assert run["gate_output"] == {"reason": "no new tickets"}
    assert "execute: false" in run["reason"] and "no new tickets" in run["reason"]
    assert run["terminal_id"] is None and run["prompt"] is None
    assert srv.tmux("has-session", "-t", "cao-flow-tickets").returncode != 0  # no agent was started


def test_the_gate_output_fills_the_prompt_placeholders(srv: CaoServer, tmp_path: Path):
    gate = gate_printing({"execute": True, "output": {"topic": "apples", "count": 3}})
    add(srv, write_flow(tmp_path, "fill", prompt="summarise [[count]] notes on [[topic]]", gate=gate))
    answer = srv.client.post("/flows/fill/run", params={"wait": "true"}).json()
    assert answer["executed"] is True
    run = answer["run"]
    assert run["state"] == "completed" and run["execute"] is True
    assert run["gate_output"] == {"topic": "apples", "count": 3}
    assert run["prompt"] == "summarise 3 notes on apples"
    assert run["reply"] == "MOCK: summarise 3 notes on apples"


def test_two_overlapping_triggers_start_one_run(srv: CaoServer, tmp_path: Path):
    add(srv, write_flow(tmp_path, "slow", prompt="__mock_sleep_3"))
    answers: list[dict] = []

    def trigger() -> None:
        answers.append(srv.client.post("/flows/slow/run").json())

    threads = [threading.Thread(target=trigger) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(a["executed"] for a in answers) == [False, True], answers
    skipped = next(a["run"] for a in answers if not a["executed"])
    assert skipped["state"] == "skipped" and ("still running" in skipped["reason"] or "starting" in skipped["reason"])
    # While the first run's agent works, a third trigger is refused the same way.
    third = srv.client.post("/flows/slow/run").json()
    assert third["executed"] is False and third["run"]["state"] == "skipped"
    done = wait_final_run(srv, "slow", state="completed")
    assert done["reply"] == "MOCK: slept 3s"
    started = [r for r in runs(srv, "slow") if r["terminal_id"]]
    assert len(started) == 1, started


def test_a_one_minute_cron_flow_fires_while_the_server_runs(srv: CaoServer, tmp_path: Path):
    flow = add(srv, write_flow(tmp_path, "minutely", prompt="tick", schedule="* * * * *"))
    due = datetime.fromisoformat(flow["next_run"])
    assert due.second == 0 and flow["timezone_source"] == "server"
    run = wait_final_run(srv, "minutely", timeout=120, trigger="schedule")
    ok(srv, "flow", "disable", "minutely")  # one is enough; the others' tests stay quiet
    assert run["state"] == "completed" and run["reply"] == "MOCK: tick", run
    assert datetime.fromisoformat(run["due_at"].replace("Z", "+00:00")) == due.astimezone(UTC)
    after = srv.client.get("/flows/minutely").json()
    assert after["last_run"] is not None and after["enabled"] is False and after["next_run"] is None


def test_bad_flows_are_refused_with_clear_messages_and_nothing_else_is_affected(srv: CaoServer, tmp_path: Path):
    cases = {
        "bad cron": (write_flow(tmp_path / "a", "badcron", schedule="61 * * * *"), "not a valid cron expression"),
        "4 fields": (write_flow(tmp_path / "b", "fourfields", schedule="* * * *"), "not a 5-field cron expression"),
        "profile": (write_flow(tmp_path / "c", "noprofile", agent_profile="nope"), "agent profile 'nope' not found"),
        "zone": (write_flow(tmp_path / "d", "nozone", timezone="Mars/Olympus"), "unknown time zone 'Mars/Olympus'"),
        "provider": (write_flow(tmp_path / "e", "noprov", provider="nocli"), "unknown provider 'nocli'"),
        "script": (write_flow(tmp_path / "f", "noscript", script="missing.sh"), "does not exist"),
        "name": (write_flow(tmp_path / "g", "bad name"), "invalid flow name"),
        "no prompt": (write_flow(tmp_path / "h", "noprompt", prompt=""), "prompt"),
        "placeholders without gate": (write_flow(tmp_path / "i", "nogate", prompt="[[x]]"), "no gate `script`"),
    }
    for label, (path, message) in cases.items():
        resp = srv.client.post("/flows", json={"path": str(path)})
        assert resp.status_code == 400 and message in resp.json()["detail"], (label, resp.text)
    proc = cao(srv, "flow", "add", str(cases["bad cron"][0]))
    assert proc.returncode == 1 and "Error:" in proc.stderr and "not a valid cron expression" in proc.stderr
    proc = cao(srv, "flow", "add", str(tmp_path / "nothing.flow.md"))
    assert proc.returncode == 1 and "does not exist" in proc.stderr
    fields = {"name": "viafields", "schedule": "bad", "agent_profile": "developer", "prompt_template": "hi"}
    resp = srv.client.post("/flows", json=fields)
    assert resp.status_code == 400 and "cron" in resp.json()["detail"]
    for method, route in (("GET", "/flows/ghost"), ("POST", "/flows/ghost/run"), ("DELETE", "/flows/ghost")):
        assert srv.client.request(method, route).status_code == 404
    assert srv.client.get("/flows/bad%20name").status_code == 400
    names = {f["name"] for f in srv.client.get("/flows").json()}
    assert not names & {"badcron", "fourfields", "noprofile", "nozone", "noprov", "noscript", "viafields"}
    # The server goes on serving, and a good flow added the other way (fields) still runs.
    assert srv.client.get("/health").json()["status"] == "ok"
    fields = {**fields, "schedule": "30 8 * * 1-5", "provider": "mock_cli", "timezone": "America/New_York"}
    resp = srv.client.post("/flows", json=fields)
    assert resp.status_code == 201, resp.text
    flow = resp.json()
    assert flow["timezone"] == "America/New_York" and flow["timezone_source"] == "flow"
    assert flow["next_run"].endswith("-05:00") and "T08:30:00" in flow["next_run"]  # December: EST
    assert Path(flow["file_path"]) == srv.home / "flows" / "viafields.flow.md"
    assert srv.client.post("/flows/viafields/run", params={"wait": "true"}).json()["run"]["reply"] == "MOCK: hi"


def test_a_crashing_or_garbage_gate_fails_its_run_with_the_reason(srv: CaoServer, tmp_path: Path):
    gates = {
        "crash": ("#!/bin/sh\necho boom >&2\nexit 3\n", "exited with code 3: boom"),
        "garbage": ("#!/bin/sh\necho hello there\n", "must print one JSON object"),
        "noexecute": ("#!/bin/sh\necho '{\"output\": {}}'\n", "must print one JSON object"),
        "notbool": ('#!/bin/sh\necho \'{"execute": "yes", "output": {}}\'\n', "`execute` must be true or false"),
        "missingvar": (gate_printing({"execute": True, "output": {}}), "Missing template variables: topic"),
    }
    for name, (gate, _) in gates.items():
        add(srv, write_flow(tmp_path, name, prompt="about [[topic]]", gate=gate))
    for name, (_, reason) in gates.items():
        proc = cao(srv, "flow", "run", name)
        assert proc.returncode == 1 and reason in proc.stderr, (name, proc.stdout, proc.stderr)
        (run,) = runs(srv, name)
        assert run["state"] == "failed" and reason in run["reason"] and run["terminal_id"] is None, run
    # A gate that vanished, or lost its execute bit, after the flow was added.
    (tmp_path / "crash-gate.sh").unlink()
    answer = srv.client.post("/flows/crash/run").json()
    assert answer["executed"] is False and "does not exist" in answer["run"]["reason"]
    (tmp_path / "garbage-gate.sh").chmod(0o644)
    assert "not executable" in srv.client.post("/flows/garbage/run").json()["run"]["reason"]
    assert srv.client.get("/health").json()["status"] == "ok"


def test_a_profile_removed_after_add_fails_the_run_with_the_reason(srv: CaoServer, tmp_path: Path):
    store = srv.home / "agent-store"
    store.mkdir(exist_ok=True)
    (store / "temp-agent.md").write_text("---\nname: temp-agent\n---\nYou help.\n")
    add(srv, write_flow(tmp_path, "orphan", agent_profile="temp-agent"))
    (store / "temp-agent.md").unlink()
    run = srv.client.post("/flows/orphan/run", params={"wait": "true"}).json()["run"]
    assert run["state"] == "failed" and "agent profile 'temp-agent' not found" in run["reason"], run


def test_flow_list_states_the_zone_and_the_missed_run_rule(srv: CaoServer, tmp_path: Path):
    add(srv, write_flow(tmp_path, "berlin", schedule="0 9 * * *", timezone="Europe/Berlin"))
    out = ok(srv, "flow", "list")
    line = next(line for line in out.splitlines() if line.startswith("berlin "))
    assert "Europe/Berlin" in line and "09:00" in line and "yes" in line
    assert "Missed runs:" in out and "runs once at start-up" in out
    assert ok(srv, "schedule", "list") == out
    flows = json.loads(ok(srv, "flow", "list", "--json"))
    berlin = next(f for f in flows if f["name"] == "berlin")
    # The next 09:00 in Berlin, with the offset Berlin has on that day (CET or CEST).
    next_run = datetime.fromisoformat(berlin["next_run"])
    assert berlin["missed_runs"] == "once" and (next_run.hour, next_run.minute) == (9, 0)
    assert 0 < (next_run - datetime.now(UTC)).total_seconds() <= 25 * 3600
    assert next_run.utcoffset() == next_run.astimezone(ZoneInfo("Europe/Berlin")).utcoffset()
    assert "Disabled flow berlin" in ok(srv, "flow", "disable", "berlin")
    assert srv.client.get("/flows/berlin").json()["next_run"] is None
    assert "Enabled flow berlin" in ok(srv, "flow", "enable", "berlin")
    assert "Removed flow berlin" in ok(srv, "flow", "remove", "berlin")
    assert srv.client.get("/flows/berlin").status_code == 404


def _db(server: CaoServer) -> sqlite3.Connection:
    return sqlite3.connect(server.home / "db" / "cli-agent-orchestrator.db")


def test_restart_runs_a_missed_due_time_once_and_never_fails_on_a_bad_flow(cao_factory, tmp_path: Path):
    server = cao_factory().start()
    for name in ("missed", "off", "broken"):
        add(server, write_flow(tmp_path, name))
    add(server, write_flow(tmp_path, "long", prompt="__mock_sleep_30"))
    assert server.client.post("/flows/off/disable").status_code == 200
    assert server.client.post("/flows/long/run").json()["executed"] is True
    server.stop()
    with _db(server) as db:  # as if each had been due while the server was down
        db.execute("UPDATE flows SET next_run = '2020-01-01T00:00:00Z' WHERE name != 'long'")
        db.execute("UPDATE flows SET timezone = 'Gone/Zone' WHERE name = 'broken'")
    server.start()
    run = wait_final_run(server, "missed", trigger="missed")
    assert run["state"] == "completed" and run["due_at"] == "2020-01-01T00:00:00Z" and run["reply"] == "MOCK: hello"
    assert len(runs(server, "missed")) == 1
    assert datetime.fromisoformat(server.client.get("/flows/missed").json()["next_run"]) > datetime.now(UTC)
    assert runs(server, "off") == []  # disabled flows do not make up anything
    broken = server.client.get("/flows/broken").json()
    assert (
        "unknown time zone 'Gone/Zone'" in broken["error"]
        and broken["next_run"] is None
        and runs(server, "broken") == []
    )
    assert "error: unknown time zone" in ok(server, "flow", "list")
    (interrupted,) = runs(server, "long")
    assert interrupted["state"] == "interrupted" and "cao-server stopped" in interrupted["reason"]


def _gate(tmp_path: Path, source: str) -> str:
    script = tmp_path / "gate.sh"
    script.write_text(source)
    script.chmod(0o755)
    return str(script)


def test_a_gate_past_its_time_limit_is_stopped_with_its_children(tmp_path: Path):
    from cli_agent_orchestrator.flows.gate_script import GateFailed, run_gate

    pid_file = tmp_path / "child.pid"
    script = _gate(tmp_path, f"#!/bin/sh\nsleep 60 &\necho $! > {pid_file}\nwait\n")
    with pytest.raises(GateFailed, match="did not finish within 1s; it was stopped"):
        asyncio.run(run_gate(script, str(tmp_path), {"PATH": "/usr/bin:/bin"}, timeout=1))
    child = int(pid_file.read_text())
    wait_until(
        lambda: not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2], 5
    )


def test_a_gate_printing_too_much_is_stopped(tmp_path: Path):
    from cli_agent_orchestrator.flows.gate_script import GateFailed, run_gate

    script = _gate(tmp_path, "#!/bin/sh\nexec yes\n")
    with pytest.raises(GateFailed, match="printed more than 1024 KiB"):
        asyncio.run(run_gate(script, str(tmp_path), {"PATH": "/usr/bin:/bin"}, timeout=20))
