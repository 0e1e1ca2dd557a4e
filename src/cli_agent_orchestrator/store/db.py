"""The store: every read and write of cao's state goes through here.

All statements run on one dedicated thread, so SQLite sees a single writer and
callers on the event loop never block on disk. Services publish the events a
write produces only after `await store.run(...)` has returned, i.e. after commit.
"""
from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, TypeVar

import sqlalchemy as sa

from ..models import InboxMessage, MessageStatus, Terminal, TerminalStatus
from .journal import Journal
from .schema import inbox_messages, migrate, terminals

T = TypeVar("T")


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process crashes
    cur.execute("PRAGMA busy_timeout=5000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


class Store:
    def __init__(self, url_or_path: str | Path):
        url = str(url_or_path)
        if "://" not in url:
            path = Path(url)
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                path.touch(mode=0o600)
            os.chmod(path, 0o600)
            url = f"sqlite:///{path}"
        self.engine = sa.create_engine(url, future=True)
        if self.engine.dialect.name == "sqlite":
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cao-store")
        with self.engine.begin() as conn:
            migrate(conn)
        self.journal = Journal(self.engine)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a store method on the store thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.engine.dispose()

    # --- terminals --------------------------------------------------------------
    def add_terminal(self, term: Terminal, window_id: str | None) -> None:
        now = utc_now()
        with self.engine.begin() as conn:
            conn.execute(terminals.insert().values(
                id=term.id, session_name=term.session_name, window_name=term.window_name,
                window_id=window_id, provider=term.provider, agent_profile=term.agent_profile,
                working_directory=term.working_directory, caller_id=term.caller_id,
                model=term.model, allowed_tools=term.allowed_tools, status=term.status.value,
                created_at=now, last_active=now))

    def get_terminal(self, terminal_id: str) -> Terminal | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(terminals).where(terminals.c.id == terminal_id)).mappings().first()
        return _terminal(row) if row else None

    def window_id(self, terminal_id: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(terminals.c.window_id)
                                .where(terminals.c.id == terminal_id)).scalar()

    def set_window_id(self, terminal_id: str, window_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(terminals.update().where(terminals.c.id == terminal_id)
                         .values(window_id=window_id))

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
            rows = conn.execute(sa.select(terminals.c.id, terminals.c.window_id)
                                .where(terminals.c.gone == sa.false()))
            return {r.id: r.window_id for r in rows if r.window_id}

    def set_status(self, terminal_id: str, status: TerminalStatus, source: str, reason: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(terminals.update().where(terminals.c.id == terminal_id).values(
                status=status.value, status_source=source, status_reason=reason or None,
                last_active=utc_now()))

    def mark_gone(self, terminal_id: str, reason: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(terminals.update().where(terminals.c.id == terminal_id).values(
                gone=True, status=TerminalStatus.ERROR.value, status_source="pane",
                status_reason=reason, last_active=utc_now()))

    def delete_terminal(self, terminal_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(terminals.delete().where(terminals.c.id == terminal_id))

    def session_names(self) -> list[str]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(terminals.c.session_name).distinct()
                                .where(terminals.c.gone == sa.false()))
            return sorted(r.session_name for r in rows)

    # --- inbox ------------------------------------------------------------------
    def add_message(self, sender_id: str, receiver_id: str, message: str) -> InboxMessage:
        now = utc_now()
        with self.engine.begin() as conn:
            result = conn.execute(inbox_messages.insert().values(
                sender_id=sender_id, receiver_id=receiver_id, message=message,
                status=MessageStatus.PENDING.value, created_at=now))
            msg_id = result.inserted_primary_key[0]
        return InboxMessage(msg_id, sender_id, receiver_id, message, MessageStatus.PENDING, now)

    def get_message(self, message_id: int) -> InboxMessage | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(inbox_messages)
                               .where(inbox_messages.c.id == message_id)).mappings().first()
        return _message(row) if row else None

    def list_messages(self, receiver_id: str, status: MessageStatus | None, limit: int) -> list[InboxMessage]:
        query = (sa.select(inbox_messages).where(inbox_messages.c.receiver_id == receiver_id)
                 .order_by(inbox_messages.c.id).limit(limit))
        if status is not None:
            query = query.where(inbox_messages.c.status == status.value)
        with self.engine.connect() as conn:
            return [_message(r) for r in conn.execute(query).mappings()]

    def receivers_with_pending(self) -> list[str]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(inbox_messages.c.receiver_id).distinct().where(
                inbox_messages.c.status == MessageStatus.PENDING.value))
            return [r.receiver_id for r in rows]

    def claim_next(self, receiver_id: str) -> InboxMessage | None:
        """Atomically move the oldest pending message of a receiver to DELIVERING.

        The conditional UPDATE is the exactly-once gate: of any number of racing
        deliverers, only the one whose UPDATE changes the row may paste it.
        """
        with self.engine.begin() as conn:
            in_flight = conn.execute(
                sa.select(inbox_messages.c.id)
                .where(inbox_messages.c.receiver_id == receiver_id,
                       inbox_messages.c.status == MessageStatus.DELIVERING.value).limit(1)).first()
            if in_flight is not None:
                return None  # an earlier message's fate is open (a crash mid-delivery): order first
            row = conn.execute(
                sa.select(inbox_messages)
                .where(inbox_messages.c.receiver_id == receiver_id,
                       inbox_messages.c.status == MessageStatus.PENDING.value)
                .order_by(inbox_messages.c.id).limit(1)).mappings().first()
            if row is None:
                return None
            now = utc_now()
            changed = conn.execute(
                inbox_messages.update()
                .where(inbox_messages.c.id == row["id"],
                       inbox_messages.c.status == MessageStatus.PENDING.value)
                .values(status=MessageStatus.DELIVERING.value, claimed_at=now)).rowcount
        if changed != 1:
            return None
        msg = _message(row)
        msg.status = MessageStatus.DELIVERING
        return msg

    def finish_message(self, message_id: int, status: MessageStatus, error: str | None = None) -> None:
        values: dict[str, Any] = {"status": status.value, "error": error}
        if status == MessageStatus.DELIVERED:
            values["delivered_at"] = utc_now()
        with self.engine.begin() as conn:
            conn.execute(inbox_messages.update().where(inbox_messages.c.id == message_id).values(**values))

    def messages_in_status(self, status: MessageStatus) -> list[InboxMessage]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(inbox_messages).where(inbox_messages.c.status == status.value)
                                .order_by(inbox_messages.c.id)).mappings()
            return [_message(r) for r in rows]

    def fail_pending_for(self, receiver_id: str, reason: str) -> list[InboxMessage]:
        """Mark every undelivered message to a vanished receiver as failed; return them."""
        with self.engine.begin() as conn:
            rows = list(conn.execute(sa.select(inbox_messages).where(
                inbox_messages.c.receiver_id == receiver_id,
                inbox_messages.c.status.in_([MessageStatus.PENDING.value,
                                             MessageStatus.DELIVERING.value]))).mappings())
            if rows:
                conn.execute(inbox_messages.update().where(
                    inbox_messages.c.id.in_([r["id"] for r in rows])).values(
                        status=MessageStatus.FAILED.value, error=reason))
        out = [_message(r) for r in rows]
        for msg in out:
            msg.status, msg.error = MessageStatus.FAILED, reason
        return out


def _terminal(row: Any) -> Terminal:
    return Terminal(
        id=row["id"], session_name=row["session_name"], window_name=row["window_name"],
        provider=row["provider"], agent_profile=row["agent_profile"],
        working_directory=row["working_directory"], caller_id=row["caller_id"], model=row["model"],
        allowed_tools=row["allowed_tools"], status=TerminalStatus(row["status"]),
        status_source=row["status_source"], status_reason=row["status_reason"], gone=bool(row["gone"]),
        created_at=row["created_at"], last_active=row["last_active"])


def _message(row: Any) -> InboxMessage:
    return InboxMessage(
        id=row["id"], sender_id=row["sender_id"], receiver_id=row["receiver_id"], message=row["message"],
        status=MessageStatus(row["status"]), created_at=row["created_at"],
        delivered_at=row["delivered_at"], error=row["error"])
