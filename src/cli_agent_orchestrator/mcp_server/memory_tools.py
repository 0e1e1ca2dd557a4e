"""The memory tools (`memory_store`, `memory_recall`, `memory_forget`), with the reference's names
and arguments, through cao-server's HTTP API like every tool.

They speak for the calling terminal (the endpoint binds them to the proven credential): an agent
reaches its own session's, profile's and project's memories and the global ones, never another
project's. The server's own user (no terminal) may recall every memory but stores and forgets
with `cao memory`, which names the scope's id. Failures are `success: false` results, never raised.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from ..clients.aio import CaoApi
from .tools import ToolConfig, bad_terminal_id

Result = dict[str, Any]
NOT_AN_AGENT = (
    "{tool} stores into the calling agent's own scopes and needs a cao terminal (CAO_TERMINAL_ID); "
    "outside an agent use `cao memory {command}`, which names the scope's id"
)

STORE_DOC = """Remember something for later agents: a fact, a decision, a user preference, a project convention.

scope: project (default: this git repository), session (this cao session), agent (every agent of
your profile) or global. memory_type: project (default), user, feedback or reference. With a key
already used in that scope, the content is appended as a new dated entry (keep keys stable, e.g.
"test-command"). Secrets (API keys, tokens, passwords) are redacted; do not store credentials."""

RECALL_DOC = """Find what cao remembers for you: your session's, your profile's, your project's and the global memories.

Without a query: the latest (narrowest scope first: session, agent, project, global). With a query:
the memories the full-text search matches; sort_by "score" puts the most relevant first, "usage" the
most recalled, "recency" (default) the newest. limit: 1-100."""

FORGET_DOC = """Forget (delete) the memory with this key in one of your scopes (project, session, agent or global)."""


class MemoryTools:
    def __init__(self, config: ToolConfig, api: CaoApi):
        self.config = config
        self.api = api

    def _me(self) -> tuple[str | None, str | None]:
        me = self.config.terminal_id
        if me is None:
            return None, None
        error = bad_terminal_id(me, "CAO_TERMINAL_ID")
        return (None, error) if error else (me, None)

    async def store(
        self, content: str, scope: str, memory_type: str, key: str | None, tags: list[str] | None
    ) -> Result:
        me, error = self._me()
        if me is None:
            return _fail(error or NOT_AN_AGENT.format(tool="memory_store", command="add"))
        body = {"content": content, "scope": scope, "memory_type": memory_type, "key": key, "tags": tags}
        resp = await self.api.post(f"/terminals/{me}/memories", json=body)
        if not (resp.ok and isinstance(resp.body, dict)):
            return _fail(resp.error)
        memory = resp.body["memory"]
        out = {
            "success": True,
            "key": memory["key"],
            "scope": memory["scope"],
            "memory_type": memory["memory_type"],
            "created": resp.body["created"],
            "entries": len(memory["entries"]),
        }
        if resp.body["redacted"]:
            out["redacted"] = resp.body["redacted"]
        if resp.body["dropped_entries"]:
            out["dropped_entries"] = resp.body["dropped_entries"]
        return out

    async def recall(
        self, query: str | None, scope: str | None, memory_type: str | None, limit: int, sort_by: str
    ) -> Result:
        me, error = self._me()
        if error:
            return _fail(error)
        params: dict[str, Any] = {"limit": limit, "sort_by": sort_by}
        for name, value in (("query", query), ("scope", scope), ("memory_type", memory_type)):
            if value is not None:
                params[name] = value
        resp = await self.api.get(f"/terminals/{me}/memories" if me else "/memories", params=params)
        if not (resp.ok and isinstance(resp.body, list)):
            return _fail(resp.error)
        memories = [
            {
                "key": m["key"],
                "scope": m["scope"],
                "memory_type": m["memory_type"],
                "tags": m["tags"],
                "content": m["content"],
                "entries": m["entries"],
                "updated_at": m["updated_at"],
                **({"score": m["score"]} if "score" in m else {}),
            }
            for m in resp.body
        ]
        return {"success": True, "count": len(memories), "memories": memories}

    async def forget(self, key: str, scope: str) -> Result:
        me, error = self._me()
        if me is None:
            return _fail(error or NOT_AN_AGENT.format(tool="memory_forget", command="forget"))
        resp = await self.api.delete(f"/terminals/{me}/memories", params={"key": key, "scope": scope})
        if not (resp.ok and isinstance(resp.body, dict)):
            return _fail(resp.error)
        return {"success": True, "key": key, "scope": scope}


def _fail(error: str | None) -> Result:
    return {"success": False, "error": error or "unexpected answer from cao-server"}


def add_memory_tools(server: Any, memory_for: Callable[[], MemoryTools]) -> None:
    """Register memory_store, memory_recall and memory_forget; `memory_for()` gives the caller's."""

    async def memory_store(
        content: Annotated[str, Field(description="What to remember, self-contained (at most 8000 characters)")],
        scope: Annotated[str, Field(description="project, session, agent or global")] = "project",
        memory_type: Annotated[str, Field(description="project, user, feedback or reference")] = "project",
        key: Annotated[str | None, Field(description="A stable name; the same key appends a dated entry")] = None,
        tags: Annotated[list[str] | None, Field(description="Up to 16 short tags")] = None,
    ) -> Result:
        return await memory_for().store(content, scope, memory_type, key, tags)

    async def memory_recall(
        query: Annotated[str | None, Field(description="Words to search for; none: the latest")] = None,
        scope: Annotated[str | None, Field(description="Only this scope: project, session, agent or global")] = None,
        memory_type: Annotated[str | None, Field(description="Only this type")] = None,
        limit: Annotated[int, Field(description="At most this many, 1-100")] = 10,
        sort_by: Annotated[str, Field(description="recency, score or usage")] = "recency",
    ) -> Result:
        return await memory_for().recall(query, scope, memory_type, limit, sort_by)

    async def memory_forget(
        key: Annotated[str, Field(description="The memory's key")],
        scope: Annotated[str, Field(description="project, session, agent or global")],
    ) -> Result:
        return await memory_for().forget(key, scope)

    server.add_tool(memory_store, description=STORE_DOC)
    server.add_tool(memory_recall, description=RECALL_DOC)
    server.add_tool(memory_forget, description=FORGET_DOC)


# --- the ops MCP server's: the user's, outside any agent ----------------------------------------
OPS_STORE_DOC = """Remember something for cao's agents, as the user: in scope project (the project of the
directory this server runs in, unless scope_id names another), session or agent (scope_id: the session
or profile name) or global. The same key and scope appends a dated entry; secrets are redacted."""

OPS_RECALL_DOC = """Search or list every memory cao keeps (any project, session, profile): query for
full-text search, sort_by recency, score or usage; scope and scope_id narrow it."""

OPS_FORGET_DOC = """Delete the memory with this key in a scope (scope_id as for memory_store)."""


OpsScopeId = Annotated[str | None, Field(description="The scope's id: a project directory, a session, a profile")]


class UserMemoryTools:
    """The memory tools as the user (the ops server's callers are outside cao): any scope id."""

    def __init__(self, api: CaoApi, project: str):
        self.api = api
        self.project = project  # what scope "project" means without a scope_id

    def _scope_id(self, scope: str, scope_id: str | None) -> str | None:
        return self.project if scope == "project" and scope_id is None else scope_id

    async def store(
        self,
        content: str,
        scope: str,
        memory_type: str,
        key: str | None,
        tags: list[str] | None,
        scope_id: str | None,
    ) -> Result:
        body = {
            "content": content,
            "scope": scope,
            "memory_type": memory_type,
            "key": key,
            "tags": tags,
            "scope_id": self._scope_id(scope, scope_id),
        }
        resp = await self.api.post("/memories", json=body)
        if not (resp.ok and isinstance(resp.body, dict)):
            return _fail(resp.error)
        return {"success": True, **resp.body}

    async def recall(
        self,
        query: str | None,
        scope: str | None,
        scope_id: str | None,
        memory_type: str | None,
        limit: int,
        sort_by: str,
    ) -> Result:
        params = {"query": query, "scope": scope, "scope_id": scope_id, "memory_type": memory_type}
        clean: dict[str, Any] = {k: v for k, v in params.items() if v is not None}
        resp = await self.api.get("/memories", params={**clean, "limit": limit, "sort_by": sort_by})
        if not (resp.ok and isinstance(resp.body, list)):
            return _fail(resp.error)
        return {"success": True, "count": len(resp.body), "memories": resp.body}

    async def forget(self, key: str, scope: str, scope_id: str | None) -> Result:
        params = {"key": key, "scope": scope}
        if (resolved := self._scope_id(scope, scope_id)) is not None:
            params["scope_id"] = resolved
        resp = await self.api.delete("/memories", params=params)
        if not (resp.ok and isinstance(resp.body, dict)):
            return _fail(resp.error)
        return {"success": True, **resp.body}


def add_ops_memory_tools(server: Any, tools: UserMemoryTools) -> None:
    """Register the user's memory tools on the ops server (same names, plus `scope_id`)."""

    async def memory_store(
        content: Annotated[str, Field(description="What to remember (at most 8000 characters)")],
        scope: Annotated[str, Field(description="project, session, agent or global")] = "project",
        memory_type: Annotated[str, Field(description="project, user, feedback or reference")] = "project",
        key: Annotated[str | None, Field(description="A stable name; the same key appends a dated entry")] = None,
        tags: Annotated[list[str] | None, Field(description="Up to 16 short tags")] = None,
        scope_id: OpsScopeId = None,
    ) -> Result:
        return await tools.store(content, scope, memory_type, key, tags, scope_id)

    async def memory_recall(
        query: Annotated[str | None, Field(description="Words to search for; none: the latest")] = None,
        scope: Annotated[str | None, Field(description="Only this scope")] = None,
        scope_id: OpsScopeId = None,
        memory_type: Annotated[str | None, Field(description="Only this type")] = None,
        limit: Annotated[int, Field(description="At most this many, 1-100")] = 10,
        sort_by: Annotated[str, Field(description="recency, score or usage")] = "recency",
    ) -> Result:
        return await tools.recall(query, scope, scope_id, memory_type, limit, sort_by)

    async def memory_forget(
        key: Annotated[str, Field(description="The memory's key")],
        scope: Annotated[str, Field(description="project, session, agent or global")],
        scope_id: OpsScopeId = None,
    ) -> Result:
        return await tools.forget(key, scope, scope_id)

    server.add_tool(memory_store, description=OPS_STORE_DOC)
    server.add_tool(memory_recall, description=OPS_RECALL_DOC)
    server.add_tool(memory_forget, description=OPS_FORGET_DOC)
