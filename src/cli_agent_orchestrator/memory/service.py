"""The memory service: store (redacted, bounded, upserted as a dated entry), recall, forget,
export and import, and the memory block of a new agent's first task.

Two kinds of caller: an agent, named by its terminal (the MCP tools bind it to the proven
credential), which reaches only its own session's, profile's and project's memories and the
global ones; and the user (CLI, HTTP, the ops tools), who names any scope id and reads all.
Events (MemoryStored, MemoryForgotten) are published after the write committed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from dataclasses import replace
from typing import Any

from ..actor import acting_as
from ..bus import EventBus
from ..errors import CaoError, InvalidInput, NotFound
from ..events import MemoryForgotten, MemoryStored
from ..models import Terminal
from ..profiles.loading import load_profile
from ..settings import Settings
from ..store import Store
from ..store.memories import MemoryQuery, MemoryRecord, MemoryTables, MemoryWrite
from . import checks
from .injection import MAX_INJECTED, build_block, with_block
from .redaction import redact_or_refuse
from .scopes import AgentScopes, check_scope, check_type, project_of

log = logging.getLogger(__name__)

EXPORT_FIELDS = (
    "scope",
    "scope_id",
    "key",
    "memory_type",
    "tags",
    "entries",
    "created_at",
    "updated_at",
    "terminal_id",
    "agent_profile",
    "recall_count",
    "last_recalled_at",
)
MAX_IMPORT_LINES = 100_000
PROFILE_SWITCH = "memory"  # a profile's frontmatter `memory: false` keeps its agents' first task bare


def memory_json(record: MemoryRecord) -> dict[str, Any]:
    out = {"id": record.id, **{name: getattr(record, name) for name in EXPORT_FIELDS}, "content": record.content}
    if record.score is not None:
        out["score"] = record.score
    return out


class MemoryService:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        tables: MemoryTables,
        bus: EventBus,
        spawn: Callable[[Coroutine[Any, Any, Any], str], object] | None = None,
    ):
        self.settings = settings
        self.store = store
        self.tables = tables
        self.bus = bus
        # Counting a recall is a write (on PostgreSQL a commit to disk): it runs after the answer,
        # in the background (the task group's), so a recall costs only its read.
        self.spawn = spawn

    # --- who is asking -------------------------------------------------------------------
    async def scopes_of(self, terminal_id: str) -> AgentScopes:
        term = await self.store.run(self.store.get_terminal, terminal_id)
        if term is None or term.gone:
            raise NotFound(f"terminal {terminal_id} not found")
        return self.scopes_of_terminal(term)

    def scopes_of_terminal(self, term: Terminal) -> AgentScopes:
        project = project_of(term.working_directory, self.settings.project_id)
        return AgentScopes(term.id, term.agent_profile, term.session_name, project)

    # --- store ---------------------------------------------------------------------------
    async def store_memory(
        self,
        content: object,
        scope: str = "project",
        memory_type: str = "project",
        key: object = None,
        tags: object = None,
        *,
        as_terminal: str | None = None,
        scope_id: str | None = None,
    ) -> dict[str, Any]:
        """Store a memory for an agent (`as_terminal`: its own scope ids) or the user (`scope_id`)."""
        check_scope(scope)
        check_type(memory_type)
        tag_list = checks.check_tags(tags)
        redacted = redact_or_refuse(checks.check_content(content))
        text = redacted.text
        key_text = checks.check_key(key) if key is not None else checks.auto_key(text)
        agent = await self.scopes_of(as_terminal) if as_terminal else None
        resolved = agent.scope_id(scope) if agent else checks.check_scope_id(scope, scope_id)
        write = MemoryWrite(
            scope=scope,
            scope_id=resolved,
            key=key_text,
            memory_type=memory_type,
            tags=tag_list,
            text=text,
            terminal_id=agent.terminal_id if agent else None,
            agent_profile=agent.agent_profile if agent else None,
            max_chars=checks.MAX_MEMORY_CHARS,
        )
        stored = await self.store.run(self.tables.store, write)
        record = stored.record
        with acting_as(as_terminal):
            self.bus.publish(
                MemoryStored(
                    record.id,
                    record.key,
                    record.scope,
                    record.scope_id,
                    record.memory_type,
                    as_terminal,
                    stored.created,
                )
            )
        return {
            "memory": memory_json(record),
            "created": stored.created,
            "redacted": list(redacted.kinds),
            "dropped_entries": stored.dropped,
        }

    # --- recall --------------------------------------------------------------------------
    async def recall(
        self,
        query: object = None,
        scope: str | None = None,
        memory_type: str | None = None,
        limit: object = 10,
        sort_by: object = "recency",
        *,
        as_terminal: str | None = None,
        scope_id: str | None = None,
    ) -> list[MemoryRecord]:
        """An agent's recall (its visible scopes, narrowest first; each memory found counts as
        recalled), or the user's search (every memory, or one scope / scope id)."""
        text = checks.check_query(query)
        if scope is not None:
            check_scope(scope)
        if memory_type is not None:
            check_type(memory_type)
        spec = MemoryQuery(
            text=text,
            memory_type=memory_type,
            limit=checks.check_limit(limit),
            sort_by=checks.check_sort(sort_by),
        )
        if as_terminal:
            visible = (await self.scopes_of(as_terminal)).visible()
            if scope is not None:
                visible = [pair for pair in visible if pair[0] == scope]
            spec = replace(spec, visible=visible)
        else:
            spec = replace(spec, scope=scope, scope_id=scope_id)
        found = await self.store.run(self.tables.find, spec)
        if as_terminal and found:
            await self._count_recalled([r.id for r in found])
        return found

    async def _count_recalled(self, ids: list[int]) -> None:
        if self.spawn is None:
            await self.store.run(self.tables.note_recalled, ids)
        else:
            self.spawn(self.store.run(self.tables.note_recalled, ids), "memory.recalled")

    # --- forget --------------------------------------------------------------------------
    async def forget(
        self, key: object, scope: str, *, as_terminal: str | None = None, scope_id: str | None = None
    ) -> MemoryRecord:
        key_text = checks.check_key(key)
        check_scope(scope)
        agent = await self.scopes_of(as_terminal) if as_terminal else None
        resolved = agent.scope_id(scope) if agent else checks.check_scope_id(scope, scope_id)
        record = await self.store.run(self.tables.forget, scope, resolved, key_text)
        if record is None:
            where = f"{scope} ({resolved})" if resolved else scope
            raise NotFound(f"no memory with key {key_text!r} in scope {where}")
        self._forgotten(record, as_terminal)
        return record

    async def forget_id(self, memory_id: int) -> MemoryRecord:
        record = await self.store.run(self.tables.forget_id, memory_id)
        if record is None:
            raise NotFound(f"memory {memory_id} not found")
        self._forgotten(record, None)
        return record

    def _forgotten(self, record: MemoryRecord, as_terminal: str | None) -> None:
        with acting_as(as_terminal):
            self.bus.publish(MemoryForgotten(record.id, record.key, record.scope, record.scope_id, as_terminal))

    async def get(self, memory_id: int) -> MemoryRecord:
        record = await self.store.run(self.tables.get, memory_id)
        if record is None:
            raise NotFound(f"memory {memory_id} not found")
        return record

    async def stats(self) -> dict[str, Any]:
        return await self.store.run(self.tables.stats)

    # --- export and import ----------------------------------------------------------------
    async def export_lines(self) -> AsyncIterator[str]:
        """Every memory as one JSON line, in the order they were made."""
        after = 0
        while batch := await self.store.run(self.tables.export, after):
            for record in batch:
                yield json.dumps({name: getattr(record, name) for name in EXPORT_FIELDS}, ensure_ascii=False) + "\n"
            after = batch[-1].id

    async def import_lines(self, lines: Iterable[str]) -> dict[str, Any]:
        """Import JSON lines as `export_lines` writes them: all or nothing; a bad line is refused
        with its number. Each replaces the memory of its scope and key."""
        records = [_parse_line(n, line) for n, line in enumerate(lines, 1) if line.strip()]
        if len(records) > MAX_IMPORT_LINES:
            raise InvalidInput(f"too many memories in one import: {len(records)} (limit {MAX_IMPORT_LINES})")
        replaced = await self.store.run(self.tables.put, records)
        for r in records:
            self.bus.publish(MemoryStored(0, r.key, r.scope, r.scope_id, r.memory_type, None, True))
        return {"imported": len(records), "replaced": replaced}

    # --- the first task's block ------------------------------------------------------------
    async def first_task(self, term: Terminal | None, task: str) -> str:
        """`task` with the agent's memory block in front, or `task` alone (memory off, in its
        profile or everywhere; nothing stored; the store failing must not stop the task)."""
        if term is None or not self.settings.memory_enabled or not self._profile_wants_memory(term.agent_profile):
            return task
        try:
            visible = self.scopes_of_terminal(term).visible()
            query = MemoryQuery(
                text=task[: checks.MAX_QUERY_CHARS], visible=visible, sort_by="score", limit=MAX_INJECTED
            )
            relevant = await self.store.run(self.tables.find, query)
            rest = MemoryQuery(visible=visible, limit=MAX_INJECTED, exclude_ids=[r.id for r in relevant])
            others = await self.store.run(self.tables.find, rest)
            block, ids = build_block(relevant + others, self.settings.memory_inject_chars)
            if ids:
                await self._count_recalled(ids)
        except CaoError as exc:
            log.warning("no memory block for %s: %s", term.id, exc)
            return task
        return with_block(block, task)

    def _profile_wants_memory(self, profile: str) -> bool:
        try:
            loaded = load_profile(self.settings.home_dir, profile)
        except CaoError:
            return True  # the spawn judged the profile; an unreadable one now is no reason to drop memory
        return loaded.frontmatter.get(PROFILE_SWITCH) is not False


def _parse_line(number: int, line: str) -> MemoryRecord:
    def bad(reason: str) -> InvalidInput:
        return InvalidInput(f"line {number}: {reason}")

    try:
        doc = json.loads(line)
    except json.JSONDecodeError as exc:
        raise bad(f"not JSON ({exc.msg})") from None
    if not isinstance(doc, dict):
        raise bad("not a JSON object")
    missing = [name for name in EXPORT_FIELDS if name not in doc]
    if missing:
        raise bad(f"missing {', '.join(missing)}")
    try:
        scope = check_scope(doc["scope"])
        entries = doc["entries"]
        if not isinstance(entries, list) or not entries:
            raise InvalidInput("entries must be a non-empty list")
        clean = []
        for entry in entries:
            if not isinstance(entry, dict) or not isinstance(entry.get("at"), str):
                raise InvalidInput("each entry must be an object with `at` and `text`")
            text = redact_or_refuse(checks.check_content(entry.get("text"))).text
            clean.append({**entry, "text": text})
        for name in ("created_at", "updated_at"):
            if not isinstance(doc[name], str):
                raise InvalidInput(f"{name} must be a string")
        count = doc["recall_count"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidInput("recall_count must be a whole number")
        return MemoryRecord(
            id=0,
            scope=scope,
            scope_id=checks.check_scope_id(scope, doc["scope_id"]),
            key=checks.check_key(doc["key"]),
            memory_type=check_type(doc["memory_type"]),
            tags=checks.check_tags(doc["tags"]),
            entries=clean,
            created_at=doc["created_at"],
            updated_at=doc["updated_at"],
            terminal_id=_text_or_none(doc["terminal_id"], "terminal_id"),
            agent_profile=_text_or_none(doc["agent_profile"], "agent_profile"),
            recall_count=count,
            last_recalled_at=_text_or_none(doc["last_recalled_at"], "last_recalled_at"),
        )
    except InvalidInput as exc:
        raise bad(str(exc)) from None


def _text_or_none(value: object, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string or null")
    return value
