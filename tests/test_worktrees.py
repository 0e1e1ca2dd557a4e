"""use_worktree and engine, end to end: a real cao-server with mock agents in tmux, real git
repositories in temporary directories, and handoff/assign through the official MCP client.

A worker with `use_worktree` works in its own `git worktree` on a new branch; the caller's
working tree never changes, and what the worker commits is on that branch.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cao_support import CaoServer
from mcp_support import agent_env, call, mcp_session

from cli_agent_orchestrator.errors import InvalidInput
from cli_agent_orchestrator.services.worktrees import Worktrees

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None or shutil.which("git") is None, reason="tmux and git are needed"
)

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
}


@pytest.fixture(scope="module")
def cao(cao_module: CaoServer) -> CaoServer:
    """One server for the module: each test makes its own repository and sessions."""
    return cao_module


# --- helpers -------------------------------------------------------------------------------
def git(cwd: Path | str, *args: str, check: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | GIT_IDENTITY
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if check:
        assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


def make_repo(path: Path) -> Path:
    """A repository with one commit: README and sub/notes.txt."""
    (path / "sub").mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "README").write_text("hello\n")
    (path / "sub" / "notes.txt").write_text("notes\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "first")
    return path


def tree_state(repo: Path) -> tuple[str, str, str, list[str]]:
    """What the caller sees: its branch, its HEAD commit, `git status` and its files."""
    files = sorted(str(p.relative_to(repo)) for p in repo.rglob("*") if ".git" not in p.parts)
    return (
        git(repo, "branch", "--show-current"),
        git(repo, "rev-parse", "HEAD"),
        git(repo, "status", "--porcelain"),
        files,
    )


def branch_exists(repo: Path, branch: str) -> bool:
    return (
        subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], cwd=repo, capture_output=True
        ).returncode
        == 0
    )


def worktree_paths(repo: Path) -> list[str]:
    listing = git(repo, "worktree", "list", "--porcelain")
    return [line.split(" ", 1)[1] for line in listing.splitlines() if line.startswith("worktree ")]


def pane_cwd(cao: CaoServer, terminal_id: str) -> str:
    return cao.client.get(f"/terminals/{terminal_id}/working-directory").json()["working_directory"]


def terminal_ids(cao: CaoServer) -> set[str]:
    return {t["id"] for t in cao.client.get("/terminals").json()}


def session_names(cao: CaoServer) -> set[str]:
    return {s["name"] for s in cao.client.get("/sessions").json()}


def worktree_dirs(cao: CaoServer) -> set[str]:
    root = cao.home / "worktrees"
    return {p.name for p in root.iterdir()} if root.is_dir() else set()


def mcp_env(cao: CaoServer, terminal_id: str) -> dict[str, str]:
    return agent_env(cao, terminal_id)


def same_path(a: str, b: str | Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


# --- creating and deleting ------------------------------------------------------------------
def test_worker_works_on_its_own_branch_and_the_callers_tree_stays_untouched(cao: CaoServer, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    before = tree_state(repo)
    resp = cao.client.post(
        "/sessions",
        params={
            "agent_profile": "developer",
            "provider": "mock_cli",
            "working_directory": str(repo),
            "use_worktree": "true",
        },
    )
    assert resp.status_code == 201, resp.text
    term = resp.json()
    tid, wt = term["id"], term["worktree"]
    assert wt["branch"] == f"cao/developer-{tid}" and wt["state"] == "active"
    assert same_path(wt["path"], cao.home / "worktrees" / tid) and same_path(wt["repository"], repo)
    assert wt["base"] == before[1]
    assert same_path(term["working_directory"], wt["path"]) and same_path(pane_cwd(cao, tid), wt["path"])
    assert cao.client.get(f"/terminals/{tid}").json()["worktree"]["branch"] == wt["branch"]

    # The worker's work: a new file, committed in its worktree.
    worktree = Path(wt["path"])
    (worktree / "feature.txt").write_text("done by the worker\n")
    git(worktree, "add", "feature.txt")
    git(worktree, "commit", "-q", "-m", "worker's change")

    assert tree_state(repo) == before  # same branch, same HEAD, clean, no new file
    assert git(repo, "show", f"{wt['branch']}:feature.txt") == "done by the worker"

    deleted = cao.client.delete(f"/terminals/{tid}")
    assert deleted.status_code == 200, deleted.text
    answer = deleted.json()
    assert answer["success"] is True and answer["worktree"]["state"] == "removed"
    assert answer["worktree"]["branch"] == wt["branch"]
    assert not worktree.exists() and not any(same_path(p, worktree) for p in worktree_paths(repo))
    assert branch_exists(repo, wt["branch"])  # the worker's commits stay reachable
    assert git(repo, "show", f"{wt['branch']}:feature.txt") == "done by the worker"
    snapshot = json.loads((cao.home / "logs" / "terminal" / f"{tid}.snapshot.json").read_text())
    assert snapshot["worktree"]["state"] == "removed" and snapshot["worktree"]["branch"] == wt["branch"]
    assert tree_state(repo) == before


def test_worktree_with_uncommitted_changes_is_kept_and_reported(cao: CaoServer, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    before = tree_state(repo)
    # The caller works in repo/sub; its worker, created in the caller's session without a
    # working_directory, branches from the caller's repository and starts in sub/ of its worktree.
    sup = cao.create_session("code_supervisor", working_directory=str(repo / "sub"))
    resp = cao.client.post(
        f"/sessions/{sup['session_name']}/terminals",
        params={"agent_profile": "developer", "caller_id": sup["id"], "use_worktree": "true"},
    )
    assert resp.status_code == 201, resp.text
    term = resp.json()
    wt = term["worktree"]
    assert same_path(wt["repository"], repo) and wt["branch"] == f"cao/developer-{term['id']}"
    assert same_path(pane_cwd(cao, term["id"]), Path(wt["path"]) / "sub")
    assert term["engine"] is None

    (Path(wt["path"]) / "sub" / "draft.txt").write_text("not committed yet\n")
    answer = cao.client.delete(f"/terminals/{term['id']}").json()
    assert answer["success"] is True
    kept = answer["worktree"]
    assert kept["state"] == "kept" and "uncommitted changes" in kept["note"], kept
    assert (Path(wt["path"]) / "sub" / "draft.txt").read_text() == "not committed yet\n"
    assert any(same_path(p, wt["path"]) for p in worktree_paths(repo)) and branch_exists(repo, wt["branch"])
    snapshot = json.loads((cao.home / "logs" / "terminal" / f"{term['id']}.snapshot.json").read_text())
    assert snapshot["worktree"]["state"] == "kept"
    assert tree_state(repo) == before
    cao.client.delete(f"/sessions/{sup['session_name']}")


def test_session_delete_reports_each_workers_worktree(cao: CaoServer, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    term = cao.create_session("developer", working_directory=str(repo), use_worktree="true")
    answer = cao.client.delete(f"/sessions/{term['session_name']}").json()
    assert answer["success"] is True
    assert [(w["terminal_id"], w["state"]) for w in answer["worktrees"]] == [(term["id"], "removed")]
    assert not Path(term["worktree"]["path"]).exists() and branch_exists(repo, term["worktree"]["branch"])


# --- bad input: a clear 400, nothing half-created -------------------------------------------
def test_use_worktree_outside_git_is_a_400_and_creates_nothing(cao: CaoServer, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    empty_repo = tmp_path / "empty"
    empty_repo.mkdir()
    git(empty_repo, "init", "-q", "-b", "main")
    terms, sessions, dirs = terminal_ids(cao), session_names(cao), worktree_dirs(cao)
    for where, reason in ((plain, "is not inside a git working tree"), (empty_repo, "has no commit yet")):
        resp = cao.client.post(
            "/sessions",
            params={
                "agent_profile": "developer",
                "provider": "mock_cli",
                "working_directory": str(where),
                "use_worktree": "true",
                "session_name": "wt-refused",
            },
        )
        assert resp.status_code == 400 and reason in resp.json()["detail"], resp.text
        step = cao.client.post(
            "/terminals/run-step",
            json={
                "provider": "mock_cli",
                "agent": "developer",
                "prompt": "x",
                "working_directory": str(where),
                "use_worktree": True,
            },
        )
        assert step.status_code == 400 and reason in step.json()["detail"], step.text
    assert (terminal_ids(cao), session_names(cao), worktree_dirs(cao)) == (terms, sessions, dirs)
    assert git(empty_repo, "branch", "--list") == ""


def test_a_branch_git_refuses_is_a_400_with_gits_reason_and_creates_nothing(cao: CaoServer, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    git(repo, "branch", "cao")  # a branch named `cao` leaves no room for branches `cao/...`
    branches, before = git(repo, "branch", "--list"), tree_state(repo)
    sup = cao.create_session("code_supervisor", working_directory=str(repo))
    terms, dirs = terminal_ids(cao), worktree_dirs(cao)
    resp = cao.client.post(
        f"/sessions/{sup['session_name']}/terminals",
        params={"agent_profile": "developer", "caller_id": sup["id"], "use_worktree": "true"},
    )
    assert resp.status_code == 400, resp.text
    detail = resp.json()["detail"]
    assert detail.startswith("use_worktree: git could not create a worktree on branch 'cao/developer-")
    assert "refs/heads/cao" in detail  # git's own reason
    assert (terminal_ids(cao), worktree_dirs(cao)) == (terms, dirs)
    assert git(repo, "branch", "--list") == branches and len(worktree_paths(repo)) == 1
    assert tree_state(repo) == before
    cao.client.delete(f"/sessions/{sup['session_name']}")


@pytest.mark.anyio
async def test_a_worktree_branch_that_already_exists_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    git(repo, "branch", "cao/developer-0000abcd")
    worktrees = Worktrees(tmp_path / "home", os.environ)
    with pytest.raises(InvalidInput, match=r"branch 'cao/developer-0000abcd' already exists"):
        await worktrees.create(str(repo), "0000abcd", "developer")
    assert not (tmp_path / "home" / "worktrees" / "0000abcd").exists() and len(worktree_paths(repo)) == 1
    # The same id with a fresh branch name works, and a worker that never started leaves nothing.
    made, start_in = await worktrees.create(str(repo / "sub"), "0000abce", "developer")
    assert same_path(start_in, Path(made.path) / "sub") and branch_exists(repo, made.branch)
    released = await worktrees.release(made, discard=True)
    assert released.state == "removed" and not Path(made.path).exists() and not branch_exists(repo, made.branch)


# --- handoff and assign through the MCP client ----------------------------------------------
@pytest.mark.anyio
async def test_handoff_and_assign_with_use_worktree_name_the_branch(cao: CaoServer, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    before = tree_state(repo)
    sup = cao.create_session("code_supervisor", working_directory=str(repo))
    async with mcp_session(mcp_env(cao, sup["id"])) as session:
        handed = await call(session, "handoff", agent_profile="developer", message="do it", use_worktree=True)
        assert handed["success"] is True, handed
        assert handed["output"].strip() == "MOCK: do it"
        branch = handed["branch"]
        assert branch == f"cao/developer-{handed['terminal_id']}"
        assert f"branch {branch}" in handed["message"] and "worktree was removed" in handed["message"]
        assert branch_exists(repo, branch) and worktree_dirs(cao).isdisjoint({handed["terminal_id"]})

        assigned = await call(session, "assign", agent_profile="developer", message="work on it", use_worktree=True)
        assert assigned["success"] is True, assigned
        worker = assigned["terminal_id"]
        assert assigned["branch"] == f"cao/developer-{worker}" and f"branch {assigned['branch']}" in assigned["message"]
        term = cao.client.get(f"/terminals/{worker}").json()
        assert term["worktree"]["branch"] == assigned["branch"]
        await asyncio.to_thread(cao.wait_status, worker, {"idle", "completed"}, 30)
        assert same_path(pane_cwd(cao, worker), term["worktree"]["path"])
        deleted = await call(session, "delete_terminal", terminal_id=worker)
        assert deleted["success"] is True and assigned["branch"] in deleted["message"]
        assert not Path(term["worktree"]["path"]).exists() and branch_exists(repo, assigned["branch"])

        # engine: accepted and ignored, with a note, for a CLI without engines; bad values refused.
        noted = await call(session, "handoff", agent_profile="developer", message="e", engine="v2")
        assert noted["success"] is True and "engine v2 was ignored: mock_cli has no engines" in noted["message"]
        assert "branch" not in noted
        bogus = await call(session, "assign", agent_profile="developer", message="e", engine="v9")
        assert bogus["success"] is False and "invalid engine 'v9'" in bogus["message"]
    assert tree_state(repo) == before
    cao.client.delete(f"/sessions/{sup['session_name']}")


# --- engine -------------------------------------------------------------------------------------
def test_engine_is_checked_before_anything_is_allocated(cao: CaoServer) -> None:
    terms, sessions = terminal_ids(cao), session_names(cao)
    base = {"agent_profile": "developer", "session_name": "engine-check"}
    # kiro-cli is not installed here: the engine answer comes first all the same.
    kas = cao.client.post("/sessions", params={**base, "provider": "kiro_cli", "engine": "kas"})
    assert kas.status_code == 400 and kas.json()["detail"] == "engine kas is not supported; use v2", kas.text
    v2_kiro = cao.client.post("/sessions", params={**base, "provider": "kiro_cli", "engine": "v2"})
    assert v2_kiro.status_code == 400 and "cao install developer" in v2_kiro.json()["detail"]  # on to preflight
    bogus = cao.client.post("/sessions", params={**base, "provider": "mock_cli", "engine": "bogus"})
    assert bogus.status_code == 400 and "invalid engine 'bogus'" in bogus.json()["detail"]
    step_bogus = cao.client.post(
        "/terminals/run-step", json={"provider": "mock_cli", "agent": "developer", "prompt": "x", "engine": "bogus"}
    )
    assert step_bogus.status_code == 400, step_bogus.text
    assert (terminal_ids(cao), session_names(cao)) == (terms, sessions)

    accepted = cao.client.post("/sessions", params={**base, "provider": "mock_cli", "engine": "v2"})
    assert accepted.status_code == 201 and accepted.json()["engine"] is None, accepted.text
    cao.client.delete(f"/sessions/{accepted.json()['session_name']}")


def test_run_step_accepts_engine_and_use_worktree(cao: CaoServer, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    before = tree_state(repo)
    step = cao.client.post(
        "/terminals/run-step",
        json={
            "provider": "mock_cli",
            "agent": "developer",
            "prompt": "hello",
            "engine": "v2",
            "working_directory": str(repo),
            "use_worktree": True,
        },
    )
    assert step.status_code == 200, step.text
    answer = step.json()
    assert answer["last_message"].strip() == "MOCK: hello" and answer["engine"] is None
    assert answer["worktree"]["branch"] == f"cao/developer-{answer['terminal_id']}"
    assert answer["worktree"]["state"] == "removed" and branch_exists(repo, answer["worktree"]["branch"])
    assert tree_state(repo) == before
    both = cao.client.post(
        "/terminals/run-step",
        json={"agent": "developer", "prompt": "x", "use_worktree": True, "reuse_terminal_id": "0badc0de"},
    )
    assert both.status_code == 400 and "cannot be combined" in both.json()["detail"]
