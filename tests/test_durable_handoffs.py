"""Durable handoffs: a handoff still at work when its call's `wait` runs out answers `pending`
with a job id and goes on; its result is given exactly once (MCP `get_handoff_result`,
GET /handoff-results/{job_id}, `cao agent result`), only to its caller or the user; a job survives
a kill -9 of cao-server (its worker adopted, its result still delivered); an unread result goes
to the caller's inbox. Real cao-server, real tmux, mock agents, the official MCP client.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from cao_support import CaoServer, wait_until
from mcp_support import agent_env, call, mcp_session

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")

CAO = str(Path(sys.executable).parent / "cao")


def mock_profile(cao: CaoServer) -> str:
    store = cao.home / "agent-store"
    store.mkdir(parents=True, exist_ok=True)
    (store / "mockdev.md").write_text("---\nname: mockdev\nprovider: mock_cli\n---\nA mock developer.\n")
    return "mockdev"


def agent_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CAO, "agent", *args], env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def mcp(cao: CaoServer, terminal_id: str | None, tool: str, **arguments) -> dict:
    async def go() -> dict:
        async with mcp_session(agent_env(cao, terminal_id)) as session:
            return await call(session, tool, **arguments)

    return anyio.run(go)


def test_a_handoff_past_its_wait_is_pending_and_its_result_is_given_once(cao: CaoServer) -> None:
    profile = mock_profile(cao)
    sup = cao.create_session(provider="mock_cli")
    first = mcp(cao, sup["id"], "handoff", agent_profile=profile, message="__mock_sleep_4", wait=1)
    assert first["success"] is True and first["status"] == "pending", first
    job = first["job_id"]
    assert "get_handoff_result" in first["message"]
    # Another agent may not read it; the caller may.
    other = cao.create_session(provider="mock_cli")
    refused = mcp(cao, other["id"], "get_handoff_result", job_id=job, wait=0)
    assert refused["success"] is False and "another caller" in refused["message"], refused
    done = mcp(cao, sup["id"], "get_handoff_result", job_id=job, wait=60)
    assert done["success"] is True and done["status"] == "completed", done
    assert done["output"] == "MOCK: slept 4s"
    assert cao.client.get(f"/terminals/{done['terminal_id']}").status_code == 404  # torn down
    again = mcp(cao, sup["id"], "get_handoff_result", job_id=job, wait=0)
    assert again["success"] is False and again["status"] == "delivered", again
    assert cao.client.get(f"/handoff-results/{job}").json()["status"] == "delivered"
    # Nothing went to the inbox: the result had its reader.
    assert cao.client.get(f"/terminals/{sup['id']}/inbox/messages").json() == []


def test_a_handoff_that_finishes_within_its_wait_answers_as_before(cao: CaoServer) -> None:
    profile = mock_profile(cao)
    sup = cao.create_session(provider="mock_cli")
    done = mcp(cao, sup["id"], "handoff", agent_profile=profile, message="quick one")
    assert done["success"] is True and done["status"] == "completed" and done["output"] == "MOCK: quick one"
    assert mcp(cao, sup["id"], "get_handoff_result", job_id=done["job_id"], wait=0)["status"] == "delivered"


def test_the_shell_reads_and_cancels_jobs_and_bad_ids_are_told(cao: CaoServer) -> None:
    profile = mock_profile(cao)
    user = agent_env(cao, None)
    started = agent_cli(user, "handoff", profile, "__mock_sleep_3", "--wait", "0")
    assert started.returncode == 0, started.stderr
    job = started.stdout.strip()
    assert "pending" in started.stderr and len(job) == 12
    got = agent_cli(user, "result", job, "--wait", "60")
    assert got.returncode == 0 and got.stdout.strip() == "MOCK: slept 3s", got.stderr
    assert agent_cli(user, "result", job, "--json").returncode == 1  # delivered already

    long = agent_cli(user, "handoff", profile, "__mock_sleep_60", "--wait", "0")
    job = long.stdout.strip()
    wait_until(lambda: cao.client.get(f"/handoff-results/{job}").json().get("terminal_id"), 20, message="worker")
    worker = cao.client.get(f"/handoff-results/{job}").json()["terminal_id"]
    still = agent_cli(user, "result", job, "--wait", "0")
    assert still.returncode == 3 and "still at work" in still.stderr
    cancelled = agent_cli(user, "cancel", job, "--json")
    assert cancelled.returncode == 0 and json.loads(cancelled.stdout)["success"] is True, cancelled.stdout
    wait_until(lambda: cao.client.get(f"/terminals/{worker}").status_code == 404, 20, message="worker removed")
    assert cao.client.get(f"/handoff-results/{job}").json()["status"] == "failed"

    for bad in ("0" * 11, "zzzzzzzzzzzz", "../../health"):
        shown = agent_cli(user, "result", bad, "--json")
        assert shown.returncode != 0
    assert cao.client.get("/handoff-results/0123456789ab").status_code == 404
    assert cao.client.get("/handoff-results/xyz").status_code == 422


def test_an_unread_result_goes_to_the_callers_inbox(cao_factory) -> None:
    cao = cao_factory("home", CAO_HANDOFF_UNCLAIMED_SECONDS="3").start()  # (a minute by default)
    profile = mock_profile(cao)
    sup = cao.create_session(provider="mock_cli")
    # The caller's call is cut before the worker answers: nobody asks for the result.
    first = mcp(cao, sup["id"], "handoff", agent_profile=profile, message="__mock_sleep_2", wait=0)
    job = first["job_id"]
    inbox = wait_until(
        lambda: cao.client.get(f"/terminals/{sup['id']}/inbox/messages").json(), 120, message="the inbox note"
    )
    assert job in inbox[0]["message"] and "MOCK: slept 2s" in inbox[0]["message"]
    assert mcp(cao, sup["id"], "get_handoff_result", job_id=job, wait=0)["status"] == "delivered"


def test_a_job_survives_a_kill_9_of_cao_server_and_its_result_is_still_delivered(cao_factory) -> None:
    cao = cao_factory("home").start()
    profile = mock_profile(cao)
    sup = cao.create_session(provider="mock_cli")
    first = mcp(cao, sup["id"], "handoff", agent_profile=profile, message="__mock_sleep_8", wait=0)
    job = first["job_id"]
    worker = wait_until(lambda: cao.client.get(f"/handoff-results/{job}").json().get("terminal_id"), 20)
    cao.wait_status(worker, "processing", 20)
    cao.kill9()
    cao.start()
    done = mcp(cao, sup["id"], "get_handoff_result", job_id=job, wait=60)
    assert done["status"] == "completed" and done["output"] == "MOCK: slept 8s", done
    wait_until(lambda: cao.client.get(f"/terminals/{worker}").status_code == 404, 20, message="worker removed")
