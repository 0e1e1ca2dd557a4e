"""HTTP routes for memories (memory/): the user's, which name any scope id and read every memory
(`/memories...`), and an agent's, which act as its terminal and reach only its own session's,
profile's and project's memories and the global ones (`/terminals/{id}/memories`, what cao's
MCP memory tools call). The bounds are memory/checks.py's: a value out of them is a 400 with the
reason, and nothing is stored.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from ..errors import NotFound
from ..memory import checks
from ..memory.scopes import SCOPES, SORTS, TYPES
from ..memory.service import memory_json
from .errors import EVERY_ROUTE, answers
from .limits import StrictJsonRoute
from .routes import TerminalId, rt
from .schemas import given, json_pattern, refused, stated

router = APIRouter(route_class=StrictJsonRoute, responses=EVERY_ROUTE)
LISTS = answers(422, 503)
ABOUT_ONE = answers(404, 422, 503)
NDJSON = "application/x-ndjson"

# What the service checks (memory/checks.py), stated (a 400 with its reason, not FastAPI's 422).
SCOPE = stated(enum=list(SCOPES))
TYPE = stated(enum=list(TYPES))
KEY = stated(pattern=json_pattern(checks.KEY_RE), maxLength=checks.MAX_KEY_CHARS)
SCOPE_ID = stated(pattern=json_pattern(checks.SCOPE_ID_RE), maxLength=checks.MAX_SCOPE_ID_CHARS)
CONTENT = stated(pattern=checks.CONTENT_RE.pattern, minLength=1, maxLength=checks.MAX_ENTRY_CHARS)
TAGS = stated(maxItems=checks.MAX_TAGS, items={"type": "string", "pattern": json_pattern(checks.TAG_RE)})

Scope = Annotated[str | None, Query(description="global, project, session or agent", json_schema_extra=SCOPE)]
ScopeId = Annotated[
    str | None,
    Query(
        max_length=4096, description="The scope's id: a project, a session name, a profile", json_schema_extra=SCOPE_ID
    ),
]
MemoryType = Annotated[str | None, Query(description="user, feedback, project or reference", json_schema_extra=TYPE)]
Text = Annotated[str | None, Query(max_length=1000, description="Words to search for (the engine's full-text search)")]
Limit = Annotated[int, Query(description="At most this many, 1-100", json_schema_extra=stated(minimum=1, maximum=100))]
SortBy = Annotated[
    str,
    Query(description="recency, score (relevance to `query`) or usage", json_schema_extra=stated(enum=list(SORTS))),
]
MemoryId = Annotated[int, Path(ge=1, le=2**62, description="The memory's id")]
Key = Annotated[str, Query(max_length=128, description="The memory's key", json_schema_extra=KEY)]
ForgetScope = Annotated[str, Query(description="global, project, session or agent", json_schema_extra=SCOPE)]


class AgentMemoryBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str = Field(
        description="What to remember (secrets are redacted; at most 8000 characters)", json_schema_extra=CONTENT
    )
    scope: str = Field("project", json_schema_extra=SCOPE)
    memory_type: str = Field("project", json_schema_extra=TYPE)
    key: str | None = Field(
        None,
        description="Same key and scope: a dated entry is appended (default: from the content)",
        json_schema_extra=KEY,
    )
    tags: list[str] | None = Field(None, json_schema_extra=TAGS)


class MemoryBody(AgentMemoryBody):
    # The service's rule, stated: a scope other than global names its id.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "anyOf": [
                {"required": ["scope"], "properties": {"scope": {"const": "global"}}},
                {"allOf": given("scope_id")},
            ]
        },
    )
    scope_id: str | None = Field(None, description="The scope's id (not used for global)", json_schema_extra=SCOPE_ID)


class ImportBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    jsonl: str = Field(description="JSON lines as GET /memories/export writes them")


class StoredOut(BaseModel):
    memory: dict[str, JsonValue]
    created: bool
    redacted: list[str]
    dropped_entries: int


def _memories(records: list) -> list[dict[str, Any]]:
    return [memory_json(r) for r in records]


# --- the user's ---------------------------------------------------------------------------
@router.get("/memories", responses=LISTS)
async def list_memories(
    request: Request,
    query: Text = None,
    scope: Scope = None,
    scope_id: ScopeId = None,
    memory_type: MemoryType = None,
    limit: Limit = 10,
    sort_by: SortBy = "recency",
) -> list[dict[str, Any]]:
    """Every memory (or one scope, one scope id, one type), newest first; with `query`, those the
    full-text search matches (`sort_by=score`: most relevant first)."""
    found = await rt(request).memory.recall(query, scope, memory_type, limit, sort_by, scope_id=scope_id)
    return _memories(found)


@router.post("/memories", status_code=status.HTTP_201_CREATED, response_model=StoredOut, responses=LISTS)
async def add_memory(request: Request, body: MemoryBody) -> dict[str, Any]:
    """Store a memory in any scope (`scope_id` names which project, session or profile)."""
    memory = rt(request).memory
    return await memory.store_memory(
        body.content, body.scope, body.memory_type, body.key, body.tags, scope_id=body.scope_id
    )


@router.delete("/memories", responses=ABOUT_ONE)
async def forget_memory_by_key(
    request: Request, key: Key, scope: ForgetScope = "project", scope_id: ScopeId = None
) -> dict[str, Any]:
    """Delete the memory with this key in this scope (404 when there is none, as for a scope other
    than global without `scope_id`)."""
    if scope_id is None and scope in SCOPES and scope != "global":
        raise NotFound(f"no memory with key {key!r} in scope {scope} without a scope id: give scope_id")
    return {"forgotten": memory_json(await rt(request).memory.forget(key, scope, scope_id=scope_id))}


@router.get("/memories/stats", responses=LISTS)
async def memory_stats(request: Request) -> dict[str, Any]:
    """How many memories, by scope and by type, how often recalled, the oldest and newest."""
    return await rt(request).memory.stats()


@router.get("/memories/export", responses=LISTS, response_class=StreamingResponse)
async def export_memories(request: Request) -> StreamingResponse:
    """Every memory as JSON lines (application/x-ndjson), in the order they were made:
    POST /memories/import takes them back exactly."""
    return StreamingResponse(rt(request).memory.export_lines(), media_type=NDJSON)


@router.post(
    "/memories/import",
    responses={**LISTS, **refused("each line must be a memory as GET /memories/export writes it")},
)
async def import_memories(request: Request, body: ImportBody) -> dict[str, Any]:
    """Import JSON lines (as export writes them) all or nothing: each replaces the memory of its
    scope and key. A bad line is a 400 naming it, and nothing is imported."""
    return await rt(request).memory.import_lines(body.jsonl.splitlines())


@router.get("/memories/{memory_id}", responses=ABOUT_ONE)
async def show_memory(request: Request, memory_id: MemoryId) -> dict[str, Any]:
    """One memory with all its dated entries."""
    return memory_json(await rt(request).memory.get(memory_id))


@router.delete("/memories/{memory_id}", responses=ABOUT_ONE)
async def forget_memory(request: Request, memory_id: MemoryId) -> dict[str, Any]:
    """Delete one memory by its id."""
    return {"forgotten": memory_json(await rt(request).memory.forget_id(memory_id))}


# --- an agent's: as its terminal ------------------------------------------------------------
@router.post(
    "/terminals/{terminal_id}/memories",
    status_code=status.HTTP_201_CREATED,
    response_model=StoredOut,
    responses=ABOUT_ONE,
)
async def store_as_agent(request: Request, terminal_id: TerminalId, body: AgentMemoryBody) -> dict[str, Any]:
    """Store a memory as this terminal's agent: its scope id is the agent's own (its project,
    session or profile)."""
    memory = rt(request).memory
    return await memory.store_memory(
        body.content, body.scope, body.memory_type, body.key, body.tags, as_terminal=terminal_id
    )


@router.get("/terminals/{terminal_id}/memories", responses=ABOUT_ONE)
async def recall_as_agent(
    request: Request,
    terminal_id: TerminalId,
    query: Text = None,
    scope: Scope = None,
    memory_type: MemoryType = None,
    limit: Limit = 10,
    sort_by: SortBy = "recency",
) -> list[dict[str, Any]]:
    """The memories this terminal's agent can see (its session's, profile's, project's and the
    global ones; narrowest scope first unless `sort_by=score`). Each one returned counts as recalled."""
    found = await rt(request).memory.recall(query, scope, memory_type, limit, sort_by, as_terminal=terminal_id)
    return _memories(found)


@router.delete("/terminals/{terminal_id}/memories", responses=ABOUT_ONE)
async def forget_as_agent(
    request: Request, terminal_id: TerminalId, key: Key, scope: ForgetScope = "project"
) -> dict[str, Any]:
    """Delete a memory of this terminal's agent's own scope."""
    return {"forgotten": memory_json(await rt(request).memory.forget(key, scope, as_terminal=terminal_id))}
