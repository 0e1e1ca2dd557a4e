"""Real work without a human (issue 11): a real supervisor (Claude Code or Codex, launched with
--yolo or --auto-approve) hands off to the built-in `developer`, whose worker edits a file and
runs a command unattended; a `reviewer` worker asked to write is refused by its CLI and the
supervisor reads why; a worker that stops at a prompt is reported by the handoff, answered
through answer_user_prompt, and its reply reaches the supervisor's inbox.

Pinned npm builds of the CLIs, one temporary HOME, one scripted model for every agent (the
only stand-in: the language model). Workers inherit their supervisor's CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from conftest import CaoServer, wait_until
from mcp_support import agent_env, call, mcp_session

# Autouse: without tmux every test here skips, or fails under CI (CAO_REQUIRE_REAL_CLIS).
from real_cli_support import (
    npm_binary,
    real_cli_prerequisites,  # noqa: F401
    real_cli_server,
    store_profiles,
)
from test_real_claude_code import agent_processes, wait_for_mcp_shim  # noqa: F401 (a fixture)

from cao_testkit.scripted_model.harness import ScriptedModelServer

CLAUDE_VERSION, CODEX_VERSION = "2.1.197", "0.171.0"
TURN_S = 240
CAO = str(Path(sys.executable).parent / "cao")


def supervisor_turn(match: str, profile: str, message: str) -> dict:
    return {
        "match": match,
        "steps": [
            {"tool": "mcp:cao-mcp-server:handoff", "args": {"agent_profile": profile, "message": message}},
            {"text": "SUPERVISOR GOT: {tool_result}"},
        ],
    }


SCRIPT = [
    # The supervisors' turns.
    supervisor_turn("delegate the edit", "developer", "edit notes.txt and run the check"),
    supervisor_turn("delegate the review", "reviewer", "review it by writing review.txt"),
    supervisor_turn("delegate the question", "asker", "write answer.txt after asking"),
    {"match": "Result of your handoff to asker", "reply": "Supervisor read the asker's result."},
    # The workers' turns.
    {
        "match": "edit notes.txt and run the check",
        "steps": [
            {
                "tool": "shell",
                "args": {"command": "printf 'edited by the developer\\n' > notes.txt && echo CHECK-$((40+2))"},
            },
            {"text": "Developer done: {tool_result}"},
        ],
    },
    {
        "match": "review it by writing review.txt",
        "steps": [
            {"tool": "shell", "args": {"command": "echo reviewed > review.txt"}},
            {"text": "Reviewer tried: {tool_result}"},
        ],
    },
    {
        "match": "write answer.txt after asking",
        "steps": [
            {
                "tool": "shell",
                # Codex asks only for a command that wants to leave its sandbox; Claude drops these keys.
                "args": {
                    "command": "echo answered > answer.txt",
                    "sandbox_permissions": "require_escalated",
                    "justification": "write answer.txt",
                },
            },
            {"text": "Asker wrote it."},
        ],
    },
]
PROFILES = {
    "boss": "---\nname: boss\nrole: supervisor\n---\nYou supervise; you delegate every change.\n",
    # No provider: the worker runs the supervisor's CLI. permissionMode default keeps the CLI's prompts.
    "asker": "---\nname: asker\nrole: developer\npermissionMode: default\n---\nYou work, asking first.\n",
}
CLIS = {
    "claude_code": ("@anthropic-ai/claude-code", CLAUDE_VERSION, "claude", "yes"),
    "codex": ("@openai/codex", CODEX_VERSION, "codex", "y"),
}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, wait_for_mcp_shim):  # noqa: F811
    binaries = [npm_binary(pkg, version, binary) for pkg, version, binary, _ in CLIS.values()]
    root = tmp_path_factory.mktemp("delegation")
    with ScriptedModelServer() as model:
        model.set_script("deleg", SCRIPT)
        cao = real_cli_server(root, binaries, model.cli_env("deleg"))
        home = Path(cao.env["HOME"])
        (home / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True}))
        # The user's own Codex default model (built-in profiles name none).
        (home / ".codex").mkdir()
        (home / ".codex" / "config.toml").write_text('model = "fake-model"\n')
        store_profiles(cao, PROFILES)
        cao.start()
        try:
            yield cao, model, root
        finally:
            cao.cleanup()


def workdir(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir()
    return path


def supervisor(cao: CaoServer, provider: str, work: Path, approval: str) -> str:
    """`cao launch --headless` with --yolo or --auto-approve, as a user would start one."""
    done = subprocess.run(
        [CAO, "launch", "--agents", "boss", "--provider", provider, "--headless", approval]
        + ["--working-directory", str(work), "--json"],
        env=cao.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["id"]


def last_output(cao: CaoServer, tid: str) -> str:
    resp = cao.client.get(f"/terminals/{tid}/output", params={"mode": "last"})
    return resp.json()["output"] if resp.status_code == 200 else ""


def handoff_result(model: ScriptedModelServer, match: str) -> dict:
    turn = [r for r in model.requests("deleg") if not r["side"] and match in r["user_text"] and r["tool_result"]]
    text = turn[-1]["tool_result"]
    return json.loads(text[text.index("{") :])  # Codex puts "Wall time: …\nOutput:" before it


def trace(model: ScriptedModelServer) -> str:
    """What the model was asked and answered, for a failure message."""
    rows = [
        f"{r['side'] and 'side' or 'main'} {r['user_text'][:60]!r} result={r['tool_result'][:300]!r} -> {r['reply']}"
        for r in model.requests("deleg")[-12:]
    ]
    return "\n".join(rows)


def answered(cao: CaoServer, model: ScriptedModelServer, sup: str, what: str) -> None:
    try:
        wait_until(lambda: last_output(cao, sup).startswith("SUPERVISOR GOT:"), TURN_S, message=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nmodel requests:\n{trace(model)}") from None


def delete_all(cao: CaoServer) -> None:
    for term in cao.client.get("/terminals").json():
        cao.client.delete(f"/terminals/{term['id']}")
        wait_until(lambda term=term: not agent_processes(term["id"]), timeout=30, message=f"{term['id']} gone")


@pytest.mark.parametrize("approval", ["--yolo", "--auto-approve"])
@pytest.mark.parametrize("provider", list(CLIS))
def test_a_developer_worker_edits_and_runs_unattended(env, provider: str, approval: str) -> None:
    cao, model, root = env
    work = workdir(root, f"edit-{provider}-{approval.strip('-')}")
    sup = supervisor(cao, provider, work, approval)
    cao.send(sup, "delegate the edit")
    answered(cao, model, sup, "the handoff's answer")
    result = handoff_result(model, "delegate the edit")
    assert result["success"] is True, result
    assert "Developer done:" in result["output"] and "CHECK-42" in result["output"], result
    assert (work / "notes.txt").read_text() == "edited by the developer\n"
    assert cao.client.get(f"/terminals/{result['terminal_id']}").status_code == 404  # torn down
    delete_all(cao)


@pytest.mark.parametrize("provider", list(CLIS))
def test_a_reviewer_worker_is_refused_writes_and_the_supervisor_learns_why(env, provider: str) -> None:
    cao, model, root = env
    work = workdir(root, f"review-{provider}")
    sup = supervisor(cao, provider, work, "--yolo")
    cao.send(sup, "delegate the review")
    answered(cao, model, sup, "the handoff's answer")
    result = handoff_result(model, "delegate the review")
    assert not (work / "review.txt").exists()  # refused by the CLI itself
    output = result["output"] or ""
    if provider == "claude_code":  # Claude does not even offer the denied tools to the model
        assert "is not offered by this request" in output and "Bash" not in output.split("tools:")[-1], output
    else:  # Codex's read-only sandbox refuses the write; the model is told so
        assert "Reviewer tried:" in output and ("Read-only" in output or "denied" in output.lower()), output
    delete_all(cao)


@pytest.mark.parametrize("provider", list(CLIS))
def test_a_worker_that_asks_is_reported_answered_and_its_reply_reaches_the_supervisor(env, provider: str) -> None:
    cao, model, root = env
    answer = CLIS[provider][3]
    work = workdir(root, f"ask-{provider}")
    sup = supervisor(cao, provider, work, "--yolo")
    cao.send(sup, "delegate the question")
    answered(cao, model, sup, "the paused handoff")
    result = handoff_result(model, "delegate the question")
    worker = result["terminal_id"]
    assert result["success"] is False and result["message"].startswith(f"Handoff paused: worker {worker}"), result
    assert "answer_user_prompt" in result["message"] and "answer.txt" in result["message"], result  # the question
    assert cao.status(worker) == "waiting_user_answer" and not (work / "answer.txt").exists()

    async def answer_it() -> dict:
        async with mcp_session(agent_env(cao, sup)) as session:
            return await call(session, "answer_user_prompt", terminal_id=worker, answer=answer)

    assert anyio.run(answer_it)["success"] is True
    wait_until(
        lambda: last_output(cao, sup) == "Supervisor read the asker's result.",
        TURN_S,
        message="the worker's reply delivered to the supervisor",
    )
    assert (work / "answer.txt").read_text() == "answered\n"
    wait_until(lambda: cao.client.get(f"/terminals/{worker}").status_code == 404, 30, message="worker removed")
    delete_all(cao)
