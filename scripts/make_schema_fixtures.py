"""Write tests/fixtures/schemas/v{n}.{sqlite,postgresql}.sql: cao's database as each older
schema version shipped it, with a few rows, as plain SQL text (readable, diffable).

Each version's schema comes from git history: the newest commit whose
`store/schema.py` has LATEST_VERSION == n is loaded on its own (it needs only SQLAlchemy) and
its migrations 0..n are replayed on a fresh SQLite file. A version no commit shipped as its
latest (v4) is replayed from the oldest later commit's first n migrations. The SQLite dump is
that file's own DDL (sqlite_master); the PostgreSQL dump compiles the same tables and columns
for PostgreSQL, with every String column TEXT from v6 on (what v5→v6 did there).

Run from the repository root after adding a migration:

    .venv/bin/python scripts/make_schema_fixtures.py

The upgrade tests (tests/test_schema_upgrades.py) load every file and start cao-server on it.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

REPO = Path(__file__).resolve().parent.parent
SCHEMA_PATH = "src/cli_agent_orchestrator/store/schema.py"
OUT = REPO / "tests" / "fixtures" / "schemas"
# v5→v6 made every String column TEXT on PostgreSQL.
PG_TEXT_FROM = 6
# Tables whose integer key PostgreSQL numbers with a sequence (set past the rows inserted).
SERIAL_KEYS = {"inbox_messages": "id", "workflow_events": "seq", "flow_runs": "id", "memories": "id"}
# FTS5 makes these shadow tables itself with its virtual table (v12 on): never created by hand.
FTS_SHADOW_TABLES = tuple(f"memories_fts_{part}" for part in ("data", "idx", "docsize", "config", "content"))

TERMINAL_ID = "fe000001"
# The rows each fixture holds where its version has the table (columns it lacks are left out).
FIXTURE_AT = "2026-01-02T03:04:05.678+00:00"
ROWS: dict[str, list[dict[str, Any]]] = {
    # v12 on: a memory, whose full-text index (FTS5's triggers, PostgreSQL's generated column)
    # must find it after an upgrade.
    "memories": [
        {
            "id": 1,
            "scope": "global",
            "scope_id": "",
            "key": "fixture-memory",
            "memory_type": "project",
            "tags": ["fixture"],
            "entries": [
                {"at": FIXTURE_AT, "text": "a memory kept across upgrades", "terminal_id": None, "agent_profile": None}
            ],
            "content": "a memory kept across upgrades",
            "created_at": FIXTURE_AT,
            "updated_at": FIXTURE_AT,
            "terminal_id": None,
            "agent_profile": None,
            "recall_count": 0,
            "last_recalled_at": None,
        }
    ],
    "terminals": [
        {
            "id": TERMINAL_ID,
            "session_name": "cao-fixture",
            "window_name": "developer-fx01",
            "window_id": "@1",
            "provider": "mock_cli",
            "agent_profile": "developer",
            "working_directory": "/tmp/fixture",
            "caller_id": None,
            "model": None,
            "allowed_tools": ["fs_read", "@cao-mcp-server"],
            "status": "idle",
            "status_source": "screen",
            "status_reason": None,
            "gone": False,
            "created_at": "2026-11-30T10:00:00.000Z",
            "last_active": "2026-11-30T10:05:00.000Z",
            "hook_secret": "fixture-hook-secret",
            "worktree": None,
            "host": None,
            "workflow_step": None,
            "description": "a worker kept across upgrades",
            "group_path": ["fixture-team", "backend"],
            "metadata": {"phase": "review"},
        }
    ],
    "inbox_messages": [
        {
            "id": 1,
            "sender_id": "fixture-sender",
            "receiver_id": TERMINAL_ID,
            "message": "an old delivered message",
            "status": "delivered",
            "created_at": "2026-11-30T10:01:00.000Z",
            "claimed_at": "2026-11-30T10:01:01.000Z",
            "delivered_at": "2026-11-30T10:01:02.000Z",
            "error": None,
            "paste_mark": "0,3,0",
        },
        {
            "id": 2,
            "sender_id": "fixture-sender",
            "receiver_id": TERMINAL_ID,
            "message": "an old pending message",
            "status": "pending",
            "created_at": "2026-11-30T10:02:00.000Z",
            "claimed_at": None,
            "delivered_at": None,
            "error": None,
            "paste_mark": None,
        },
    ],
    "workflow_runs": [
        {
            "run_id": "fixture-run-1",
            "workflow_name": "fixture_flow",
            "tier": "script",
            "state": "completed",
            "kind": None,
            "generation": 1,
            "source": "print('hello')",
            "source_path": "/tmp/fixture/wf.py",
            "content_hash": "0" * 64,
            "inputs_json": "{}",
            "output_json": '{"ok": true}',
            "warnings": [],
            "halts": [],
            "current_step_id": None,
            "driver_pid": None,
            "drives": 1,
            "started_at": "2026-11-30T10:03:00Z",
            "finished_at": "2026-11-30T10:04:00Z",
            "created_ns": 1,
        }
    ],
    "flows": [
        {
            "name": "fixture-flow",
            "file_path": "/tmp/fixture/fixture-flow.flow.md",
            "schedule": "0 9 * * 1-5",
            "timezone": "Europe/Paris",
            "agent_profile": "developer",
            "provider": "mock_cli",
            "script": None,
            "engine": None,
            "host": None,
            "timeout": 600.0,
            "prompt_template": "Say hello to [[name]]",
            "description": "a flow kept across upgrades",
            "enabled": False,  # disabled: no missed run fires when a test starts the server
            "last_run": "2026-11-30T08:00:00Z",
            "next_run": None,
            "added_at": "2026-11-29T12:00:00Z",
        }
    ],
    "flow_runs": [
        {
            "id": 1,
            "flow_name": "fixture-flow",
            "trigger": "manual",
            "state": "completed",
            "due_at": None,
            "started_at": "2026-11-30T08:00:00Z",
            "finished_at": "2026-11-30T08:00:05Z",
            "execute": True,
            "gate_output": None,
            "reason": None,
            "session_name": "cao-flow-fixture",
            "terminal_id": "fe000002",
            "prompt": "Say hello to you",
            "reply": "hello",
        }
    ],
    "handoffs": [
        {
            "job_id": "fixture-handoff-1",
            "caller_id": TERMINAL_ID,
            "terminal_id": "fe000003",
            "agent": "developer",
            "state": "completed",
            "deadline": "2026-11-30T11:00:00.000Z",
            "created_at": "2026-11-30T10:00:00.000Z",
            "finished_at": "2026-11-30T10:10:00.000Z",
            "error": None,
        }
    ],
}


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout


def _load(commit: str) -> ModuleType:
    """That commit's schema.py as a module of its own (it imports nothing of cao)."""
    source = _git("show", f"{commit}:{SCHEMA_PATH}")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(f"cao_schema_{commit[:10]}", f.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    Path(f.name).unlink()
    return module


def historical_schemas() -> dict[int, tuple[str, ModuleType]]:
    """Version → (commit, schema module) for every version below the current one."""
    by_version: dict[int, tuple[str, ModuleType]] = {}
    for commit in _git("log", "--format=%H", "--", SCHEMA_PATH).split():  # newest first
        module = _load(commit)
        by_version.setdefault(module.LATEST_VERSION, (commit, module))
    return by_version


def schema_for(version: int, shipped: dict[int, tuple[str, ModuleType]]) -> tuple[str, ModuleType]:
    if version in shipped:
        return shipped[version]
    later = min(v for v in shipped if v > version)  # its first `version` migrations
    return shipped[later]


def build_sqlite(module: ModuleType, version: int, path: Path) -> sa.Engine:
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        module.schema_version.create(conn)
        conn.execute(module.schema_version.insert().values(version=version))
        for step in module.MIGRATIONS[:version]:
            step(conn)
    return engine


def _present_tables(engine: sa.Engine, module: ModuleType) -> list[sa.Table]:
    """The module's tables as that database has them (only the columns it has), in
    dependency order, in a metadata of their own."""
    inspector = sa.inspect(engine)
    names = set(inspector.get_table_names()) - {"schema_version"}
    out = sa.MetaData()
    for table in module.metadata.sorted_tables:
        if table.name not in names:
            continue
        present = {c["name"] for c in inspector.get_columns(table.name)}
        columns = [c._copy() for c in table.columns if c.name in present]
        kept = sa.Table(table.name, out, *columns)
        for index in table.indexes:
            if all(c.name in present for c in index.columns) and not _made_by_column(index):
                sa.Index(index.name, *[kept.c[c.name] for c in index.columns], unique=index.unique)
        for unique in table.constraints:  # (memories' scope and key, v12 on)
            if isinstance(unique, sa.UniqueConstraint) and all(c.name in present for c in unique.columns):
                kept.append_constraint(sa.UniqueConstraint(*[c.name for c in unique.columns], name=unique.name))
    return list(out.sorted_tables)


def _made_by_column(index: sa.Index) -> bool:
    """A column's own `index=True` index: its copy makes it again."""
    columns = list(index.columns)
    return len(columns) == 1 and bool(columns[0].index)


def _as_text(table: sa.Table) -> sa.Table:
    """The table with every String column TEXT (PostgreSQL from v6 on)."""
    md = sa.MetaData()
    columns = []
    for column in table.columns:
        copy = column._copy()
        if isinstance(copy.type, sa.String) and not isinstance(copy.type, sa.Text):
            copy.type = sa.Text()
        columns.append(copy)
    kept = sa.Table(table.name, md, *columns)
    for index in table.indexes:
        if not _made_by_column(index):
            sa.Index(index.name, *[kept.c[c.name] for c in index.columns], unique=index.unique)
    for unique in table.constraints:
        if isinstance(unique, sa.UniqueConstraint):
            kept.append_constraint(sa.UniqueConstraint(*[c.name for c in unique.columns], name=unique.name))
    return kept


def _inserts(table: sa.Table, dialect: sa.Dialect) -> list[str]:
    # JSON goes in as its text: SQLAlchemy renders no JSON literal, and both databases parse it.
    plain = sa.table(
        table.name,
        *[sa.column(c.name, sa.Text() if isinstance(c.type, sa.JSON) else c.type) for c in table.columns],
    )
    statements = []
    for row in ROWS.get(table.name, []):
        values = {
            k: json.dumps(v) if isinstance(table.c[k].type, sa.JSON) and v is not None else v
            for k, v in row.items()
            if k in table.c
        }
        stmt = sa.insert(plain).values(**values)
        statements.append(str(stmt.compile(dialect=dialect, compile_kwargs={"literal_binds": True})) + ";")
    return statements


def dump(version: int, commit: str, engine: sa.Engine, module: ModuleType, dialect_name: str) -> str:
    head = [
        f"-- cao database at schema version {version} ({dialect_name}), written by",
        f"-- scripts/make_schema_fixtures.py from {SCHEMA_PATH} at commit {commit[:12]}.",
        "-- Do not edit by hand: run the script again.",
        "",
    ]
    body: list[str] = []
    dialect: sa.Dialect
    if dialect_name == "sqlite":
        dialect = sqlite.dialect()
        with engine.connect() as conn:
            ddl = conn.execute(
                sa.text(
                    "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT IN :shadow ORDER BY rowid"
                ).bindparams(sa.bindparam("shadow", expanding=True)),
                {"shadow": list(FTS_SHADOW_TABLES)},
            ).scalars()
            body.extend(" ".join(line.strip() for line in s.strip().splitlines()) + ";" for s in ddl)
        # sqlite_master keeps each CREATE as it was issued, ALTER TABLE ... ADD COLUMN included.
    else:
        dialect = postgresql.dialect()
    tables = _present_tables(engine, module)
    if dialect_name == "postgresql":
        if version >= PG_TEXT_FROM:
            tables = [_as_text(t) for t in tables]
        body.append(str(sa.schema.CreateTable(module.schema_version).compile(dialect=dialect)).strip() + ";")
        for table in tables:
            body.append(str(sa.schema.CreateTable(table).compile(dialect=dialect)).strip() + ";")
            for index in sorted(table.indexes, key=lambda i: i.name or ""):
                body.append(str(sa.schema.CreateIndex(index).compile(dialect=dialect)).strip() + ";")
            if table.name == "memories":  # its full-text column and index (v12 on)
                body.extend(f"{statement};" for statement in module.MEMORY_SEARCH_DDL["postgresql"])
    body.append(f"INSERT INTO schema_version (version) VALUES ({version});")
    for table in tables:
        body.extend(_inserts(table, dialect))
    if dialect_name == "postgresql":
        for table in tables:
            key = SERIAL_KEYS.get(table.name)
            if key and ROWS.get(table.name):
                body.append(
                    f"SELECT setval(pg_get_serial_sequence('{table.name}', '{key}'), "
                    f"(SELECT MAX({key}) FROM {table.name}));"
                )
    return "\n".join(head + body) + "\n"


def main() -> int:
    sys.path.insert(0, str(REPO / "src"))
    from cli_agent_orchestrator.store.schema import LATEST_VERSION

    shipped = historical_schemas()
    OUT.mkdir(parents=True, exist_ok=True)
    for version in range(LATEST_VERSION):
        commit, module = schema_for(version, shipped)
        with tempfile.TemporaryDirectory() as tmp:
            engine = build_sqlite(module, version, Path(tmp) / "cao.db")
            try:
                for dialect_name in ("sqlite", "postgresql"):
                    target = OUT / f"v{version}.{dialect_name}.sql"
                    target.write_text(dump(version, commit, engine, module, dialect_name), encoding="utf-8")
                    print(f"wrote {target.relative_to(REPO)}")
            finally:
                engine.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
