"""Worktrees (`use_worktree`): a worker gets its own `git worktree`, on a new branch
`cao/<profile>-<terminal id>` started at the HEAD commit of the repository it would otherwise
work in, checked out under `<cao home>/worktrees/<terminal id>`.

Invariant: the caller's working tree is never touched; a worktree is made whole or not at all;
a worker's uncommitted work is never deleted (its worktree is removed only when clean) and its
branch, which holds its commits, stays, unless the worker never started: then nothing stays.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import InvalidInput
from ..models import SAFE_NAME_RE, Worktree
from ..private_files import private_dir

log = logging.getLogger(__name__)

WORKTREES_DIR = "worktrees"  # under the cao home: one directory per terminal id
BRANCH_PREFIX = "cao/"
# Every git call here is local (no fetch). A lookup that takes longer than GIT_TIMEOUT_S is stuck
# on a lock; checking out, scanning or removing a large tree may take minutes, not more.
GIT_TIMEOUT_S = 30.0
GIT_TREE_TIMEOUT_S = 300.0
MAX_GIT_MESSAGE = 1000  # characters of git's own error text carried into an error message
# Variables that would point git at another repository than the one we name.
_GIT_REDIRECTS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY")


@dataclass(frozen=True)
class GitResult:
    code: int  # -1: git could not be run or did not finish
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0

    @property
    def message(self) -> str:
        text = (self.err.strip() or self.out.strip() or f"git exited with status {self.code}").replace("\n", "; ")
        return text[:MAX_GIT_MESSAGE]


def branch_name(profile_name: str, terminal_id: str) -> str:
    """`cao/<profile>-<terminal id>`; `cao/<terminal id>` for a profile name git or tmux could misread."""
    if SAFE_NAME_RE.match(profile_name):
        return f"{BRANCH_PREFIX}{profile_name}-{terminal_id}"
    return f"{BRANCH_PREFIX}{terminal_id}"


class Worktrees:
    """Creates and releases workers' worktrees. Git runs as an argument list (never a shell),
    with `--` before every path, a timeout, and the server's environment minus anything that
    would redirect it to another repository."""

    def __init__(self, home_dir: Path, environ: Mapping[str, str]):
        self.root = home_dir / WORKTREES_DIR
        self._env = {k: v for k, v in environ.items() if k not in _GIT_REDIRECTS}
        self._env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"})
        # Worktree and branch changes of one repository must not interleave (check, then create).
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, repository: str) -> asyncio.Lock:
        return self._locks.setdefault(os.path.realpath(repository), asyncio.Lock())

    async def create(self, workdir: str, terminal_id: str, profile_name: str) -> tuple[Worktree, str]:
        """A new worktree for terminal `terminal_id`, from the repository `workdir` is in;
        and the directory the worker starts in (`workdir`'s counterpart inside it).
        Raises InvalidInput (400) with git's reason; then nothing was created."""
        found = await self._git(["rev-parse", "--show-toplevel"], workdir)
        if found.code == -1:
            raise InvalidInput(f"use_worktree: {found.message}")
        if not found.ok:
            raise InvalidInput(
                f"use_worktree: {workdir[:200]!r} is not inside a git working tree, so there is no "
                f"repository to branch from (git: {found.message})"
            )
        repository = found.out.strip()
        head = await self._git(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], repository)
        if not head.ok:
            raise InvalidInput(
                f"use_worktree: repository {repository!r} has no commit yet; a worktree branch needs one to start from"
            )
        base = head.out.strip()
        branch = branch_name(profile_name, terminal_id)
        path = self.root / terminal_id
        async with self._lock(repository):
            if (await self._git(["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], repository)).ok:
                raise InvalidInput(
                    f"use_worktree: branch {branch!r} already exists in {repository!r}; "
                    "delete or rename it, or start the worker again (it gets a new id)"
                )
            if path.exists():
                raise InvalidInput(f"use_worktree: {str(path)!r} already exists; remove it or start the worker again")
            private_dir(self.root)
            added = await self._git(
                ["worktree", "add", "-b", branch, "--", str(path), base], repository, GIT_TREE_TIMEOUT_S
            )
            if not added.ok:
                await self._undo(Worktree(str(path), branch, repository, base))
                raise InvalidInput(
                    f"use_worktree: git could not create a worktree on branch {branch!r}: {added.message}"
                )
        log.info("worktree %s on branch %s (from %s at %s)", path, branch, repository, base[:12])
        return Worktree(str(path), branch, repository, base), _counterpart(workdir, repository, path)

    async def release(self, wt: Worktree, discard: bool = False) -> Worktree:
        """Its terminal is gone: remove the worktree if it has no uncommitted changes, else keep
        it; the branch stays. With `discard` (the worker never started) a branch that is still
        at its start commit goes too. Never raises: the answer says what was done and why."""
        async with self._lock(wt.repository):
            if not os.path.isdir(wt.path):
                await self._git(["worktree", "prune"], wt.repository)
                return replace(wt, state="removed", note="its directory was already gone")
            status = await self._git(["status", "--porcelain", "--untracked-files=normal"], wt.path, GIT_TREE_TIMEOUT_S)
            if not status.ok:
                return self._kept(wt, f"git status failed there: {status.message}")
            changed = [line for line in status.out.splitlines() if line.strip()]
            if changed:
                return self._kept(
                    wt,
                    f"it has uncommitted changes ({len(changed)} path{'s' if len(changed) != 1 else ''}); "
                    f"commit or discard them, then run `git worktree remove {wt.path}`",
                )
            removed = await self._git(["worktree", "remove", "--", wt.path], wt.repository, GIT_TREE_TIMEOUT_S)
            if not removed.ok:
                return self._kept(wt, f"git worktree remove failed: {removed.message}")
            if discard:
                await self._delete_unused_branch(wt)
        log.info("worktree %s removed; branch %s stays", wt.path, wt.branch)
        return replace(wt, state="removed", note=None if discard else f"branch {wt.branch} keeps the worker's commits")

    def _kept(self, wt: Worktree, why: str) -> Worktree:
        log.warning("worktree %s kept (branch %s): %s", wt.path, wt.branch, why)
        return replace(wt, state="kept", note=why)

    async def _undo(self, wt: Worktree) -> None:
        """Take back whatever a failed `git worktree add` left: its directory and a branch
        that is still at the start commit (compare-and-delete, so nobody else's branch goes)."""
        if os.path.lexists(wt.path):
            await self._git(["worktree", "remove", "--force", "--", wt.path], wt.repository, GIT_TREE_TIMEOUT_S)
        await self._git(["worktree", "prune"], wt.repository)
        await self._delete_unused_branch(wt)

    async def _delete_unused_branch(self, wt: Worktree) -> None:
        await self._git(["update-ref", "-d", f"refs/heads/{wt.branch}", wt.base], wt.repository)

    async def _git(self, args: list[str], cwd: str, timeout: float = GIT_TIMEOUT_S) -> GitResult:
        if not os.path.isdir(cwd):
            return GitResult(-1, "", f"{cwd} is not a directory")
        try:
            proc = await asyncio.create_subprocess_exec(
                "git",
                *args,
                cwd=cwd,
                env=self._env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            return GitResult(-1, "", f"cannot run git on cao-server ({exc.strerror}); is git installed?")
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return GitResult(-1, "", f"git {args[0]} did not finish within {timeout:.0f}s")
        return GitResult(proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))


def _counterpart(workdir: str, repository: str, worktree: Path) -> str:
    """Where in the worktree the worker starts: the same subdirectory `workdir` is in the
    repository, if the branch has it; else the worktree's top."""
    rel = os.path.relpath(os.path.realpath(workdir), os.path.realpath(repository))
    if rel == "." or rel.startswith(".."):
        return str(worktree)
    inside = worktree / rel
    return str(inside) if inside.is_dir() else str(worktree)
