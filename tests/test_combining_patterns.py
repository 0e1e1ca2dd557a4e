"""The "Combining Patterns" recipe end to end: examples/combining-patterns/run_demo.py
against a real cao-server, real tmux, the real cao-mcp-server (driven by the mock
agents' scripted brains through the MCP SDK) and the real inbox.

Delays: a profile's `mock: {delay_ms}` wins over the server's CAO_MOCK_DELAY_MS, so
the demo script writes its profile copies with the delay it is given; the test asks
for 20 ms where a human watching gets 400.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cao_support import REPO, CaoServer

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")

DEMO = REPO / "examples" / "combining-patterns" / "run_demo.py"
SESSION = "cao-demo"
RESULTS = ("sales data shows steady growth", "user data shows steady growth")


def _deleted_snapshots(home: Path) -> list[dict]:
    """cao writes <id>.snapshot.json when it deletes a terminal: the record of teardowns."""
    return [
        json.loads(p.read_text(encoding="utf-8")) for p in sorted((home / "logs" / "terminal").glob("*.snapshot.json"))
    ]


def test_quarterly_report_recipe_end_to_end(cao: CaoServer):
    env = {k: v for k, v in cao.env.items() if k != "CAO_TERMINAL_ID"}
    proc = subprocess.run(
        [sys.executable, str(DEMO), "--delay-ms", "20", "--timeout", "45"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    socket = cao.client.get("/health").json()["tmux_socket"]
    assert f"tmux -L {socket} attach -t {SESSION}" in proc.stdout

    # The final report, as the demo printed it and as cao reads it from the supervisor.
    terms = cao.client.get(f"/sessions/{SESSION}").json()["terminals"]
    supervisor = next(t for t in terms if t["agent_profile"] == "supervisor")
    final = cao.client.get(f"/terminals/{supervisor['id']}/output", params={"mode": "last"}).json()["output"]
    assert final.startswith("FINAL REPORT:\nREPORT:")
    assert all(result in final for result in RESULTS), final
    assert proc.stdout.rstrip().endswith(final)

    # Two analysts, assigned by the supervisor (caller_id), still alive; no reporter left.
    analysts = [t for t in terms if t["agent_profile"] == "analyst"]
    assert len(analysts) == 2 and len(terms) == 3, terms
    assert all(a["caller_id"] == supervisor["id"] for a in analysts)
    analyst_ids = {a["id"] for a in analysts}

    # Each analyst's result reached the supervisor through its inbox, and was delivered.
    inbox = cao.client.get(f"/terminals/{supervisor['id']}/inbox/messages", params={"limit": 100}).json()
    assert [m["status"] for m in inbox] == ["delivered", "delivered"], inbox
    assert {m["sender_id"] for m in inbox} == analyst_ids
    for msg in inbox:
        assert msg["message"].startswith("Analysis result: ")
        assert f"[Message from terminal {msg['sender_id']}." in msg["message"]
    assert sorted(m["message"].split("\n")[0].removeprefix("Analysis result: ") for m in inbox) == sorted(RESULTS)

    # Both handoffs ran a reporter in this session and tore it down afterwards.
    reporters = [s for s in _deleted_snapshots(cao.home) if s["agent_profile"] == "reporter"]
    assert len(reporters) == 2, reporters
    for rep in reporters:
        assert rep["session_name"] == SESSION and rep["caller_id"] == supervisor["id"]
        assert cao.client.get(f"/terminals/{rep['terminal_id']}").status_code == 404
    # The first turn's reply names both workers and carries the reporter's template.
    history = cao.client.get(f"/terminals/{supervisor['id']}/output").json()["output"]
    assert all(a in history for a in analyst_ids) and "TEMPLATE: ## Sales" in history
