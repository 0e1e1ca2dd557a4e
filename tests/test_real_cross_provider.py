"""Two real CLIs talking through cao-mcp-server: a Claude Code supervisor hands off to
a Codex worker, and assigns one that reports back by send_message. Both CLIs are the
pinned npm builds, confined to one temporary HOME, against one scripted model (Claude
speaks the Anthropic API to it, Codex the Responses API); one script serves both by
matching each agent's prompt.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CaoServer, wait_until

# Autouse: without tmux every test here skips, or fails under CI (CAO_REQUIRE_REAL_CLIS).
from real_cli_support import (
    npm_binary,
    real_cli_prerequisites,  # noqa: F401
    real_cli_server,
)
from test_real_claude_code import agent_processes, wait_for_mcp_shim  # noqa: F401 (a fixture)

from cao_testkit.scripted_model.harness import ScriptedModelServer

CLAUDE_VERSION, CODEX_VERSION = "2.1.197", "0.171.0"
CODEX_HELLO = "Hi boss, codex here."
SCRIPT = [
    # The Claude supervisor's turns.
    {
        "match": "delegate to codex",
        "steps": [
            {
                "tool": "mcp:cao-mcp-server:handoff",
                "args": {"agent_profile": "codex_worker", "message": "please greet the boss"},
            },
            {"text": "Codex answered."},
        ],
    },
    {
        "match": "assign to codex",
        "steps": [
            {"tool": "mcp:cao-mcp-server:assign", "args": {"agent_profile": "codex_worker", "message": "count things"}},
            {"text": "Assigned."},
        ],
    },
    {"match": "codex result 42", "reply": "Supervisor got the result."},
    # The Codex workers' turns.
    {"match": "greet the boss", "reply": CODEX_HELLO},
    {
        "match": r"count things.*Assigned by terminal ([0-9a-f]{8})",
        "steps": [
            {"tool": "mcp:cao-mcp-server:send_message", "args": {"receiver_id": "{g1}", "message": "codex result 42"}},
            {"text": "Reported back."},
        ],
    },
]
PROFILES = {
    "claude_boss": "---\nname: claude_boss\nprovider: claude_code\npermissionMode: bypassPermissions\n---\n"
    "You supervise.\n",
    "codex_worker": "---\nname: codex_worker\nprovider: codex\nmodel: fake-model\n---\nYou work.\n",
}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, wait_for_mcp_shim):  # noqa: F811
    claude = npm_binary("@anthropic-ai/claude-code", CLAUDE_VERSION, "claude")
    codex = npm_binary("@openai/codex", CODEX_VERSION, "codex")
    root = tmp_path_factory.mktemp("cross")
    with ScriptedModelServer() as model:
        model.set_script("cross", SCRIPT)
        cao = real_cli_server(root, [claude, codex], model.cli_env("cross"))
        # A user who has run Claude before (first-run done); folder trust is left to the providers.
        (Path(cao.env["HOME"]) / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True}))
        store = cao.home / "agent-store"
        store.mkdir(parents=True)
        for name, text in PROFILES.items():
            (store / f"{name}.md").write_text(text)
        (root / "work").mkdir()
        cao.start()
        try:
            yield cao, model, root / "work"
        finally:
            cao.cleanup()


def last_output(cao: CaoServer, tid: str) -> str:
    resp = cao.client.get(f"/terminals/{tid}/output", params={"mode": "last"})
    return resp.json()["output"] if resp.status_code == 200 else ""


def delete_all(cao: CaoServer) -> None:
    for term in cao.client.get("/terminals").json():
        assert cao.client.delete(f"/terminals/{term['id']}").status_code == 200
        wait_until(
            lambda term=term: not agent_processes(term["id"]), timeout=30, message=f"{term['id']} processes gone"
        )


def test_claude_supervisor_hands_off_to_codex(env) -> None:
    cao, model, work = env
    sup = cao.create_session("claude_boss", provider="claude_code", working_directory=str(work))["id"]
    cao.send(sup, "delegate to codex")
    wait_until(lambda: last_output(cao, sup) == "Codex answered.", timeout=180, message="the handoff's answer")
    turn = [r for r in model.requests("cross") if not r["side"] and "delegate to codex" in r["user_text"]][-1]
    result = json.loads(turn["tool_result"])
    assert result["success"] is True and result["output"].strip() == CODEX_HELLO
    assert "(codex)" in result["message"]
    assert cao.client.get(f"/terminals/{result['terminal_id']}").status_code == 404  # torn down
    delete_all(cao)


def test_claude_assigns_codex_which_reports_back(env) -> None:
    cao, _, work = env
    sup = cao.create_session("claude_boss", provider="claude_code", working_directory=str(work))["id"]
    cao.send(sup, "assign to codex")
    wait_until(
        lambda: last_output(cao, sup) == "Supervisor got the result.",
        timeout=180,
        message="the Codex worker's message answered by the supervisor",
    )
    workers = [t for t in cao.client.get("/terminals").json() if t["id"] != sup]
    assert len(workers) == 1 and workers[0]["provider"] == "codex" and workers[0]["caller_id"] == sup
    delete_all(cao)
