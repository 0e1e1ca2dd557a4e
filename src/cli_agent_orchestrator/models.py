"""Domain values shared by every layer: statuses, terminals, inbox messages.

Plain dataclasses and enums; the HTTP edge has its own pydantic models.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

# Anchored with \A…\Z, not ^…$: `$` also matches before a trailing newline, so
# `.match("leak\n")` would pass a name that tmux then treats differently.
TERMINAL_ID_RE = re.compile(r"\A[a-f0-9]{8}\Z")
# tmux-safe names for sessions, windows and profiles: no ':' '.' or spaces that
# tmux would parse as target syntax, no '#' it would expand, nothing a shell would.
SAFE_NAME_RE = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_-]{0,63}\Z")
MODEL_RE = re.compile(r"\A[A-Za-z0-9._:/-]{1,128}\Z")
SESSION_PREFIX = "cao-"


class TerminalStatus(StrEnum):
    UNKNOWN = "unknown"
    IDLE = "idle"
    PROCESSING = "processing"
    COMPLETED = "completed"
    WAITING_USER_ANSWER = "waiting_user_answer"
    ERROR = "error"

    @property
    def is_ready(self) -> bool:
        """Ready to take new input (inbox delivery, a new turn)."""
        return self in (TerminalStatus.IDLE, TerminalStatus.COMPLETED)


class MessageStatus(StrEnum):
    PENDING = "pending"
    DELIVERING = "delivering"  # claimed by one deliverer; never visible twice
    DELIVERED = "delivered"
    FAILED = "failed"


class OrchestrationType(StrEnum):
    SEND_MESSAGE = "send_message"
    HANDOFF = "handoff"
    ASSIGN = "assign"


@dataclass(frozen=True)
class Worktree:
    """A worker's own `git worktree`: where it works, on which new branch, made from which
    repository at which commit. `state` is "active" while its terminal lives; when the
    terminal is deleted it becomes "removed" (the directory went, the branch stays) or
    "kept" (`note` says why: uncommitted changes, or git refused)."""

    path: str
    branch: str
    repository: str
    base: str
    state: str = "active"
    note: str | None = None


@dataclass
class Terminal:
    id: str
    session_name: str
    window_name: str
    provider: str
    agent_profile: str
    working_directory: str
    caller_id: str | None = None
    model: str | None = None
    allowed_tools: list[str] | None = None
    status: TerminalStatus = TerminalStatus.UNKNOWN
    status_source: str | None = None
    status_reason: str | None = None
    gone: bool = False
    created_at: str = ""
    last_active: str = ""
    worktree: Worktree | None = None  # its own git worktree (use_worktree), if any
    host: str | None = None  # the registered host it runs on; None: this machine
    # A workflow step's agent: its CAO_WORKFLOW_* identity (run, step, generation); None: none.
    workflow_step: dict[str, str] | None = None
    # What workers know of each other (services/terminals/labels.py bounds them): what this agent
    # is for, the group path it belongs to (siblings share its first elements), free metadata.
    description: str | None = None
    group: list[str] | None = None
    metadata: dict | None = None
    extra: dict = field(default_factory=dict)


@dataclass
class InboxMessage:
    id: int
    sender_id: str
    receiver_id: str
    message: str
    status: MessageStatus
    created_at: str
    delivered_at: str | None = None
    error: str | None = None
    paste_mark: str | None = None  # where its paste lands (set while DELIVERING)
