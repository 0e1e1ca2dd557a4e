"""The store: every read and write of cao's state goes through here.

All statements run on one dedicated thread, so SQLite sees a single writer and
callers on the event loop never block on disk. Services publish the events a
write produces only after `await store.run(...)` has returned, i.e. after commit.

SQLite (a file in the cao home) is the default; CAO_DATABASE_URL=postgresql://… puts the same
schema in PostgreSQL. The exactly-once gates are conditional UPDATEs, which PostgreSQL's row
locks make as exact across connections as SQLite's single writer.

When another process holds the database locked, a statement waits BUSY_TIMEOUT_MS inside
the database (SQLite's busy timeout, PostgreSQL's lock_timeout), then `run` retries it from the event loop (the store thread stays free for the
statements that can go on) until BUSY_LIMIT_S, and then raises StoreBusy (HTTP 503 with
the reason). Every store method is one transaction, so a retry never repeats a commit.

Every other failure of the database or what holds it (disk full, a read-only file system,
PostgreSQL down or restarting) leaves `run` as StoreUnavailable (503) with the reason; bugs
(a violated constraint, bad SQL) stay what they are. A failed write is remembered until a
write succeeds, so that `probe` (for /health) reports what a read alone cannot see.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa

from ..errors import CaoError, StoreBusy, StoreUnavailable
from .inbox_rows import InboxRows
from .journal import Journal
from .schema import migrate
from .terminal_rows import TerminalRows

T = TypeVar("T")
log = logging.getLogger(__name__)

# How long one statement waits for a lock inside SQLite before `run` takes over: short,
# so that one blocked write does not hold the store thread for everyone else.
BUSY_TIMEOUT_MS = 250
# How long `run` keeps retrying a locked database before it answers StoreBusy.
BUSY_LIMIT_S = 10.0
RETRY_FIRST_S, RETRY_MAX_S = 0.05, 0.5
# At start-up the schema must be readable: wait longer, there is nobody to answer yet.
STARTUP_BUSY_LIMIT_S = 30.0
# Longest database message repeated in an answer (PostgreSQL's can run to several lines).
MAX_REASON_CHARS = 300

# Database errors that are cao's own business, not the database's failing: a conflict the store
# method handles where it arises (IntegrityError), or a bug. Everything else is a store failure.
_NOT_A_STORE_FAILURE = (sa.exc.IntegrityError, sa.exc.ProgrammingError, sa.exc.DataError, sa.exc.NotSupportedError)
_WRITE = re.compile(r"\s*(INSERT|UPDATE|DELETE|REPLACE)\b", re.IGNORECASE)


def is_busy(exc: BaseException) -> bool:
    """Another connection holds a lock: SQLite's "database is locked" / "busy" family, or
    PostgreSQL's lock timeout."""
    text = str(getattr(exc, "orig", exc)).lower()
    return isinstance(exc, sa.exc.OperationalError) and ("locked" in text or "busy" in text or "lock timeout" in text)


def is_store_failure(exc: BaseException) -> bool:
    """The database, its disk or its server failed (not a lock: see `is_busy`)."""
    if isinstance(exc, sa.exc.DBAPIError):
        return not isinstance(exc, _NOT_A_STORE_FAILURE)
    # sa.exc.TimeoutError: no pooled connection came free; OSError: the file system said no.
    return isinstance(exc, (sa.exc.TimeoutError, OSError))


def engine_url(url_or_path: str | Path) -> str:
    """A SQLAlchemy URL: a path is a SQLite file; postgres:// and postgresql:// use psycopg 3."""
    url = str(url_or_path)
    if "://" not in url:
        return f"sqlite:///{url}"
    scheme, rest = url.split("://", 1)
    if scheme in ("postgres", "postgresql"):
        return f"postgresql+psycopg://{rest}"
    if scheme in ("postgresql+psycopg", "sqlite"):
        return url
    raise ValueError(f"CAO_DATABASE_URL must be a postgresql:// URL, got the scheme {scheme!r}")


def safe_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:  # a URL that does not parse is shown by its scheme only
        return url.split("://", 1)[0] + "://…"


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process crashes
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


class Store(TerminalRows, InboxRows):
    """The one store: its engine, its thread, and every read and write (the rows' methods are
    in terminal_rows.py and inbox_rows.py)."""

    def __init__(self, url_or_path: str | Path, busy_limit_s: float = BUSY_LIMIT_S):
        url = str(url_or_path)
        self.busy_limit_s = busy_limit_s
        if "://" not in url:
            path = Path(url)
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                path.touch(mode=0o600)
            os.chmod(path, 0o600)
        url = engine_url(url)
        self.where = safe_url(url)
        if url.startswith("postgresql"):
            try:
                import psycopg  # noqa: F401  (the driver SQLAlchemy will load)
            except ImportError:
                raise RuntimeError(
                    "CAO_DATABASE_URL names PostgreSQL, but its driver is not installed: "
                    "pip install 'cli-agent-orchestrator[postgres]' (psycopg 3)"
                ) from None
            # Every statement waits for a lock as long as SQLite's busy timeout, then `run` retries.
            self.engine = sa.create_engine(
                url,
                pool_pre_ping=True,
                connect_args={"options": f"-c lock_timeout={BUSY_TIMEOUT_MS}", "connect_timeout": 10},
            )
        else:
            self.engine = sa.create_engine(url)
        if self.engine.dialect.name == "sqlite":
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        database = self.engine.url.database
        sqlite_file = self.engine.dialect.name == "sqlite" and database not in (None, "", ":memory:")
        self.path = Path(database) if sqlite_file and database else None  # asked why a write failed
        # What the statements of the store method running now wrote (store thread only).
        self._writes = threading.local()
        sa.event.listen(self.engine, "before_cursor_execute", self._before_statement)
        sa.event.listen(self.engine, "after_cursor_execute", self._after_statement)
        # Why the last write failed; None once a write succeeded since (read by `probe`).
        self.write_failure: str | None = None
        self._probe: asyncio.Future | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cao-store")
        self._migrate()
        self.journal = Journal(self.engine)

    def _migrate(self) -> None:
        deadline = time.monotonic() + STARTUP_BUSY_LIMIT_S
        while True:
            try:
                with self.engine.begin() as conn:
                    migrate(conn)
                return
            except sa.exc.OperationalError as exc:
                if not is_busy(exc):
                    reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
                    raise StoreUnavailable(f"cannot use the database {self.where}: {reason}") from None
                if time.monotonic() >= deadline:
                    raise
                log.warning("database %s is locked by another process; waiting to migrate it", self.where)
                time.sleep(RETRY_MAX_S)  # start-up only: nothing else runs yet

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a store method on the store thread; retry while the database is locked.
        Raises StoreBusy past the retry bound, StoreUnavailable when the database failed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.busy_limit_s
        delay = RETRY_FIRST_S
        while True:
            try:
                return await loop.run_in_executor(self._executor, self._call, fn, args)
            except sa.exc.OperationalError as exc:  # a lock: `_call` translated every other failure
                if not is_busy(exc):
                    raise
                if loop.time() + delay >= deadline:
                    busy = StoreBusy(
                        f"the database is locked by another process ({self.where}); cao retried for "
                        f"{self.busy_limit_s:.0f}s. Nothing was changed; try again when it is released"
                    )
                    self.write_failure = str(busy)  # locks stop writers, not readers
                    raise busy from None
                await asyncio.sleep(delay)  # back-off between retries, not synchronisation
                delay = min(delay * 2, RETRY_MAX_S)

    def _call(self, fn: Callable[..., T], args: tuple, quiet: bool = False) -> T:
        """On the store thread: `fn(*args)`, noting whether it wrote. A failure of the database
        becomes StoreUnavailable here, where the file system can still be asked why; a lock is
        left to `run`, which retries it."""
        writes = self._writes
        writes.active, writes.tried, writes.changed = True, False, False
        try:
            result = fn(*args)
        except Exception as exc:
            if is_busy(exc) or not is_store_failure(exc):
                raise
            failure = StoreUnavailable(self._failure_message(exc))
            if not quiet:  # (a /health probe: its answer says it)
                log.warning("%s (in %s)", failure, getattr(fn, "__name__", fn))
            if writes.tried:
                self.write_failure = str(failure)
            raise failure from None
        finally:
            writes.active = False
        if writes.changed:
            self.write_failure = None
        return result

    def _before_statement(self, _conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if getattr(self._writes, "active", False) and _WRITE.match(statement):
            self._writes.tried = True

    def _after_statement(self, _conn: Any, cursor: Any, statement: str, *_rest: Any) -> None:
        # A row changed and (the method returning) committed: the database takes writes again.
        # An UPDATE that matched nothing proves nothing (SQLite writes no page for it).
        if getattr(self._writes, "active", False) and _WRITE.match(statement) and (cursor.rowcount or 0) > 0:
            self._writes.changed = True

    def _failure_message(self, exc: BaseException) -> str:
        """One line: which database, what it said, and what its file system says of itself
        (SQLite reports a read-only file system as a mere "disk I/O error")."""
        orig = getattr(exc, "orig", None) or exc
        if isinstance(orig, OSError) and orig.strerror:
            said = f"{orig.strerror}{f': {orig.filename}' if orig.filename else ''}"
        else:
            lines = str(orig).strip().splitlines()
            said = lines[0].strip() if lines else type(orig).__name__
        return (
            f"the database {self.where} failed: {said[:MAX_REASON_CHARS]}{self._file_system_state()}; "
            "try again once that is fixed"
        )

    def _file_system_state(self) -> str:
        if self.path is None:
            return ""
        folder = self.path.parent
        try:
            fs = os.statvfs(folder)
        except OSError:
            return ""
        read_only = f" (the file system holding {folder} is read-only)"
        if fs.f_flag & os.ST_RDONLY:
            return read_only
        if (fs.f_bfree if os.geteuid() == 0 else fs.f_bavail) == 0:
            return f" (no space left on the file system holding {folder})"
        try:
            # statvfs misses a file system the kernel made read-only after an error (ext4's
            # errors=remount-ro): touching the file's times asks the file system itself.
            os.utime(self.path)
        except OSError as exc:
            return read_only if exc.errno == errno.EROFS else f" ({exc.strerror} on {folder})"
        return ""

    async def probe(self, deadline_s: float) -> dict:
        """For /health: `{"status": "ok"}`, or "down" / "not answering" with a `reason`.
        Reads `SELECT 1` on the store thread within `deadline_s` (one probe in flight at most,
        so a hung database does not pile them up). A read does not see a full disk or a
        read-only file system: the last failed write is reported until a write succeeds."""
        loop = asyncio.get_running_loop()
        if self._probe is None or self._probe.done():
            try:
                self._probe = loop.run_in_executor(self._executor, self._call, self._select_one, (), True)
            except RuntimeError:  # the executor is shut down: the server is stopping
                return {"status": "down", "reason": f"the database {self.where} is closed"}
            # A probe that outlives its caller's deadline still ends; nobody must be left
            # holding its exception.
            self._probe.add_done_callback(lambda done: done.cancelled() or done.exception())
        try:
            await asyncio.wait_for(asyncio.shield(self._probe), deadline_s)
        except TimeoutError:
            return {
                "status": "not answering",
                "reason": f"the database {self.where} does not answer within {deadline_s:g}s "
                "(a statement hangs, or the store is overloaded)",
            }
        except (CaoError, sa.exc.OperationalError) as exc:
            return {"status": "down", "reason": str(exc).strip().splitlines()[0]}
        if self.write_failure is not None:
            return {"status": "down", "reason": f"a write failed: {self.write_failure}"}
        return {"status": "ok"}

    def _select_one(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.engine.dispose()
