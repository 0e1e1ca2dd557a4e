"""Memories in the store: one row per (scope, scope id, key) holding dated entries, found by
the database's own full-text engine (SQLite FTS5 with bm25, PostgreSQL's tsvector with ts_rank;
schema.py's MEMORY_SEARCH_DDL) behind the same methods.

Like the rest of the store, every method is one transaction and runs on the store's one
thread (`await store.run(memory_tables.store, write)`): a memory and its index entry are
written together or not at all. Values arrive validated and redacted (memory/).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import sqlalchemy as sa

from .schema import memories
from .stamps import utc_now

MAX_QUERY_TERMS = 32  # words of a query the engine is asked for; the rest are ignored
# bm25 weights of FTS5's columns (key, tags, content): a word in the key counts most.
_BM25 = "bm25(memories_fts, 4.0, 2.0, 1.0)"
_WORD = re.compile(r"\w+", re.UNICODE)
_FTS = sa.table("memories_fts", sa.column("rowid"))


@dataclass(frozen=True)
class MemoryRecord:
    id: int
    scope: str
    scope_id: str
    key: str
    memory_type: str
    tags: list[str]
    entries: list[dict[str, Any]]  # [{at, text, terminal_id, agent_profile}], oldest first
    created_at: str
    updated_at: str
    terminal_id: str | None
    agent_profile: str | None
    recall_count: int
    last_recalled_at: str | None
    score: float | None = None  # the engine's relevance for the query it was found by

    @property
    def content(self) -> str:
        return "\n".join(entry["text"] for entry in self.entries)


@dataclass(frozen=True)
class MemoryWrite:
    scope: str
    scope_id: str
    key: str
    memory_type: str
    tags: list[str]
    text: str
    terminal_id: str | None
    agent_profile: str | None
    max_chars: int  # the memory's entries are trimmed, oldest first, to this many characters


@dataclass(frozen=True)
class Stored:
    record: MemoryRecord
    created: bool  # a new memory (else an entry was appended to the one of that key)
    dropped: int = 0  # oldest entries dropped to keep it within its bound


@dataclass(frozen=True)
class MemoryQuery:
    text: str | None = None
    # The (scope, scope id) pairs it may read, in precedence order; None: every memory (the user).
    visible: list[tuple[str, str]] | None = None
    scope: str | None = None
    scope_id: str | None = None
    memory_type: str | None = None
    limit: int = 10
    sort_by: str = "recency"
    count: bool = False  # an agent's recall: each memory returned counts as recalled
    exclude_ids: list[int] = field(default_factory=list)


def query_words(text: str | None) -> list[str]:
    return _WORD.findall((text or "").lower())[:MAX_QUERY_TERMS]


class MemoryTables:
    def __init__(self, engine: sa.Engine):
        self.engine = engine
        self.dialect = engine.dialect.name

    def store(self, write: MemoryWrite) -> Stored:
        """Create the memory, or append a dated entry to the one with its scope and key (the same
        text as its last entry only refreshes it). Tags are added to its tags."""
        try:
            return self._store(write)
        except sa.exc.IntegrityError:  # another connection created it meanwhile (PostgreSQL)
            return self._store(write)

    def _store(self, write: MemoryWrite) -> Stored:
        now = utc_now()
        entry: dict[str, Any] = {
            "at": now,
            "text": write.text,
            "terminal_id": write.terminal_id,
            "agent_profile": write.agent_profile,
        }
        where = _key_filter(write.scope, write.scope_id, write.key)
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(memories).where(where).with_for_update()).mappings().first()
            created, dropped = row is None, 0
            entries: list[dict[str, Any]]
            if row is None:
                entries = [entry]
                conn.execute(
                    memories.insert().values(
                        scope=write.scope,
                        scope_id=write.scope_id,
                        key=write.key,
                        memory_type=write.memory_type,
                        tags=write.tags,
                        entries=entries,
                        content=write.text,
                        created_at=now,
                        updated_at=now,
                        terminal_id=write.terminal_id,
                        agent_profile=write.agent_profile,
                    )
                )
            else:
                entries = list(row["entries"])
                if not entries or entries[-1]["text"] != write.text:
                    entries.append(entry)
                while len(entries) > 1 and sum(len(e["text"]) for e in entries) > write.max_chars:
                    entries.pop(0)
                    dropped += 1
                tags = list(row["tags"]) + [t for t in write.tags if t not in row["tags"]]
                conn.execute(
                    sa.update(memories)
                    .where(memories.c.id == row["id"])
                    .values(
                        memory_type=write.memory_type,
                        tags=tags,
                        entries=entries,
                        content="\n".join(e["text"] for e in entries),
                        updated_at=now,
                        terminal_id=write.terminal_id,
                        agent_profile=write.agent_profile,
                    )
                )
            stored = conn.execute(sa.select(memories).where(where)).mappings().one()
        return Stored(_record(stored), created, dropped)

    def find(self, query: MemoryQuery) -> list[MemoryRecord]:
        """Memories matching `query`, best first; an agent's recall (`count`) counts each one."""
        words = query_words(query.text)
        with self.engine.begin() if query.count else self.engine.connect() as conn:
            if query.text is not None and not words:
                return []  # nothing searchable in the query (punctuation only)
            if query.visible and not words and query.sort_by == "recency":
                rows = self._latest_by_scope(conn, query)
            else:
                rows = self._ranked(conn, query, words)
            if query.count and rows:
                conn.execute(
                    sa.update(memories)
                    .where(memories.c.id.in_([r["id"] for r in rows]))
                    .values(recall_count=memories.c.recall_count + 1, last_recalled_at=utc_now())
                )
        return [_record(r) for r in rows]

    def _latest_by_scope(self, conn: sa.Connection, query: MemoryQuery) -> list[Any]:
        """An agent's latest memories, narrowest scope first: one indexed read per scope (a single
        query ordered by scope precedence would sort every visible memory)."""
        rows: list[Any] = []
        for scope, scope_id in query.visible or []:
            wanted = query.limit - len(rows)
            if wanted <= 0:
                break
            select = (
                sa.select(memories)
                .where(_scope_filter(scope, scope_id), *self._filters(replace(query, visible=None)))
                .order_by(memories.c.updated_at.desc(), memories.c.id.desc())
                .limit(wanted)
            )
            rows += list(conn.execute(select).mappings())
        return rows

    def _ranked(self, conn: sa.Connection, query: MemoryQuery, words: list[str]) -> list[Any]:
        if self.dialect == "sqlite" and words and query.sort_by == "score" and _scopes_only(query):
            return self._best_in_index(conn, query, words)
        # The best ids first, then only their rows: sorting narrow rows is cheaper than wide ones.
        select, score = self._select(words, query)
        scored = score is not None
        best = select.where(*self._filters(query)).order_by(*_order(query, score)).limit(query.limit).subquery()
        rows = sa.select(memories, best.c.score).select_from(memories.join(best, best.c.id == memories.c.id))
        return list(conn.execute(rows.order_by(*_order(query, best.c.score if scored else None))).mappings())

    def _best_in_index(self, conn: sa.Connection, query: MemoryQuery, words: list[str]) -> list[Any]:
        """An agent's recall by score on SQLite: FTS5 ranks the matches of its scopes alone and
        only the best `limit` rows are read from `memories` (reading every match's row to sort
        them is what made a recall among 100,000 memories slow). The scopes are checked again
        on the rows read: the index narrows, the filter decides."""
        score: Any = (-sa.literal_column(_BM25)).label("score")
        best = (
            sa.select(_FTS.c.rowid, score)
            .select_from(_FTS)
            .where(sa.text("memories_fts MATCH :match").bindparams(match=_fts_match(words, query)))
            .order_by(score.desc(), _FTS.c.rowid.desc())
            .limit(query.limit)
            .subquery()
        )
        select = (
            sa.select(memories, best.c.score)
            .select_from(memories.join(best, best.c.rowid == memories.c.id))
            .where(*self._filters(query))
            .order_by(best.c.score.desc(), memories.c.id.desc())
        )
        return list(conn.execute(select).mappings())

    def _select(self, words: list[str], query: MemoryQuery) -> tuple[sa.Select, Any]:
        """The ids of the memories matching `words` (every one without words) with their score,
        and the score's expression (None without words)."""
        if not words:
            return sa.select(memories.c.id, sa.null().label("score")), None
        if self.dialect == "postgresql":
            tsquery = sa.func.websearch_to_tsquery(sa.literal_column("'english'::regconfig"), " or ".join(words))
            search: Any = sa.literal_column("memories.search")
            ranked: Any = sa.func.ts_rank(search, tsquery)
            return sa.select(memories.c.id, ranked.label("score")).where(search.op("@@")(tsquery)), ranked
        score: Any = -sa.literal_column(_BM25)  # bm25 is lower for better matches
        select = (
            sa.select(memories.c.id, score.label("score"))
            .select_from(memories.join(_FTS, _FTS.c.rowid == memories.c.id))
            .where(sa.text("memories_fts MATCH :match").bindparams(match=_fts_match(words, query)))
        )
        return select, score

    def _filters(self, query: MemoryQuery) -> list[Any]:
        filters: list[Any] = []
        if query.visible is not None:
            filters.append(sa.or_(*(_scope_filter(s, i) for s, i in query.visible)) if query.visible else sa.false())
        if query.scope is not None:
            filters.append(memories.c.scope == query.scope)
        if query.scope_id is not None:
            filters.append(memories.c.scope_id == query.scope_id)
        if query.memory_type is not None:
            filters.append(memories.c.memory_type == query.memory_type)
        if query.exclude_ids:
            filters.append(memories.c.id.not_in(query.exclude_ids))
        return filters

    def note_recalled(self, ids: list[int]) -> None:
        """These memories were given to an agent (its first task's memory block)."""
        if ids:
            with self.engine.begin() as conn:
                conn.execute(
                    sa.update(memories)
                    .where(memories.c.id.in_(ids))
                    .values(recall_count=memories.c.recall_count + 1, last_recalled_at=utc_now())
                )

    def get(self, memory_id: int) -> MemoryRecord | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(memories).where(memories.c.id == memory_id)).mappings().first()
        return _record(row) if row else None

    def forget(self, scope: str, scope_id: str, key: str) -> MemoryRecord | None:
        """Delete the memory of that scope and key; the deleted memory, or None if there was none."""
        return self._delete(_key_filter(scope, scope_id, key))

    def forget_id(self, memory_id: int) -> MemoryRecord | None:
        return self._delete(memories.c.id == memory_id)

    def _delete(self, where: Any) -> MemoryRecord | None:
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(memories).where(where).with_for_update()).mappings().first()
            if row is None:
                return None
            conn.execute(sa.delete(memories).where(memories.c.id == row["id"]))
        return _record(row)

    def export(self, after_id: int = 0, batch: int = 1000) -> list[MemoryRecord]:
        """Memories with an id above `after_id`, in id order (export pages through them)."""
        query = sa.select(memories).where(memories.c.id > after_id).order_by(memories.c.id).limit(batch)
        with self.engine.connect() as conn:
            return [_record(r) for r in conn.execute(query).mappings()]

    def put(self, records: list[MemoryRecord]) -> int:
        """Import: each record replaces the memory of its scope and key exactly (its id aside);
        all of them in one transaction. Returns how many replaced an existing memory."""
        replaced = 0
        with self.engine.begin() as conn:
            for r in records:
                where = _key_filter(r.scope, r.scope_id, r.key)
                replaced += conn.execute(sa.delete(memories).where(where)).rowcount
                conn.execute(
                    memories.insert().values(
                        scope=r.scope,
                        scope_id=r.scope_id,
                        key=r.key,
                        memory_type=r.memory_type,
                        tags=r.tags,
                        entries=r.entries,
                        content=r.content,
                        created_at=r.created_at,
                        updated_at=r.updated_at,
                        terminal_id=r.terminal_id,
                        agent_profile=r.agent_profile,
                        recall_count=r.recall_count,
                        last_recalled_at=r.last_recalled_at,
                    )
                )
        return replaced

    def stats(self) -> dict[str, Any]:
        with self.engine.connect() as conn:
            total, recalls, oldest, newest = conn.execute(
                sa.select(
                    sa.func.count(),
                    sa.func.coalesce(sa.func.sum(memories.c.recall_count), 0),
                    sa.func.min(memories.c.created_at),
                    sa.func.max(memories.c.updated_at),
                )
            ).one()
            by_scope: dict[str, int] = dict(
                conn.execute(sa.select(memories.c.scope, sa.func.count()).group_by(memories.c.scope)).all()
            )
            by_type: dict[str, int] = dict(
                conn.execute(sa.select(memories.c.memory_type, sa.func.count()).group_by(memories.c.memory_type)).all()
            )
        return {
            "total": total,
            "recalls": int(recalls),
            "by_scope": by_scope,
            "by_type": by_type,
            "oldest": oldest,
            "newest": newest,
            "engine": self.dialect,
        }


def scope_word(scope: str, scope_id: str) -> str:
    """The word SQLite's index holds for a memory's scope: what the triggers of schema.py's
    MEMORY_SEARCH_DDL write with `hex(scope || ':' || scope_id)` (the hex of its UTF-8)."""
    return f"{scope}:{scope_id}".encode().hex().upper()


def _fts_match(words: list[str], query: MemoryQuery) -> str:
    """An FTS5 query: any of the words in the key, tags or content, each a quoted string (no
    operator of the query syntax survives); and, where the query names its scopes, one of them."""
    match = "{key tags content}: (" + " OR ".join(f'"{w}"' for w in words) + ")"
    pairs = query.visible if query.visible is not None else []
    if query.visible is None and query.scope is not None and query.scope_id is not None:
        pairs = [(query.scope, query.scope_id)]
    if pairs:
        match += " AND scopes: (" + " OR ".join(f'"{scope_word(s, i)}"' for s, i in pairs) + ")"
    return match


def _scopes_only(query: MemoryQuery) -> bool:
    """The query narrows by the scopes an agent may read and nothing else."""
    return bool(query.visible) and query.memory_type is None and not query.exclude_ids


def _order(query: MemoryQuery, score: Any) -> list[Any]:
    order: list[Any] = []
    if query.sort_by == "score" and score is not None:
        order.append(score.desc())
    if query.visible is not None and query.sort_by != "score":
        order.append(_precedence(query.visible))
    if query.sort_by == "usage":
        order.append(memories.c.recall_count.desc())
    return order + [memories.c.updated_at.desc(), memories.c.id.desc()]


def _key_filter(scope: str, scope_id: str, key: str) -> Any:
    return sa.and_(memories.c.scope == scope, memories.c.scope_id == scope_id, memories.c.key == key)


def _scope_filter(scope: str, scope_id: str) -> Any:
    return sa.and_(memories.c.scope == scope, memories.c.scope_id == scope_id)


def _precedence(visible: list[tuple[str, str]]) -> Any:
    """The position of a memory's scope in `visible` (narrowest first)."""
    whens = [(_scope_filter(s, i), n) for n, (s, i) in enumerate(visible)]
    return sa.case(*whens, else_=len(visible)) if whens else sa.literal(0)


def _record(row: Any) -> MemoryRecord:
    score = row.get("score")
    return MemoryRecord(
        id=row["id"],
        scope=row["scope"],
        scope_id=row["scope_id"],
        key=row["key"],
        memory_type=row["memory_type"],
        tags=list(row["tags"] or []),
        entries=list(row["entries"] or []),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        terminal_id=row["terminal_id"],
        agent_profile=row["agent_profile"],
        recall_count=row["recall_count"],
        last_recalled_at=row["last_recalled_at"],
        score=float(score) if score is not None else None,
    )
