"""The terminals' rows: what cao knows of each agent (its window, provider, caller, status as
last written, its hook secret, worktree, host, workflow step, and what workers know of each
other: description, group, metadata). Methods of the Store (a mixin):
each one is one transaction, run on the store thread by `Store.run`.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ..models import Terminal, TerminalStatus, Worktree
from .schema import terminals
from .stamps import utc_now


class TerminalRows:
    engine: sa.Engine

    def add_terminal(self, term: Terminal, window_id: str | None, hook_secret: str | None = None) -> None:
        now = utc_now()
        with self.engine.begin() as conn:
            conn.execute(
                terminals.insert().values(
                    id=term.id,
                    session_name=term.session_name,
                    window_name=term.window_name,
                    window_id=window_id,
                    provider=term.provider,
                    agent_profile=term.agent_profile,
                    working_directory=term.working_directory,
                    caller_id=term.caller_id,
                    model=term.model,
                    allowed_tools=term.allowed_tools,
                    status=term.status.value,
                    created_at=now,
                    last_active=now,
                    hook_secret=hook_secret,
                    worktree=_worktree_json(term.worktree),
                    host=term.host,
                    workflow_step=term.workflow_step,
                    description=term.description,
                    group_path=term.group,
                    metadata=term.metadata,
                )
            )

    def set_labels(self, terminal_id: str, labels: dict[str, Any]) -> bool:
        """Replace some of a live terminal's `description`, `group`, `metadata` (each given one
        whole; None clears it). False: no such live terminal, and nothing changed."""
        columns = {"description": "description", "group": "group_path", "metadata": "metadata"}
        values = {columns[name]: value for name, value in labels.items()}
        with self.engine.begin() as conn:
            done = conn.execute(
                terminals.update().where(terminals.c.id == terminal_id, terminals.c.gone == sa.false()).values(**values)
            )
        return bool(done.rowcount)

    def hook_secret(self, terminal_id: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(
                sa.select(terminals.c.hook_secret).where(terminals.c.id == terminal_id, terminals.c.gone == sa.false())
            ).scalar()

    def get_terminal(self, terminal_id: str) -> Terminal | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(terminals).where(terminals.c.id == terminal_id)).mappings().first()
        return _terminal(row) if row else None

    def window_of(self, terminal_id: str) -> tuple[bool, str | None, str | None] | None:
        """(gone, window id, status reason) of a terminal in one read, or None if unknown."""
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(terminals.c.gone, terminals.c.window_id, terminals.c.status_reason).where(
                    terminals.c.id == terminal_id
                )
            ).first()
        return (bool(row.gone), row.window_id, row.status_reason) if row else None

    def window_id(self, terminal_id: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(terminals.c.window_id).where(terminals.c.id == terminal_id)).scalar()

    def set_window_id(self, terminal_id: str, window_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(terminals.update().where(terminals.c.id == terminal_id).values(window_id=window_id))

    def list_terminals(self, session_name: str | None = None, include_gone: bool = False) -> list[Terminal]:
        query = sa.select(terminals).order_by(terminals.c.created_at)
        if session_name is not None:
            query = query.where(terminals.c.session_name == session_name)
        if not include_gone:
            query = query.where(terminals.c.gone == sa.false())
        with self.engine.connect() as conn:
            return [_terminal(row) for row in conn.execute(query).mappings()]

    def all_window_ids(self) -> dict[str, str]:
        """terminal id → tmux window id, for live terminals."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(terminals.c.id, terminals.c.window_id).where(terminals.c.gone == sa.false()))
            return {r.id: r.window_id for r in rows if r.window_id}

    def set_status(self, terminal_id: str, status: TerminalStatus, source: str, reason: str) -> None:
        self.set_statuses({terminal_id: (status, source, reason)})

    def set_statuses(self, latest: dict[str, tuple[TerminalStatus, str, str]]) -> None:
        """The latest status of several terminals, in one transaction."""
        now = utc_now()
        with self.engine.begin() as conn:
            for terminal_id, (status, source, reason) in latest.items():
                # A gone terminal keeps the status that says why it is gone.
                conn.execute(
                    terminals.update()
                    .where(terminals.c.id == terminal_id, terminals.c.gone == sa.false())
                    .values(status=status.value, status_source=source, status_reason=reason or None, last_active=now)
                )

    def mark_gone(self, terminal_id: str, reason: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                terminals.update()
                .where(terminals.c.id == terminal_id)
                .values(
                    gone=True,
                    status=TerminalStatus.ERROR.value,
                    status_source="pane",
                    status_reason=reason,
                    last_active=utc_now(),
                )
            )

    def delete_terminal(self, terminal_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(terminals.delete().where(terminals.c.id == terminal_id))

    def session_names(self) -> list[str]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(terminals.c.session_name).distinct().where(terminals.c.gone == sa.false()))
            return sorted(r.session_name for r in rows)


def _terminal(row: Any) -> Terminal:
    return Terminal(
        id=row["id"],
        session_name=row["session_name"],
        window_name=row["window_name"],
        provider=row["provider"],
        agent_profile=row["agent_profile"],
        working_directory=row["working_directory"],
        caller_id=row["caller_id"],
        model=row["model"],
        allowed_tools=row["allowed_tools"],
        status=TerminalStatus(row["status"]),
        status_source=row["status_source"],
        status_reason=row["status_reason"],
        gone=bool(row["gone"]),
        created_at=row["created_at"],
        last_active=row["last_active"],
        worktree=_worktree(row["worktree"]),
        host=row["host"],
        workflow_step=row["workflow_step"] if isinstance(row["workflow_step"], dict) else None,
        description=row["description"],
        group=row["group_path"] if isinstance(row["group_path"], list) else None,
        metadata=row["metadata"] if isinstance(row["metadata"], dict) else None,
    )


def _worktree_json(wt: Worktree | None) -> dict | None:
    if wt is None:
        return None
    return {"path": wt.path, "branch": wt.branch, "repository": wt.repository, "base": wt.base}


def _worktree(value: Any) -> Worktree | None:
    if not isinstance(value, dict):
        return None
    return Worktree(
        path=str(value["path"]),
        branch=str(value["branch"]),
        repository=str(value["repository"]),
        base=str(value["base"]),
    )
