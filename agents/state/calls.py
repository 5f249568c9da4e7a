"""The call journal: side-effecting calls recorded before they run, beside the checkpoints.

A side effect must happen once, crash or not. Before a side-effecting tool (or, next, a
workflow node) runs, its idempotency key is recorded durably; a resumed or retried run that
makes the same call finds the record: a finished call's result is reused without running the
handler again, and a call that was cut off (the process died mid-call) runs again with the
same key, so the handler can tell the repeat and refuse it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from langgraph.checkpoint.base import BaseCheckpointSaver

from agents.state.sqlite_saver import ThreadedSqliteSaver

CallStatus = Literal["started", "done"]


@dataclass(frozen=True)
class CallRecord:
    """A recorded call: ``content`` and ``ok`` once it finished."""

    key: str
    status: CallStatus
    content: str | None = None
    ok: bool | None = None


class CallJournal(Protocol):
    """Where side-effecting calls are recorded (one table in the checkpoint database)."""

    async def begin(
        self, key: str, *, thread_id: str | None, run_id: str | None, tool: str
    ) -> CallRecord | None:
        """Record the call as started; returns the earlier record when the key has one."""
        ...

    async def finish(self, key: str, content: str, ok: bool) -> None:
        """Record the call's result."""
        ...


class MemoryCallJournal:
    """A journal in memory: for graphs run without a store (tests, the bench)."""

    def __init__(self) -> None:
        self.records: dict[str, CallRecord] = {}

    async def begin(
        self, key: str, *, thread_id: str | None, run_id: str | None, tool: str
    ) -> CallRecord | None:
        """See ``CallJournal.begin``."""
        earlier = self.records.get(key)
        if earlier is None:
            self.records[key] = CallRecord(key, "started")
        return earlier

    async def finish(self, key: str, content: str, ok: bool) -> None:
        """See ``CallJournal.finish``."""
        self.records[key] = CallRecord(key, "done", content, ok)


_TABLE = "skilldesk_calls"
_COLUMNS = "key, status, content, ok"


class SqliteCallJournal:
    """The journal in the SQLite checkpoint file, on the checkpointer's own thread."""

    def __init__(self, saver: ThreadedSqliteSaver) -> None:
        self.saver = saver
        self._ready = False

    async def begin(
        self, key: str, *, thread_id: str | None, run_id: str | None, tool: str
    ) -> CallRecord | None:
        """See ``CallJournal.begin``."""
        return await self.saver.run(self._begin, key, thread_id, run_id, tool)

    async def finish(self, key: str, content: str, ok: bool) -> None:
        """See ``CallJournal.finish``."""
        await self.saver.run(self._finish, key, content, ok)

    def _setup(self) -> None:
        if not self._ready:
            self.saver.conn.execute(
                f"CREATE TABLE IF NOT EXISTS {_TABLE} (key TEXT PRIMARY KEY, status TEXT NOT NULL,"
                " content TEXT, ok INTEGER, thread_id TEXT, run_id TEXT, tool TEXT NOT NULL,"
                " created REAL NOT NULL, updated REAL NOT NULL)"
            )
            self._ready = True

    def _begin(
        self, key: str, thread_id: str | None, run_id: str | None, tool: str
    ) -> CallRecord | None:
        self._setup()
        conn = self.saver.conn
        with conn:  # one transaction, committed before the handler runs
            row = conn.execute(f"SELECT {_COLUMNS} FROM {_TABLE} WHERE key = ?", (key,)).fetchone()
            if row is None:
                now = time.time()
                conn.execute(
                    f"INSERT INTO {_TABLE} (key, status, thread_id, run_id, tool, created, updated)"
                    " VALUES (?, 'started', ?, ?, ?, ?, ?)",
                    (key, thread_id, run_id, tool, now, now),
                )
        return None if row is None else _record(row)

    def _finish(self, key: str, content: str, ok: bool) -> None:
        self._setup()
        with self.saver.conn as conn:
            conn.execute(
                f"UPDATE {_TABLE} SET status = 'done', content = ?, ok = ?, updated = ?"
                " WHERE key = ?",
                (content, int(ok), time.time(), key),
            )


class PostgresCallJournal:
    """The journal in the PostgreSQL checkpoint database (shared by every process)."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self._ready = False

    async def begin(
        self, key: str, *, thread_id: str | None, run_id: str | None, tool: str
    ) -> CallRecord | None:
        """See ``CallJournal.begin``."""
        await self._setup()
        now = time.time()
        async with self.pool.connection() as conn:
            inserted = await conn.execute(
                f"INSERT INTO {_TABLE} (key, status, thread_id, run_id, tool, created, updated)"
                " VALUES (%s, 'started', %s, %s, %s, %s, %s) ON CONFLICT (key) DO NOTHING",
                (key, thread_id, run_id, tool, now, now),
            )
            if inserted.rowcount:
                return None
            cursor = await conn.execute(f"SELECT {_COLUMNS} FROM {_TABLE} WHERE key = %s", (key,))
            row = await cursor.fetchone()
        return None if row is None else _record(tuple(row.values()))

    async def finish(self, key: str, content: str, ok: bool) -> None:
        """See ``CallJournal.finish``."""
        await self._setup()
        async with self.pool.connection() as conn:
            await conn.execute(
                f"UPDATE {_TABLE} SET status = 'done', content = %s, ok = %s, updated = %s"
                " WHERE key = %s",
                (content, ok, time.time(), key),
            )

    async def _setup(self) -> None:
        if self._ready:
            return
        async with self.pool.connection() as conn:
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {_TABLE} (key TEXT PRIMARY KEY, status TEXT NOT NULL,"
                " content TEXT, ok BOOLEAN, thread_id TEXT, run_id TEXT, tool TEXT NOT NULL,"
                " created DOUBLE PRECISION NOT NULL, updated DOUBLE PRECISION NOT NULL)"
            )
        self._ready = True


def call_journal(saver: BaseCheckpointSaver[Any] | None) -> CallJournal:
    """The journal that lives beside ``saver``'s checkpoints (in memory for other savers)."""
    if isinstance(saver, ThreadedSqliteSaver):
        return SqliteCallJournal(saver)
    pool = getattr(saver, "conn", None)
    if type(saver).__name__.startswith("AsyncPostgres") and hasattr(pool, "connection"):
        return PostgresCallJournal(pool)
    return MemoryCallJournal()


def _record(row: tuple[Any, ...]) -> CallRecord:
    key, status, content, ok = row
    return CallRecord(key, status, content, None if ok is None else bool(ok))
