"""Tables and migrations, in SQLAlchemy Core so that the SQL stays portable
(SQLite today, PostgreSQL when a user outgrows one machine).

The schema is versioned: `MIGRATIONS[n]` moves a database from version n to n+1.
Add a function at the end; never edit one that has shipped.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

metadata = sa.MetaData()

schema_version = sa.Table(
    "schema_version",
    metadata,
    sa.Column("version", sa.Integer, nullable=False),
)

terminals = sa.Table(
    "terminals",
    metadata,
    sa.Column("id", sa.String(8), primary_key=True),
    sa.Column("session_name", sa.String(64), nullable=False, index=True),
    sa.Column("window_name", sa.String(64), nullable=False),
    sa.Column("window_id", sa.String(16)),  # tmux @N, stable while the window lives
    sa.Column("provider", sa.String(32), nullable=False),
    sa.Column("agent_profile", sa.String(64), nullable=False),
    sa.Column("working_directory", sa.Text, nullable=False),
    sa.Column("caller_id", sa.String(8)),
    sa.Column("model", sa.String(128)),
    sa.Column("allowed_tools", sa.JSON),
    sa.Column("status", sa.String(32), nullable=False, server_default="unknown"),
    sa.Column("status_source", sa.String(32)),
    sa.Column("status_reason", sa.Text),
    sa.Column("gone", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("created_at", sa.String(40), nullable=False),
    sa.Column("last_active", sa.String(40), nullable=False),
    # The secret this terminal's CLI hooks send (CAO_HOOK_SECRET in its environment):
    # a hook can only speak for the terminal that owns it.
    sa.Column("hook_secret", sa.String(64)),
    # The worker's own git worktree (use_worktree): {path, branch, repository, base}; NULL = none.
    sa.Column("worktree", sa.JSON),
    # The registered host it runs on (services/hosts); NULL = this machine.
    sa.Column("host", sa.Text),
    # A workflow step's agent: {CAO_WORKFLOW_RUN_ID, CAO_WORKFLOW_STEP_ID, CAO_WORKFLOW_GENERATION?},
    # what its workflow_return is about (cao's MCP endpoint reads it for the caller); NULL = none.
    sa.Column("workflow_step", sa.JSON),
    # What workers know of each other (v10→v11): a description, a group path (a JSON list of
    # strings) and free metadata (a JSON object); NULL = none. TEXT/JSON, bounded by the API.
    sa.Column("description", sa.Text),
    sa.Column("group_path", sa.JSON),
    sa.Column("metadata", sa.JSON),
)

inbox_messages = sa.Table(
    "inbox_messages",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("sender_id", sa.String(128), nullable=False),
    sa.Column("receiver_id", sa.String(8), nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False, index=True),
    sa.Column("created_at", sa.String(40), nullable=False),
    sa.Column("claimed_at", sa.String(40)),
    sa.Column("delivered_at", sa.String(40)),
    sa.Column("error", sa.Text),
    # Where the paste would land, taken before it ("<history size>,<cursor row>"): after a
    # crash mid-delivery, only text from there on can be this message.
    sa.Column("paste_mark", sa.String(40)),
    sa.Index("ix_inbox_receiver_status", "receiver_id", "status", "id"),
)


# --- the workflow journal (seed 002) ---------------------------------------------------
# A run, its steps keyed by the script's step id, the one-attempt decisions a human
# granted for the next drive, and the append-only event timeline.
workflow_runs = sa.Table(
    "workflow_runs",
    metadata,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("workflow_name", sa.String(64), nullable=False),
    sa.Column("tier", sa.String(8), nullable=False),  # "script" | "yaml"
    sa.Column("state", sa.String(16), nullable=False, index=True),
    sa.Column("kind", sa.String(16)),  # why it ended badly: error, timeout, cancelled, halted, ...
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("source", sa.Text, nullable=False),  # frozen snapshot: a resume runs exactly this
    sa.Column("source_path", sa.Text, nullable=False),
    sa.Column("content_hash", sa.String(64), nullable=False),
    sa.Column("inputs_json", sa.Text, nullable=False),
    sa.Column("output_json", sa.Text),  # JSON text of the run's output; NULL = none emitted
    sa.Column("warnings", sa.JSON, nullable=False),
    sa.Column("halts", sa.JSON, nullable=False),  # [{step_id, rule, message}] of the last drive
    sa.Column("current_step_id", sa.String(64)),
    sa.Column("driver_pid", sa.Integer),
    sa.Column("drives", sa.Integer, nullable=False, server_default="1"),
    sa.Column("started_at", sa.String(24), nullable=False),
    sa.Column("finished_at", sa.String(24)),
    # Orders runs started within the same second (started_at has second precision).
    sa.Column("created_ns", sa.BigInteger, nullable=False, server_default="0"),
)

workflow_steps = sa.Table(
    "workflow_steps",
    metadata,
    sa.Column("run_id", sa.String(64), sa.ForeignKey("workflow_runs.run_id", ondelete="CASCADE"), primary_key=True),
    sa.Column("step_id", sa.String(64), primary_key=True),
    sa.Column("position", sa.Integer, nullable=False),  # order of first appearance
    sa.Column("state", sa.String(24), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("policy", sa.String(16)),  # recovery declared by the last attempt; NULL = undeclared
    sa.Column("fingerprint", sa.String(64)),
    sa.Column("fingerprint_scheme", sa.String(8)),
    sa.Column("envelope", sa.JSON),  # {last_message, status, terminal_id, truncated}
    sa.Column("output", sa.JSON),  # structured output (workflow_return), if any
    sa.Column("error", sa.Text),
    sa.Column("error_kind", sa.String(16)),
    sa.Column("terminal_id", sa.String(8)),
    sa.Column("generation", sa.Integer),
    sa.Column("halt_rule", sa.String(32)),
    sa.Column("halt_message", sa.Text),
    sa.Column("started_at", sa.String(24)),
    sa.Column("finished_at", sa.String(24)),
)

workflow_decisions = sa.Table(
    "workflow_decisions",
    metadata,
    sa.Column("run_id", sa.String(64), sa.ForeignKey("workflow_runs.run_id", ondelete="CASCADE"), primary_key=True),
    sa.Column("step_id", sa.String(64), primary_key=True),
    sa.Column("decision", sa.String(8), nullable=False),  # "rerun" | "skip"
    sa.Column("generation", sa.Integer, nullable=False),  # the one drive it is valid for
)

workflow_events = sa.Table(
    "workflow_events",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("type", sa.String(40), nullable=False),
    sa.Column("step_id", sa.String(64)),
    sa.Column("generation", sa.Integer),
    sa.Column("data", sa.JSON, nullable=False),
    sa.Column("at", sa.String(24), nullable=False),
    sa.Index("ix_workflow_events_run_seq", "run_id", "seq"),
)


# --- scheduled flows ----------------------------------------------------------------------
# A flow as it was added (its file read then; adding again replaces it) and its schedule
# state; and its runs, newest kept (flows/service.py prunes old ones).
flows = sa.Table(
    "flows",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("file_path", sa.Text, nullable=False),
    sa.Column("schedule", sa.String(200), nullable=False),
    sa.Column("timezone", sa.String(64)),  # NULL = the server's local zone
    sa.Column("agent_profile", sa.String(64), nullable=False),
    sa.Column("provider", sa.String(64)),
    sa.Column("script", sa.Text),  # absolute path of the gate script
    sa.Column("engine", sa.String(16)),
    sa.Column("host", sa.Text),  # a registered host's name or "local"; NULL = the placement policy
    sa.Column("timeout", sa.Float, nullable=False),
    sa.Column("prompt_template", sa.Text, nullable=False),
    sa.Column("description", sa.Text, nullable=False, server_default=""),
    sa.Column("enabled", sa.Boolean, nullable=False),
    sa.Column("last_run", sa.String(24)),  # UTC, second precision, Z
    sa.Column("next_run", sa.String(24)),
    sa.Column("added_at", sa.String(24), nullable=False),
)

flow_runs = sa.Table(
    "flow_runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("flow_name", sa.String(64), nullable=False),
    sa.Column("trigger", sa.String(16), nullable=False),
    sa.Column("state", sa.String(16), nullable=False, index=True),
    sa.Column("due_at", sa.String(24)),
    sa.Column("started_at", sa.String(24), nullable=False),
    sa.Column("finished_at", sa.String(24)),
    sa.Column("execute", sa.Boolean),
    sa.Column("gate_output", sa.JSON),
    sa.Column("reason", sa.Text),
    sa.Column("session_name", sa.String(64)),
    sa.Column("terminal_id", sa.String(8)),
    sa.Column("prompt", sa.Text),
    sa.Column("reply", sa.Text),
    sa.Index("ix_flow_runs_flow_id", "flow_name", "id"),
)


# --- hosts: where agents may run besides this machine ------------------------------------
# Every string column is TEXT from the start (PostgreSQL would enforce a String length; the
# API checks what it accepts, see _v5_to_v6).
hosts = sa.Table(
    "hosts",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("ssh", sa.Text, nullable=False),  # [user@]host[:port], validated before it is stored
    sa.Column("identity", sa.Text),  # a private key file on the server's machine; NULL = ssh's own
    sa.Column("max_agents", sa.Integer),  # NULL = no limit of cao's own
    sa.Column("state", sa.Text, nullable=False),  # active | draining
    sa.Column("added_at", sa.Text, nullable=False),
)


# --- handoffs: one row per handoff that creates its own worker ----------------------------
# Written before the worker exists (its terminal id is chosen first) and closed when the
# handoff ends, so that a restart finds workers nobody can receive an answer from
# (services/handoffs.py). TEXT throughout, as for hosts.
handoffs = sa.Table(
    "handoffs",
    metadata,
    sa.Column("job_id", sa.Text, primary_key=True),  # the handoff id of its HandoffStarted event
    sa.Column("caller_id", sa.Text),  # the calling terminal; NULL = the HTTP client of run-step
    sa.Column("terminal_id", sa.Text),  # the worker
    sa.Column("agent", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False, index=True),  # store/handoffs.py HandoffState
    sa.Column("deadline", sa.Text, nullable=False),  # UTC: when its call, or its grace period, ends
    sa.Column("created_at", sa.Text, nullable=False),
    sa.Column("finished_at", sa.Text),
    sa.Column("error", sa.Text),  # why it ended without an answer; NULL = it delivered one
    # Durable handoffs (services/handoff_results.py): what its worker answered (JSON), kept until
    # read once; and when it was read (or posted to the caller's inbox).
    sa.Column("result", sa.Text),
    sa.Column("delivered_at", sa.Text),
    sa.Column("durable", sa.Boolean),  # a job its caller can read later (not a plain run-step call)
)


# --- memories: what one agent learns, the next one knows (memory/) ------------------------
# One row per (scope, scope_id, key); its content is a list of dated entries (`entries`), and
# `content` their text joined, which the database's full-text engine indexes: SQLite's FTS5
# table memories_fts (kept in step by triggers, in the writing transaction), PostgreSQL's
# generated tsvector column `search` with a GIN index (MEMORY_SEARCH_DDL below). TEXT throughout.
memories = sa.Table(
    "memories",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("scope", sa.Text, nullable=False),  # global | project | session | agent
    sa.Column("scope_id", sa.Text, nullable=False),  # "" (global), a project, a session, a profile
    sa.Column("key", sa.Text, nullable=False),
    sa.Column("memory_type", sa.Text, nullable=False),  # user | feedback | project | reference
    sa.Column("tags", sa.JSON, nullable=False),  # a JSON list of strings
    sa.Column("entries", sa.JSON, nullable=False),  # [{at, text, terminal_id, agent_profile}], oldest first
    sa.Column("content", sa.Text, nullable=False),  # the entries' text, what full-text search reads
    sa.Column("created_at", sa.Text, nullable=False),
    sa.Column("updated_at", sa.Text, nullable=False),
    sa.Column("terminal_id", sa.Text),  # who wrote it last: a terminal, or NULL (the user)
    sa.Column("agent_profile", sa.Text),  # that terminal's profile
    sa.Column("recall_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_recalled_at", sa.Text),
    sa.UniqueConstraint("scope", "scope_id", "key", name="uq_memories_scope_key"),
    sa.Index("ix_memories_updated", "updated_at"),
    sa.Index("ix_memories_scope_updated", "scope", "scope_id", "updated_at"),  # an agent's latest, per scope
)


def _v0_to_v1(conn: sa.Connection) -> None:
    for table in (terminals, inbox_messages):
        table.create(conn, checkfirst=True)


def _v1_to_v2(conn: sa.Connection) -> None:
    for table in (workflow_runs, workflow_steps, workflow_decisions, workflow_events):
        table.create(conn, checkfirst=True)


def _v2_to_v3(conn: sa.Connection) -> None:
    # Databases made by v0→v1 of this version already have the columns.
    for table, column in ((terminals, terminals.c.hook_secret), (inbox_messages, inbox_messages.c.paste_mark)):
        present = {c["name"] for c in sa.inspect(conn).get_columns(table.name)}
        if column.name not in present:
            kind = column.type.compile(dialect=conn.dialect)
            conn.execute(sa.text(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}"))


def _v3_to_v4(conn: sa.Connection) -> None:
    _add_missing_column(conn, terminals, terminals.c.worktree)


def _add_missing_column(conn: sa.Connection, table: sa.Table, column: sa.Column) -> None:
    # Databases made by v0→v1 of a later version already have the column.
    present = {c["name"] for c in sa.inspect(conn).get_columns(table.name)}
    if column.name not in present:
        kind = column.type.compile(dialect=conn.dialect)
        conn.execute(sa.text(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}"))


def _v4_to_v5(conn: sa.Connection) -> None:
    for table in (flows, flow_runs):
        table.create(conn, checkfirst=True)


def _v5_to_v6(conn: sa.Connection) -> None:
    # The String lengths above document sizes; SQLite never enforced them, and the API checks
    # what it accepts. PostgreSQL would enforce them (a 64-character hook event name makes a
    # 69-character status source), so there every such column becomes TEXT, as SQLite has it.
    # Read from the database itself, so that tables and columns of later versions are no concern.
    if conn.dialect.name != "postgresql":
        return
    inspector = sa.inspect(conn)
    for table in inspector.get_table_names():
        for column in inspector.get_columns(table):
            if isinstance(column["type"], sa.String) and not isinstance(column["type"], sa.Text):
                conn.execute(sa.text(f'ALTER TABLE "{table}" ALTER COLUMN "{column["name"]}" TYPE TEXT'))


def _v6_to_v7(conn: sa.Connection) -> None:
    hosts.create(conn, checkfirst=True)


def _v7_to_v8(conn: sa.Connection) -> None:
    _add_missing_column(conn, terminals, terminals.c.host)
    _add_missing_column(conn, flows, flows.c.host)


def _v8_to_v9(conn: sa.Connection) -> None:
    handoffs.create(conn, checkfirst=True)


def _v9_to_v10(conn: sa.Connection) -> None:
    _add_missing_column(conn, terminals, terminals.c.workflow_step)


def _v10_to_v11(conn: sa.Connection) -> None:
    for column in (terminals.c.description, terminals.c.group_path, terminals.c.metadata):
        _add_missing_column(conn, terminals, column)


def _v11_to_v12(conn: sa.Connection) -> None:
    memories.create(conn, checkfirst=True)
    _make_memory_search(conn)


def _make_memory_search(conn: sa.Connection) -> None:
    """(Re)build the full-text index of `memories` as MEMORY_SEARCH_DDL says, from the rows."""
    for statement in MEMORY_SEARCH_DDL[conn.dialect.name]:
        conn.execute(sa.text(statement))


# The full-text index of `memories`, per engine; the ranking is the engine's own (FTS5's bm25,
# PostgreSQL's ts_rank). SQLite: an external-content FTS5 table that triggers keep in step with
# every insert, delete and change of the indexed columns, inside the writing transaction. Its
# fourth column, `scopes`, holds one word naming the memory's (scope, scope id) — the hex of
# "scope:scope_id", see store/memories.py's scope_word — so that a recall matches only the
# memories its agent may read inside the index and ranks those alone, not every memory of every
# project (v14). Its content is the view memories_fts_source, which adds that word to the rows.
# PostgreSQL combines its GIN index with the (scope, scope_id) index by itself.
_FTS_COLUMNS = "key, tags, content, scopes"
_FTS_NEW = "new.id, new.key, new.tags, new.content, hex(new.scope || ':' || new.scope_id)"
_FTS_OLD = "old.id, old.key, old.tags, old.content, hex(old.scope || ':' || old.scope_id)"
MEMORY_SEARCH_DDL: dict[str, tuple[str, ...]] = {
    "sqlite": (
        "DROP TRIGGER IF EXISTS memories_fts_insert",
        "DROP TRIGGER IF EXISTS memories_fts_delete",
        "DROP TRIGGER IF EXISTS memories_fts_update",
        "DROP TABLE IF EXISTS memories_fts",
        "DROP VIEW IF EXISTS memories_fts_source",
        "CREATE VIEW memories_fts_source AS "
        "SELECT id, key, tags, content, hex(scope || ':' || scope_id) AS scopes FROM memories",
        f"CREATE VIRTUAL TABLE memories_fts USING fts5({_FTS_COLUMNS}, "
        "content='memories_fts_source', content_rowid='id', tokenize='porter unicode61')",
        "INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')",
        "CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN "
        f"INSERT INTO memories_fts(rowid, {_FTS_COLUMNS}) VALUES ({_FTS_NEW}); END",
        "CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN "
        f"INSERT INTO memories_fts(memories_fts, rowid, {_FTS_COLUMNS}) VALUES ('delete', {_FTS_OLD}); END",
        "CREATE TRIGGER memories_fts_update AFTER UPDATE OF key, tags, content, scope, scope_id ON memories BEGIN "
        f"INSERT INTO memories_fts(memories_fts, rowid, {_FTS_COLUMNS}) VALUES ('delete', {_FTS_OLD}); "
        f"INSERT INTO memories_fts(rowid, {_FTS_COLUMNS}) VALUES ({_FTS_NEW}); END",
    ),
    "postgresql": (
        "ALTER TABLE memories ADD COLUMN IF NOT EXISTS search tsvector GENERATED ALWAYS AS ("
        "setweight(to_tsvector('english', key), 'A') || "
        "setweight(to_tsvector('english', tags::text), 'B') || "
        "setweight(to_tsvector('english', content), 'C')) STORED",
        "CREATE INDEX IF NOT EXISTS ix_memories_search ON memories USING GIN (search)",
    ),
}


def _v12_to_v13(conn: sa.Connection) -> None:
    for column in (handoffs.c.result, handoffs.c.delivered_at, handoffs.c.durable):
        _add_missing_column(conn, handoffs, column)


def _v13_to_v14(conn: sa.Connection) -> None:
    _make_memory_search(conn)  # SQLite's index gains each memory's scope word (see above)


MIGRATIONS: list[Callable[[sa.Connection], None]] = [
    _v0_to_v1,
    _v1_to_v2,
    _v2_to_v3,
    _v3_to_v4,
    _v4_to_v5,
    _v5_to_v6,
    _v6_to_v7,
    _v7_to_v8,
    _v8_to_v9,
    _v9_to_v10,
    _v10_to_v11,
    _v11_to_v12,
    _v12_to_v13,
    _v13_to_v14,
]
LATEST_VERSION = len(MIGRATIONS)


def migrate(conn: sa.Connection) -> int:
    """Bring the database to LATEST_VERSION; returns the version it started at."""
    schema_version.create(conn, checkfirst=True)
    current = conn.execute(sa.select(schema_version.c.version)).scalar()
    if current is None:
        conn.execute(schema_version.insert().values(version=0))
        current = 0
    if current > LATEST_VERSION:
        raise RuntimeError(
            f"database schema v{current} is newer than this cao (v{LATEST_VERSION}); "
            "upgrade cao or use another CAO_HOME_DIR"
        )
    for version in range(current, LATEST_VERSION):
        MIGRATIONS[version](conn)
        conn.execute(schema_version.update().values(version=version + 1))
    return current
