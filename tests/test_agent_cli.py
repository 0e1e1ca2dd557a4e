"""`cao agent …`: cao's MCP tools from the shell, against a real cao-server with mock agents.
Each verb gives what the MCP tool gives (`--json`: the tool's own result); who calls is proven
by the agent's credential (CAO_MCP_TOKEN), never by a bare CAO_TERMINAL_ID.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cao_support import CaoServer
from mcp_support import agent_env

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")

CAO = str(Path(sys.executable).parent / "cao")


def agent_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CAO, "agent", *args], env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def mock_profile(cao: CaoServer) -> str:
    store = cao.home / "agent-store"
    store.mkdir(parents=True, exist_ok=True)
    (store / "mockdev.md").write_text("---\nname: mockdev\nprovider: mock_cli\n---\nA mock developer.\n")
    return "mockdev"


def test_handoff_from_the_shell_prints_the_workers_reply_and_json_is_the_tools_result(cao: CaoServer) -> None:
    user = agent_env(cao, None)
    profile = mock_profile(cao)
    done = agent_cli(user, "handoff", profile, "hello from the shell")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "MOCK: hello from the shell"
    as_json = agent_cli(user, "handoff", profile, "again", "--json")
    assert as_json.returncode == 0, as_json.stderr
    result = json.loads(as_json.stdout)
    assert result["success"] is True and result["output"] == "MOCK: again"
    assert result["message"].startswith("Successfully handed off to mockdev")
    assert cao.client.get(f"/terminals/{result['terminal_id']}").status_code == 404  # torn down, as over MCP


def test_an_agent_sends_a_message_in_its_own_name_and_a_bare_claim_is_not_an_identity(cao: CaoServer) -> None:
    sender = cao.create_session(provider="mock_cli")
    receiver = cao.create_session(provider="mock_cli")
    sent = agent_cli(agent_env(cao, sender["id"]), "send-message", "from the sender's shell", "--to", receiver["id"])
    assert sent.returncode == 0, sent.stderr
    inbox = cao.client.get(f"/terminals/{receiver['id']}/inbox/messages").json()
    assert [m["sender_id"] for m in inbox] == [sender["id"]]
    assert inbox[0]["message"].startswith("from the sender's shell")

    # CAO_TERMINAL_ID without its credential: the user's token speaks, and the user has no
    # caller to report to, so the claim gives nothing of the sender's.
    claimed = {**agent_env(cao, None), "CAO_TERMINAL_ID": sender["id"]}
    bare = agent_cli(claimed, "send-message", "pretending", "--json")
    assert bare.returncode == 1
    assert json.loads(bare.stdout)["success"] is False
    # A forged credential is refused outright.
    forged = {**agent_env(cao, sender["id"]), "CAO_MCP_TOKEN": "not-the-credential"}
    refused = agent_cli(forged, "send-message", "forged", "--to", receiver["id"])
    assert refused.returncode != 0 and "401" in refused.stderr, refused.stderr
    assert len(cao.client.get(f"/terminals/{receiver['id']}/inbox/messages").json()) == 1


def test_assign_status_and_delete_from_the_shell(cao: CaoServer) -> None:
    sup = cao.create_session(provider="mock_cli")
    env = agent_env(cao, sup["id"])
    assigned = agent_cli(env, "assign", "developer", "work on it", "--description", "the shell's worker")
    assert assigned.returncode == 0, assigned.stderr
    worker = assigned.stdout.strip()
    assert cao.client.get(f"/terminals/{worker}").json()["caller_id"] == sup["id"]
    cao.wait_status(worker, "completed", timeout=30)
    shown = agent_cli(env, "status", worker, "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["status"] == "completed", shown.stderr
    own = agent_cli(env, "status")  # the caller's own terminal, from CAO_TERMINAL_ID
    assert own.returncode == 0 and sup["id"] in own.stdout
    gone = agent_cli(env, "delete", worker)
    assert gone.returncode == 0, gone.stderr
    assert cao.client.get(f"/terminals/{worker}").status_code == 404


def test_bad_input_gets_the_tools_own_errors(cao: CaoServer) -> None:
    user = agent_env(cao, None)
    empty = agent_cli(user, "handoff", mock_profile(cao), "   ")
    assert empty.returncode == 1 and "message must not be empty" in empty.stderr
    unknown = agent_cli(user, "answer", "0badc0de", "yes")
    assert unknown.returncode == 1 and unknown.stderr.strip()
    bad_id = agent_cli(user, "delete", "../../x", "--json")
    assert bad_id.returncode != 0
    outside = agent_cli({k: v for k, v in user.items() if k != "CAO_TERMINAL_ID"}, "status")
    assert outside.returncode == 2 and "TERMINAL_ID" in outside.stderr


# --- cao session send / status ----------------------------------------------------------------
def test_session_send_types_into_the_conductor_and_prints_its_reply(cao: CaoServer) -> None:
    from cao_support import cli

    conductor = cao.create_session(provider="mock_cli")
    session = conductor["session_name"]
    worker = cao.client.post(
        f"/sessions/{session}/terminals",
        params={"agent_profile": "developer", "provider": "mock_cli", "caller_id": conductor["id"]},
    ).json()
    sent = cli(cao, "session", "send", session, "plan the work")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.strip() == "MOCK: plan the work"
    to_worker = cli(cao, "session", "send", session, "do the work", "--terminal", worker["id"], "--json")
    assert to_worker.returncode == 0 and json.loads(to_worker.stdout)["last_message"] == "MOCK: do the work"
    quick = cli(cao, "session", "send", session, "in the background", "--async")
    assert quick.returncode == 0 and quick.stdout == ""
    cao.wait_status(conductor["id"], "completed", timeout=30)

    status = cli(cao, "session", "status", session, "--workers", "--json")
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert shown["terminal"]["id"] == conductor["id"] and [w["id"] for w in shown["workers"]] == [worker["id"]]
    one = cli(cao, "session", "status", session, "--terminal", worker["id"])
    assert one.returncode == 0 and worker["id"] in one.stdout and "completed" in one.stdout
    wrong = cli(cao, "session", "send", session, "x", "--terminal", "0badc0de")
    assert wrong.returncode != 0 and "not in session" in wrong.stderr
    missing = cli(cao, "session", "status", "cao-no-such-session")
    assert missing.returncode != 0 and "not found" in missing.stderr
