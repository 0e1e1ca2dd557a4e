"""Pydantic models at the HTTP edge (inside, cao uses plain dataclasses)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..models import InboxMessage, OrchestrationType, Terminal, Worktree
from ..services.hosts.records import NAME_RE as HOST_NAME_RE
from ..services.terminals.engines import terminal_engine

MAX_TEXT = 1_000_000  # characters in one message; a 100 KB task is routine
MAX_PATH = 4096  # characters in a path (PATH_MAX on Linux)
MAX_NAME = 128  # a profile, provider, model or session name (the services allow at most 128)
# Where an agent runs: a registered host's name (`cao host add NAME`), or "local"; a malformed
# one is a 422 at the edge, an unknown one a 400 from the spawner.
HOST_PATTERN = rf"^{HOST_NAME_RE.pattern}$"
HOST_DESCRIPTION = "a registered host's name (`cao host list`) or local; default: the placement policy"


class WorktreeOut(BaseModel):
    """A worker's own git worktree (`use_worktree`). state: active while the terminal lives;
    after a delete, removed (the branch stays) or kept (`note` says why)."""

    path: str
    branch: str
    repository: str
    base: str
    state: str = "active"
    note: str | None = None

    @classmethod
    def of(cls, w: Worktree) -> WorktreeOut:
        return cls(path=w.path, branch=w.branch, repository=w.repository, base=w.base, state=w.state, note=w.note)


class TerminalOut(BaseModel):
    id: str
    name: str
    session_name: str
    provider: str
    agent_profile: str
    working_directory: str
    caller_id: str | None = None
    model: str | None = None
    allowed_tools: list[str] | None = None
    status: str
    status_source: str | None = None
    status_reason: str | None = None
    gone: bool = False
    created_at: str = ""
    last_active: str = ""
    engine: str | None = None  # Kiro CLI's agent engine; null for CLIs without engines
    worktree: WorktreeOut | None = None
    host: str | None = None  # the registered host it runs on; null: cao-server's own machine

    @classmethod
    def of(cls, t: Terminal) -> TerminalOut:
        return cls(
            id=t.id,
            name=t.window_name,
            session_name=t.session_name,
            provider=t.provider,
            agent_profile=t.agent_profile,
            working_directory=t.working_directory,
            caller_id=t.caller_id,
            model=t.model,
            allowed_tools=t.allowed_tools,
            status=t.status.value,
            status_source=t.status_source,
            status_reason=t.status_reason,
            gone=t.gone,
            created_at=t.created_at,
            last_active=t.last_active,
            engine=terminal_engine(t.provider),
            worktree=WorktreeOut.of(t.worktree) if t.worktree else None,
            host=t.host,
        )


class InitialMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    initial_message: str | None = Field(None, max_length=MAX_TEXT)
    initial_message_orchestration_type: OrchestrationType | None = None


class SessionBody(InitialMessage):
    # Variables for the agent's environment only (cao never stores them); checked by the spawner.
    env_vars: dict[str, str] | None = Field(None, max_length=64)


class InputBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str = Field(..., min_length=1, max_length=MAX_TEXT)
    sender_id: str | None = Field(None, max_length=128)
    orchestration_type: OrchestrationType | None = None


class KeyBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(..., max_length=16)


class InboxPost(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str = Field(..., min_length=1, max_length=MAX_TEXT)
    sender_id: str = Field(..., min_length=1, max_length=128)


class InboxMessageOut(BaseModel):
    id: int
    sender_id: str
    receiver_id: str
    message: str
    status: str
    created_at: str
    delivered_at: str | None = None
    error: str | None = None

    @classmethod
    def of(cls, m: InboxMessage) -> InboxMessageOut:
        return cls(
            id=m.id,
            sender_id=m.sender_id,
            receiver_id=m.receiver_id,
            message=m.message,
            status=m.status.value,
            created_at=m.created_at,
            delivered_at=m.delivered_at,
            error=m.error,
        )
