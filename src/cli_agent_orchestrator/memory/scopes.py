"""The scopes a memory lives in and which of them an agent sees.

A memory's scope is global (scope id ""), project (the git repository of the agent's working
directory, or CAO_PROJECT_ID), session (its session name) or agent (its profile). An agent
reads and writes only its own session's, profile's and project's memories and the global ones;
the user (CLI, HTTP) reads all. Precedence, narrowest first: session > agent > project > global.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import InvalidInput

SCOPES = ("global", "project", "session", "agent")
PRECEDENCE = ("session", "agent", "project", "global")
TYPES = ("user", "feedback", "project", "reference")
SORTS = ("recency", "score", "usage")  # how a recall orders what it finds
WORKTREES = "worktrees"  # a linked worktree's git dir is <repository>/.git/worktrees/<name>


@dataclass(frozen=True)
class AgentScopes:
    """The scope ids of one agent: what its `project`, `session` and `agent` scopes mean."""

    terminal_id: str
    agent_profile: str
    session: str
    project: str

    def scope_id(self, scope: str) -> str:
        return {"global": "", "project": self.project, "session": self.session, "agent": self.agent_profile}[scope]

    def visible(self) -> list[tuple[str, str]]:
        """Every (scope, scope id) it may read, narrowest first."""
        return [(scope, self.scope_id(scope)) for scope in PRECEDENCE]


def check_scope(scope: str) -> str:
    if scope not in SCOPES:
        raise InvalidInput(f"invalid scope {scope!r}: use one of {', '.join(SCOPES)}")
    return scope


def check_type(memory_type: str) -> str:
    if memory_type not in TYPES:
        raise InvalidInput(f"invalid memory_type {memory_type!r}: use one of {', '.join(TYPES)}")
    return memory_type


def project_of(directory: str, project_id: str | None = None) -> str:
    """The project a working directory belongs to: `project_id` (CAO_PROJECT_ID) when set, else the
    top of its git repository (a linked worktree counts as its main repository, so a worker in its
    own worktree shares its project's memories), else the directory itself."""
    if project_id:
        return project_id
    start = Path(directory).expanduser()
    for folder in (start, *start.parents):
        dot_git = folder / ".git"
        if dot_git.is_dir():
            return str(folder)
        if dot_git.is_file():
            return _main_repository(dot_git) or str(folder)
    return str(start)


def _main_repository(dot_git_file: Path) -> str | None:
    """A worktree's `.git` file says `gitdir: <repository>/.git/worktrees/<name>`."""
    try:
        line = dot_git_file.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    if not line.startswith("gitdir:"):
        return None
    git_dir = Path(line.removeprefix("gitdir:").strip())
    if not git_dir.is_absolute():
        git_dir = (dot_git_file.parent / git_dir).resolve()
    if git_dir.parent.name == WORKTREES and git_dir.parent.parent.name == ".git":
        return str(git_dir.parent.parent.parent)
    return None
