"""A session's environment (`cao launch --env`, `env_vars` of POST /sessions and of the ops
server's `launch_session`) reaches the launched agent and every agent later started in that
session, and no other; it is in no answer and no log; and `--resume-session-id` is refused with
the reason where the CLI cannot resume, and checked where it can (docs/configuration.md,
"A session's environment"; docs/cli.md).

The agents are real mock agents in cao's tmux; their environment is read from /proc.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psutil
import pytest
from cao_support import CaoServer, cli, wait_until
from mcp_support import call
from test_ops_mcp import ops_env, ops_session

from cli_agent_orchestrator.providers import claude_code, codex, gemini_cli, qwen_cli
from cli_agent_orchestrator.providers.base import LaunchContext

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")

SECRET = "s3cret-value-of-the-session"


def agent_environ(terminal_id: str) -> dict[str, str]:
    """The environment of the agent process carrying this terminal's identity."""

    def find() -> dict[str, str] | None:
        for proc in psutil.process_iter():
            try:
                env = proc.environ()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            if env.get("CAO_TERMINAL_ID") == terminal_id:
                return env
        return None

    return wait_until(find, timeout=20, interval=0.2, message=f"the process of terminal {terminal_id}")


def worker_in(cao: CaoServer, session: str) -> dict:
    resp = cao.client.post(
        f"/sessions/{session}/terminals", params={"agent_profile": "developer", "provider": "mock_cli"}
    )
    assert resp.status_code == 201, resp.text
    return resp.json()


def test_the_launch_env_reaches_the_agent_and_every_later_worker_of_its_session_only(cao: CaoServer) -> None:
    launched = cli(
        cao, "launch", "--agents", "developer", "--provider", "mock_cli", "--headless", "--yolo", "--json",
        "--env", f"SESSION_SECRET={SECRET}", "--env", "SHARED=from-launch",
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    first = json.loads(launched.stdout)
    session = first["session_name"]
    assert agent_environ(first["id"])["SESSION_SECRET"] == SECRET

    later = worker_in(cao, session)
    assert agent_environ(later["id"])["SESSION_SECRET"] == SECRET
    assert agent_environ(later["id"])["SHARED"] == "from-launch"

    other = cao.create_session(provider="mock_cli")
    assert "SESSION_SECRET" not in agent_environ(other["id"])

    # In no answer and no log.
    for path in ("/terminals", f"/sessions/{session}", f"/terminals/{later['id']}"):
        assert SECRET not in cao.client.get(path).text
    logs = "".join(p.read_text(errors="replace") for p in (cao.home / "logs").rglob("*") if p.is_file())
    assert SECRET not in logs

    # A deleted session's variables are gone: a new session of the same name starts without them.
    assert cao.client.delete(f"/sessions/{session}").status_code == 200
    again = cao.client.post(
        "/sessions", params={"agent_profile": "developer", "provider": "mock_cli", "session_name": session}
    )
    assert again.status_code == 201, again.text
    assert "SESSION_SECRET" not in agent_environ(worker_in(cao, session)["id"])


def test_names_that_are_cao_s_own_stay_refused_and_nothing_is_started(cao: CaoServer) -> None:
    before = cao.client.get("/terminals").json()
    for name in ("CAO_TERMINAL_ID", "CAO_MCP_TOKEN", "1BAD", "A B"):
        resp = cao.client.post(
            "/sessions", params={"agent_profile": "developer", "provider": "mock_cli"}, json={"env_vars": {name: "x"}}
        )
        assert resp.status_code == 400, (name, resp.text)
        assert "env_vars" in resp.json()["detail"]
    assert cao.client.get("/terminals").json() == before


@pytest.mark.anyio
async def test_the_ops_servers_launch_session_takes_env_vars_for_the_whole_session(cao: CaoServer) -> None:
    async with ops_session(ops_env(cao)) as session:
        launched = await call(
            session, "launch_session", agent_profile="developer", provider="mock_cli", env_vars={"OPS_VAR": SECRET}
        )
        assert launched["success"] is True, launched
        assert agent_environ(launched["terminal_id"])["OPS_VAR"] == SECRET
        later = worker_in(cao, launched["session_name"])
        assert agent_environ(later["id"])["OPS_VAR"] == SECRET
        refused = await call(
            session, "launch_session", agent_profile="developer", provider="mock_cli", env_vars={"CAO_HOME_DIR": "/x"}
        )
        assert refused["success"] is False and "CAO_HOME_DIR" in refused["message"], refused


# --- --resume-session-id --------------------------------------------------------------------------
def test_resume_is_refused_with_the_reason_where_the_cli_cannot_resume(cao: CaoServer) -> None:
    before = cao.client.get("/terminals").json()
    resp = cao.client.post(
        "/sessions",
        params={"agent_profile": "developer", "provider": "mock_cli", "resume_session_id": "abc-123"},
    )
    assert resp.status_code == 400, resp.text
    assert "cannot resume a conversation of its own" in resp.json()["detail"]
    # Where a CLI can resume, what is not a conversation id (an option, a shell word) is refused
    # before anything starts, whether or not the CLI is installed.
    for bad in ("--dangerously-skip-permissions", "$(touch /tmp/x)", "a b", "x" * 129):
        resp = cao.client.post(
            "/sessions",
            params={"agent_profile": "developer", "provider": "claude_code", "resume_session_id": bad},
        )
        assert resp.status_code in (400, 422), (bad, resp.text)
    assert cao.client.get("/terminals").json() == before
    shown = cli(cao, "launch", "--agents", "developer", "--provider", "mock_cli", "--headless", "--yolo",
                "--resume-session-id", "abc-123")  # fmt: skip
    assert shown.returncode != 0 and "cannot resume" in shown.stderr, shown.stderr


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        (gemini_cli, ["--resume", "0f9a-uuid"]),
        (qwen_cli, ["--resume", "0f9a-uuid"]),
    ],
    ids=lambda v: getattr(v, "__name__", "").rsplit(".", 1)[-1] or None,
)
def test_each_cli_that_can_resume_is_given_its_own_option(module, expected, tmp_path: Path) -> None:
    ctx = LaunchContext("0a0b0c0d", "dev", "", str(tmp_path), tmp_path, resume_session_id="0f9a-uuid")
    (tmp_path / "tmp").mkdir()
    argv = module.build_launch(ctx).argv
    assert argv[-2:] == expected, argv
    assert module.PROVIDER.resumes


def test_claude_resumes_without_a_session_id_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    ctx = LaunchContext("0a0b0c0d", "dev", "", str(tmp_path), tmp_path, resume_session_id="0f9a-uuid")
    argv = claude_code.build_launch(ctx).argv
    assert argv[argv.index("--resume") + 1] == "0f9a-uuid" and "--session-id" not in argv


def test_codex_resumes_through_its_subcommand(tmp_path: Path) -> None:
    ctx = LaunchContext("0a0b0c0d", "dev", "", str(tmp_path), tmp_path, resume_session_id="0f9a-uuid")
    script = Path(codex.build_launch(ctx).argv[1]).read_text()
    words = script.split("exec ", 1)[1].split()
    assert words[1] == "resume" and words[-1] == "0f9a-uuid", words


def test_launch_memory_is_accepted_where_memory_is_on_and_refused_with_the_reason_where_off(cao_factory) -> None:
    on = cao_factory("on").start()
    shown = cli(on, "launch", "--agents", "developer", "--provider", "mock_cli", "--headless", "--yolo", "--memory",
                "--json")  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    store = on.home / "agent-store"
    store.mkdir(parents=True, exist_ok=True)
    (store / "forgetful.md").write_text("---\nname: forgetful\nmemory: false\n---\nNo memory.\n")
    refused = on.client.post(
        "/sessions", params={"agent_profile": "forgetful", "provider": "mock_cli", "memory_manager": True}
    )
    assert refused.status_code == 400 and "memory: false" in refused.json()["detail"]
    off = cao_factory("off", CAO_MEMORY_ENABLED="false").start()
    before = off.client.get("/terminals").json()
    denied = cli(off, "launch", "--agents", "developer", "--provider", "mock_cli", "--headless", "--yolo", "--memory")
    assert denied.returncode != 0 and "CAO_MEMORY_ENABLED=false" in denied.stderr
    assert off.client.get("/terminals").json() == before
