"""Pydantic models at the HTTP edge (inside, cao uses plain dataclasses), and the rules the
OpenAPI document states: each a size FastAPI enforces, or a service's own check written down
where clients read it (`stated`, `refused`), so that the document tells what the server does.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from ..flows.spec import FLOW_NAME_RE
from ..models import (
    MODEL_RE,
    SAFE_NAME_RE,
    SESSION_PREFIX,
    InboxMessage,
    MessageStatus,
    OrchestrationType,
    Terminal,
    Worktree,
)
from ..services.hosts.records import NAME_RE as HOST_NAME_RE
from ..services.input import NAMED_KEYS
from ..services.terminals.engines import terminal_engine
from ..services.terminals.labels import (
    MAX_DESCRIPTION,
    MAX_GROUP_ITEM,
    MAX_GROUP_ITEMS,
    MAX_METADATA_BYTES,
    MAX_METADATA_KEY,
)
from ..workflows.specs import NAME_RE as WORKFLOW_NAME_RE
from .errors import Error

MAX_TEXT = 1_000_000  # characters in one message; a 100 KB task is routine
MAX_PATH = 4096  # characters in a path (PATH_MAX on Linux)
MAX_NAME = 128  # a profile, provider, model or session name (the services allow at most 128)
# Where an agent runs: a registered host's name (`cao host add NAME`), or "local"; a malformed
# one is a 422 at the edge, an unknown one a 400 from the spawner.
HOST_PATTERN = rf"^{HOST_NAME_RE.pattern}$"
HOST_DESCRIPTION = "a registered host's name (`cao host list`) or local; default: the placement policy"


def json_pattern(regex: re.Pattern[str], *others: str) -> str:
    """A Python regex that is matched whole (`\\A…\\Z`, or used with fullmatch) as the
    JSON Schema pattern OpenAPI states (the services' own rule, so the two cannot drift);
    `others`: more alternatives that also pass."""
    body = regex.pattern.removeprefix("\\A").removesuffix("\\Z")
    return f"^(?:{'|'.join((body, *others))})$"


def stated(**schema: Any) -> dict[str, Any]:
    """What a service checks itself, answering with its own status and one-line reason as it
    always has (mostly 400): stated in OpenAPI (`json_schema_extra`) without FastAPI enforcing
    it, which would answer 422 with pydantic's words instead."""
    return schema


def refused(why: str) -> dict[int | str, dict[str, Any]]:
    """A route's own 400: what only the service can judge (a file, a name that must exist, a
    rule across the query and the body), said where OpenAPI documents the route."""
    return {400: {"model": Error, "description": f"Refused, with the reason: {why}; or a Host header not allowed"}}


def given(*names: str) -> list[JsonValue]:
    """JSON Schema for a body rule: each of these fields is there and not null (cao reads a
    null field as one not given)."""
    return [{"required": [name], "properties": {name: {"not": {"type": "null"}}}} for name in names]


PROFILE_NAME = stated(pattern=json_pattern(SAFE_NAME_RE), description="1-64 of [A-Za-z0-9_-], not starting with '-'")
FLOW_NAME = stated(pattern=json_pattern(FLOW_NAME_RE), description="flow name: 1-55 of [A-Za-z0-9_-]")
# Workflow spec names and run ids follow one rule.
WORKFLOW_NAME = stated(pattern=json_pattern(WORKFLOW_NAME_RE), description="1-64 of [A-Za-z0-9_-]")
MODEL_NAME = stated(pattern=json_pattern(MODEL_RE), description="1-128 of [A-Za-z0-9._:/-]")
# A session name gets the `cao-` prefix unless it has it, and then passes the safe-name rule:
# so at most 64 characters with the prefix, 60 without it.
_SESSION_NAMES = (
    f"{SESSION_PREFIX}[A-Za-z0-9_-]{{0,{64 - len(SESSION_PREFIX)}}}|[A-Za-z0-9_-]{{1,{64 - len(SESSION_PREFIX)}}}"
)
_SESSION_RULE = f"up to 64 of [A-Za-z0-9_-] with the `{SESSION_PREFIX}` prefix, which is added when missing"
SESSION_NAME = stated(pattern=f"^(?:{_SESSION_NAMES})$", description=_SESSION_RULE)
# The name a new session is given: empty (or none) is a generated one.
NEW_SESSION_NAME = stated(pattern=f"^(?:{_SESSION_NAMES}|)$", description=f"{_SESSION_RULE}; empty: a generated name")
MESSAGE_STATUS = stated(enum=[s.value for s in MessageStatus])
# services/input.py's valid_key: a named key, one letter or digit, C-/M-/S- plus one, or F1-F12.
KEY = stated(pattern=f"^(?:{'|'.join(sorted(NAMED_KEYS))}|[A-Za-z0-9]|[CMS]-[A-Za-z0-9]|F(?:[1-9]|1[0-2]))$")


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
    description: str | None = None  # what this agent is for (services/terminals/labels.py)
    group: list[str] | None = None  # its group path: siblings share its first elements
    metadata: dict[str, JsonValue] | None = None

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
            description=t.description,
            group=t.group,
            metadata=t.metadata,
        )


class InitialMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    initial_message: str | None = Field(None, max_length=MAX_TEXT, json_schema_extra=stated(minLength=1))
    initial_message_orchestration_type: OrchestrationType | None = None


# What workers know of each other, as the HTTP edge states it; services/terminals/labels.py
# checks the same bounds (a 422 with its reason) for every surface.
# No control characters (Unicode Cc); a description may hold newlines and tabs.
_NO_CONTROL = "^[^\\x00-\\x1f\\x7f-\\x9f]+$"
DESCRIPTION = stated(
    maxLength=MAX_DESCRIPTION,
    pattern="^[^\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f]*$",
    description="what this agent is for; empty or null: none",
)
GROUP = stated(
    maxItems=MAX_GROUP_ITEMS,
    items={"type": "string", "minLength": 1, "maxLength": MAX_GROUP_ITEM, "pattern": _NO_CONTROL},
    description="a group path; siblings share its first `depth` elements",
)
METADATA = stated(
    propertyNames={"minLength": 1, "maxLength": MAX_METADATA_KEY, "pattern": _NO_CONTROL},
    description=f"a JSON object, at most {MAX_METADATA_BYTES} bytes encoded (compact UTF-8 JSON)",
)


class LabelsBody(InitialMessage):
    """A new terminal's body: its first message, and what workers know of it."""

    description: str | None = Field(None, json_schema_extra=DESCRIPTION)
    group: list[str] | None = Field(None, json_schema_extra=GROUP)
    metadata: dict[str, JsonValue] | None = Field(None, json_schema_extra=METADATA)


class GroupBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    group: list[str] | None = Field(..., json_schema_extra=GROUP)


class MetadataBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    metadata: dict[str, JsonValue] | None = Field(..., json_schema_extra=METADATA)


class DescriptionBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str | None = Field(..., json_schema_extra=DESCRIPTION)


class SiblingOut(BaseModel):
    """One of a terminal's siblings (GET /terminals/{id}/siblings, MCP list_siblings)."""

    id: str
    session_name: str
    agent_profile: str
    provider: str
    status: str
    description: str | None = None
    group: list[str] | None = None
    metadata: dict[str, JsonValue] | None = None

    @classmethod
    def of(cls, t: Terminal) -> SiblingOut:
        return cls(
            id=t.id,
            session_name=t.session_name,
            agent_profile=t.agent_profile,
            provider=t.provider,
            status=t.status.value,
            description=t.description,
            group=t.group,
            metadata=t.metadata,
        )


class SessionBody(LabelsBody):
    # Variables for the agent's environment only (cao never stores them); checked by the spawner.
    env_vars: dict[str, str] | None = Field(None, max_length=64)


class InputBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str = Field(..., min_length=1, max_length=MAX_TEXT)
    sender_id: str | None = Field(None, max_length=128)
    orchestration_type: OrchestrationType | None = None


class KeyBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(..., max_length=16, json_schema_extra=KEY)


class InboxPost(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str = Field(..., min_length=1, max_length=MAX_TEXT)
    sender_id: str = Field(..., min_length=1, max_length=128)


class OutputOut(BaseModel):
    """`GET /terminals/{id}/output`: the history, or the last reply. `truncated` (only then
    present, with `reason`): the reply's start scrolled out of the terminal's history, so
    `output` is what is left of it."""

    output: str
    mode: Literal["full", "last"]
    truncated: bool = False
    reason: str | None = None


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
