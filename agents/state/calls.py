"""The call journal: side-effecting calls recorded before they run, beside the checkpoints.

A side effect must happen once, crash or not. Before a side-effecting tool (or, next, a
workflow node) runs, its idempotency key is recorded durably; a resumed or retried run that
makes the same call finds the record: a finished call's result is reused without running the
handler again, and a call that failed or was cut off (the process died mid-call) runs again
with the same key, so the handler can tell the repeat and refuse it. A record names what was
asked (``request``: the tool and its arguments' hash), so a key sent again with another
request is told apart from a retry.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from langgraph.checkpoint.base import BaseCheckpointSaver

from agents.state.sqlite_saver import ThreadedSqliteSaver

CallStatus = Literal["started", "done", "failed"]


@dataclass(frozen=True)
class CallRecord:
    """A recorded call: ``content`` and ``ok`` once it finished; what it asked (``request``,
    None in a record from before requests were kept), when it started and when it was last
    heard of (Unix times)."""

    key: str
    status: CallStatus
    content: str | None = None
    ok: bool | None = None
    request: str | None = None
    created: float = 0.0
    updated: float = 0.0  # its last sign of life: a call under way beats every few seconds


class CallJournal(Protocol):
    """Where side-effecting calls are recorded (one table in the checkpoint database)."""

    async def begin(
        self,
        key: str,
        *,
        thread_id: str | None,
        run_id: str | None,
        tool: str,
        request: str | None = None,
        stale_before: float = 0.0,
    ) -> CallRecord | None:
        """Claim the call: None when the caller is to make it (the key is new, or its call
        failed, or was cut off: started and not heard of since ``stale_before``), recorded
        as started; else the record that stands (a call done, or one under way elsewhere,
        or one that asked another ``request``; None: any). One claimant wins, whatever the
        processes."""
        ...

    async def get(self, key: str) -> CallRecord | None:
        """The key's record, if it has one."""
        ...

    async def touch(self, key: str) -> None:
        """A call under way is alive (its record's ``updated`` is now)."""
        ...

    async def finish(self, key: str, content: str, ok: bool) -> None:
        """Record the call's result."""
        ...

    async def fail(self, key: str, content: str | None = None) -> None:
        """Record that the call failed, and what it answered (the calls that waited for it
        get that answer; a later retry runs it again, at once)."""
        ...


class MemoryCallJournal:
    """A journal in memory: for graphs run without a store (tests, the bench)."""

    def __init__(self) -> None:
        self.records: dict[str, CallRecord] = {}

    async def begin(
        self,
        key: str,
        *,
        thread_id: str | None,
        run_id: str | None,
        tool: str,
        request: str | None = None,
        stale_before: float = 0.0,
    ) -> CallRecord | None:
        """See ``CallJournal.begin``."""
        earlier = self.records.get(key)
        now = time.time()
        if earlier is None:
            self.records[key] = CallRecord(key, "started", None, None, request, now, now)
            return None
        if _claimable(earlier, request, stale_before):
            self.records[key] = CallRecord(key, "started", None, None, earlier.request, now, now)
            return None
        return earlier

    async def get(self, key: str) -> CallRecord | None:
        """See ``CallJournal.get``."""
        return self.records.get(key)

    async def touch(self, key: str) -> None:
        """See ``CallJournal.touch``."""
        earlier = self.records.get(key)
        if earlier is not None and earlier.status == "started":
            self.records[key] = replace(earlier, updated=time.time())

    async def finish(self, key: str, content: str, ok: bool) -> None:
        """See ``CallJournal.finish``."""
        self._set(key, "done", content, ok)

    async def fail(self, key: str, content: str | None = None) -> None:
        """See ``CallJournal.fail``."""
        self._set(key, "failed", content, False)

    def _set(self, key: str, status: CallStatus, content: str | None, ok: bool | None) -> None:
        earlier = self.records.get(key) or CallRecord(key, "started", created=time.time())
        self.records[key] = replace(
            earlier, status=status, content=content, ok=ok, updated=time.time()
        )


def _claimable(record: CallRecord, request: str | None, stale_before: float) -> bool:
    """Whether a call may take over ``record``: it asks the same (or one of them does not
    say), and the record's call failed, or started and was not heard of since."""
    if request is not None and record.request not in (None, request):
        return False
    return record.status == "failed" or (
        record.status == "started" and record.updated < stale_before
    )


_TABLE = "skilldesk_calls"
_COLUMNS = "key, status, content, ok, request, created, updated"
# Take over a call that failed, or was cut off (started, not heard of since a time), that
# asked the same: in one statement, so one claimant wins.
_CLAIM = (
    f"UPDATE {_TABLE} SET status = 'started', content = NULL, ok = NULL, thread_id = {{m}},"
    " run_id = {m}, created = {m}, updated = {m} WHERE key = {m}"
    " AND (status = 'failed' OR (status = 'started' AND updated < {m}))"
    " AND (request IS NULL OR request = {m} OR CAST({m} AS TEXT) IS NULL)"
)
_TOUCH = f"UPDATE {_TABLE} SET updated = {{m}} WHERE key = {{m}} AND status = 'started'"
_CREATE = (
    f"CREATE TABLE IF NOT EXISTS {_TABLE} (key TEXT PRIMARY KEY, status TEXT NOT NULL,"
    " content TEXT, ok {ok}, thread_id TEXT, run_id TEXT, tool TEXT NOT NULL,"
    " created {time} NOT NULL, updated {time} NOT NULL, request TEXT)"
)
_INSERT = (
    f"INSERT INTO {_TABLE} (key, status, thread_id, run_id, tool, request, created, updated)"
    " VALUES ({marks})"
)


class SqliteCallJournal:
    """The journal in the SQLite checkpoint file, on the checkpointer's own thread."""

    def __init__(self, saver: ThreadedSqliteSaver) -> None:
        self.saver = saver
        self._ready = False

    async def begin(
        self,
        key: str,
        *,
        thread_id: str | None,
        run_id: str | None,
        tool: str,
        request: str | None = None,
        stale_before: float = 0.0,
    ) -> CallRecord | None:
        """See ``CallJournal.begin``."""
        return await self.saver.run(
            self._begin, key, thread_id, run_id, tool, request, stale_before
        )

    async def get(self, key: str) -> CallRecord | None:
        """See ``CallJournal.get``."""
        return await self.saver.run(self._get, key)

    async def touch(self, key: str) -> None:
        """See ``CallJournal.touch``."""
        await self.saver.run(self._touch, key)

    async def finish(self, key: str, content: str, ok: bool) -> None:
        """See ``CallJournal.finish``."""
        await self.saver.run(self._set, key, "done", content, int(ok))

    async def fail(self, key: str, content: str | None = None) -> None:
        """See ``CallJournal.fail``."""
        await self.saver.run(self._set, key, "failed", content, 0)

    def _setup(self) -> None:
        if not self._ready:
            conn = self.saver.conn
            conn.execute(_CREATE.format(ok="INTEGER", time="REAL"))
            columns = {row[1] for row in conn.execute(f"PRAGMA table_info({_TABLE})")}
            if "request" not in columns:  # a journal from before requests were kept
                conn.execute(f"ALTER TABLE {_TABLE} ADD COLUMN request TEXT")
            self._ready = True

    def _begin(
        self,
        key: str,
        thread_id: str | None,
        run_id: str | None,
        tool: str,
        request: str | None,
        stale_before: float,
    ) -> CallRecord | None:
        self._setup()
        conn = self.saver.conn
        now = time.time()
        with conn:  # one transaction, committed before the handler runs
            made = conn.execute(
                _INSERT.format(marks="?, 'started', ?, ?, ?, ?, ?, ?").replace(
                    "INSERT", "INSERT OR IGNORE", 1
                ),
                (key, thread_id, run_id, tool, request, now, now),
            )
            if made.rowcount:
                return None
            claimed = conn.execute(
                _CLAIM.format(m="?"),
                (thread_id, run_id, now, now, key, stale_before, request, request),
            )
            if claimed.rowcount:
                return None
            row = conn.execute(f"SELECT {_COLUMNS} FROM {_TABLE} WHERE key = ?", (key,)).fetchone()
        return None if row is None else _record(row)

    def _touch(self, key: str) -> None:
        self._setup()
        with self.saver.conn as conn:
            conn.execute(_TOUCH.format(m="?"), (time.time(), key))

    def _get(self, key: str) -> CallRecord | None:
        self._setup()
        row = self.saver.conn.execute(
            f"SELECT {_COLUMNS} FROM {_TABLE} WHERE key = ?", (key,)
        ).fetchone()
        return None if row is None else _record(row)

    def _set(self, key: str, status: str, content: str | None, ok: int | None) -> None:
        self._setup()
        with self.saver.conn as conn:
            conn.execute(
                f"UPDATE {_TABLE} SET status = ?, content = ?, ok = ?, updated = ? WHERE key = ?",
                (status, content, ok, time.time(), key),
            )


class PostgresCallJournal:
    """The journal in the PostgreSQL checkpoint database (shared by every process)."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self._ready = False
        self._setting_up = asyncio.Lock()

    async def begin(
        self,
        key: str,
        *,
        thread_id: str | None,
        run_id: str | None,
        tool: str,
        request: str | None = None,
        stale_before: float = 0.0,
    ) -> CallRecord | None:
        """See ``CallJournal.begin``."""
        await self._setup()
        now = time.time()
        async with self.pool.connection() as conn:
            inserted = await conn.execute(
                _INSERT.format(marks="%s, 'started', %s, %s, %s, %s, %s, %s")
                + " ON CONFLICT (key) DO NOTHING",
                (key, thread_id, run_id, tool, request, now, now),
            )
            if inserted.rowcount:
                return None
            claimed = await conn.execute(
                _CLAIM.format(m="%s"),
                (thread_id, run_id, now, now, key, stale_before, request, request),
            )
            if claimed.rowcount:
                return None
        return await self.get(key)

    async def touch(self, key: str) -> None:
        """See ``CallJournal.touch``."""
        await self._setup()
        async with self.pool.connection() as conn:
            await conn.execute(_TOUCH.format(m="%s"), (time.time(), key))

    async def get(self, key: str) -> CallRecord | None:
        """See ``CallJournal.get``."""
        await self._setup()
        async with self.pool.connection() as conn:
            cursor = await conn.execute(f"SELECT {_COLUMNS} FROM {_TABLE} WHERE key = %s", (key,))
            row = await cursor.fetchone()
        return None if row is None else _record(tuple(row.values()))

    async def finish(self, key: str, content: str, ok: bool) -> None:
        """See ``CallJournal.finish``."""
        await self._set(key, "done", content, ok)

    async def fail(self, key: str, content: str | None = None) -> None:
        """See ``CallJournal.fail``."""
        await self._set(key, "failed", content, False)

    async def _set(self, key: str, status: str, content: str | None, ok: bool | None) -> None:
        await self._setup()
        async with self.pool.connection() as conn:
            await conn.execute(
                f"UPDATE {_TABLE} SET status = %s, content = %s, ok = %s, updated = %s"
                " WHERE key = %s",
                (status, content, ok, time.time(), key),
            )

    async def _setup(self) -> None:
        if self._ready:
            return
        async with self._setting_up:  # the first calls at once: one set-up, not a race
            if not self._ready:
                await self._create()

    async def _create(self) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(_CREATE.format(ok="BOOLEAN", time="DOUBLE PRECISION"))
            cursor = await conn.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()"
                " AND table_name = %s AND column_name = 'request'",
                (_TABLE,),
            )
            if await cursor.fetchone() is None:  # a journal from before requests were kept
                await conn.execute(f"ALTER TABLE {_TABLE} ADD COLUMN IF NOT EXISTS request TEXT")
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
    key, status, content, ok, request, created, updated = row
    ok = None if ok is None else bool(ok)
    return CallRecord(key, status, content, ok, request, created, updated)
