"""Helpers for workflow tests: write a script into a test server's workflow directory,
run it, resume it, and find the processes a run started."""

from __future__ import annotations

import textwrap
from typing import Any

import psutil
from cao_support import CaoServer, wait_until

BLOCKING_TIMEOUT = 120


class Workflows:
    def __init__(self, server: CaoServer):
        self.server = server
        self.dir = server.home / "workflows"
        self.dir.mkdir(parents=True, exist_ok=True)

    @property
    def client(self):
        return self.server.client

    def write(self, name: str, source: str) -> str:
        (self.dir / name).write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
        return name.rsplit(".", 1)[0]

    def run(self, name: str, inputs: dict | None = None, **body: Any):
        return self.client.post(
            "/workflows/runs", json={"name_or_path": name, "inputs": inputs or {}, **body}, timeout=BLOCKING_TIMEOUT
        )

    def run_ok(self, name: str, inputs: dict | None = None, **body: Any) -> dict:
        resp = self.run(name, inputs, **body)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def submit(self, name: str, inputs: dict | None = None) -> str:
        resp = self.client.post("/workflows/runs:submit", json={"name_or_path": name, "inputs": inputs or {}})
        assert resp.status_code == 202, resp.text
        return resp.json()["run_id"]

    def resume(self, run_id: str, decisions: dict | None = None):
        return self.client.post(
            f"/workflows/runs/{run_id}/resume", json={"decisions": decisions or {}}, timeout=BLOCKING_TIMEOUT
        )

    def resume_ok(self, run_id: str, decisions: dict | None = None) -> dict:
        resp = self.resume(run_id, decisions)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def status(self, run_id: str) -> dict:
        resp = self.client.get(f"/workflows/runs/{run_id}")
        assert resp.status_code == 200, resp.text
        return resp.json()

    def result(self, run_id: str) -> dict:
        resp = self.client.get(f"/workflows/runs/{run_id}/result")
        assert resp.status_code == 200, resp.text
        return resp.json()

    def wait_done(self, run_id: str, timeout: float = 60) -> dict:
        resp = self.client.get(f"/workflows/runs/{run_id}/wait", params={"timeout": timeout}, timeout=timeout + 10)
        assert resp.status_code == 200 and resp.json()["finished"], resp.text
        return self.result(run_id)

    def events(self, run_id: str) -> list[dict]:
        return self.client.get(f"/workflows/runs/{run_id}/events").json()["events"]

    def step(self, run_id: str, step_id: str) -> dict:
        return next(s for s in self.status(run_id)["steps"] if s["id"] == step_id)

    def wait_step_terminal(self, run_id: str, step_id: str, timeout: float = 20) -> str:
        def ready():
            steps = [s for s in self.status(run_id)["steps"] if s["id"] == step_id]
            return steps and steps[0]["state"] == "running" and steps[0]["terminal_id"]

        return wait_until(ready, timeout, message=f"step {step_id} running in a terminal")


def processes_with_env(name: str, value: str) -> list[psutil.Process]:
    """Our own processes whose environment has name=value (a script, an agent)."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get(name) == value:
                found.append(proc)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def step_counts(events: list[dict], type_: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event in events:
        if event["type"] == type_:
            counts[event["step_id"]] = counts.get(event["step_id"], 0) + 1
    return counts


# --- recorded journals (replay tests against histories from real runs) -------------------
JOURNAL_TABLES = ("workflow_runs", "workflow_steps", "workflow_events")


def export_journal(db_path, run_id: str) -> dict[str, list[dict]]:
    """The rows of one run, as JSON-able dicts (JSON columns stay JSON text)."""
    import sqlite3

    conn = sqlite3.connect(db_path)
    conn.row_factory = sqlite3.Row
    try:
        return {
            table: [dict(r) for r in conn.execute(f"SELECT * FROM {table} WHERE run_id = ?", (run_id,))]
            for table in JOURNAL_TABLES
        }
    finally:
        conn.close()


def import_journal(db_path, journal: dict[str, list[dict]], **run_changes: Any) -> None:
    """Write a recorded run into a (stopped) server's database, optionally changed."""
    import sqlite3

    conn = sqlite3.connect(db_path)
    try:
        with conn:
            for table in JOURNAL_TABLES:
                for row in journal[table]:
                    if table == "workflow_runs":
                        row = {**row, **run_changes}
                    if table == "workflow_events":
                        row = {k: v for k, v in row.items() if k != "seq"}
                    cols = ", ".join(row)
                    marks = ", ".join("?" for _ in row)
                    conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", tuple(row.values()))
    finally:
        conn.close()
