"""The call journal in the checkpoint database: one table, the same statements on SQLite (the
service's file, on the saver's connection) and PostgreSQL (shared by every process, on its
clock); ``call_journal`` picks the one beside a checkpointer (``agents/state/calls.py`` has
the journal's contract and records)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from agents.state.calls import CallJournal, CallRecord, Claim, MemoryCallJournal
from agents.state.schema_lock import schema_lock
from agents.state.sqlite_saver import ThreadedSqliteSaver

_TABLE = "skilldesk_calls"
_COLUMNS = "key, status, content, ok, request, created, updated, owner"
_CREATE = (
    f"CREATE TABLE IF NOT EXISTS {_TABLE} (key TEXT PRIMARY KEY, status TEXT NOT NULL,"
    " content TEXT, ok {ok}, thread_id TEXT, run_id TEXT, tool TEXT NOT NULL,"
    " created {time} NOT NULL, updated {time} NOT NULL, request TEXT, owner TEXT)"
)
# Columns added since the first journals: an older table gets them when it is opened.
_ADDED = ("request", "owner")
# The statements of both databases: ``{m}`` a parameter, ``{now}`` the database's clock.
_INSERT = (
    f"INSERT INTO {_TABLE} (key, status, owner, thread_id, run_id, tool, request, created,"
    " updated) VALUES ({m}, 'started', {m}, {m}, {m}, {m}, {m}, {now}, {now})"
    " ON CONFLICT (key) DO NOTHING"
)
# Take over a call that failed, or was cut off (started, not heard of for a while), that
# asked the same: in one statement, so one claimant wins.
_CLAIM = (
    f"UPDATE {_TABLE} SET status = 'started', content = NULL, ok = NULL, owner = {{m}},"
    " thread_id = {m}, run_id = {m}, created = {now}, updated = {now} WHERE key = {m}"
    " AND (status = 'failed'"
    " OR (status = 'started' AND updated < {now} - CAST({m} AS DOUBLE PRECISION)))"
    " AND (request IS NULL OR request = {m} OR CAST({m} AS TEXT) IS NULL)"
)
# A claim's beat and end: written only while the claim stands (fenced by its owner).
_TOUCH = (
    f"UPDATE {_TABLE} SET updated = {{now}}"
    " WHERE key = {m} AND owner = {m} AND status = 'started'"
)
_END = (
    f"UPDATE {_TABLE} SET status = {{m}}, content = {{m}}, ok = {{m}}, updated = {{now}}"
    " WHERE key = {m} AND owner = {m}"
)
_SELECT = f"SELECT {_COLUMNS} FROM {_TABLE} WHERE key = {{m}}"
_DELETE = f"DELETE FROM {_TABLE} WHERE key = {{m}}"


@dataclass(frozen=True)
class _Statements:
    """The journal's statements in one database's dialect."""

    insert: str
    claim: str
    touch: str
    end: str
    select: str
    delete: str

    @classmethod
    def of(cls, mark: str, now: str) -> _Statements:
        made = (
            s.format(m=mark, now=now) for s in (_INSERT, _CLAIM, _TOUCH, _END, _SELECT, _DELETE)
        )
        return cls(*made)


# SQLite serves one host: its clock is this host's (to the millisecond), in the same SQL.
_SQLITE = _Statements.of("?", "((julianday('now') - 2440587.5) * 86400.0)")
# PostgreSQL serves every process: its own clock, not theirs (now(): one time a statement).
_POSTGRES = _Statements.of("%s", "CAST(extract(epoch FROM now()) AS DOUBLE PRECISION)")


def _claim_parameters(
    claim: Claim,
    thread_id: str | None,
    run_id: str | None,
    request: str | None,
    silent_s: float | None,
) -> tuple[Any, ...]:
    return (claim.owner, thread_id, run_id, claim.key, silent_s, request, request)


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
        silent_s: float | None = None,
    ) -> Claim | CallRecord:
        """See ``CallJournal.begin``."""
        claim = Claim(key, uuid.uuid4().hex)
        found = await self.saver.run(self._begin, claim, thread_id, run_id, tool, request, silent_s)
        return claim if found is None else found

    async def get(self, key: str) -> CallRecord | None:
        """See ``CallJournal.get``."""
        return await self.saver.run(self._get, key)

    async def touch(self, claim: Claim) -> bool:
        """See ``CallJournal.touch``."""
        return await self.saver.run(self._write, _SQLITE.touch, (claim.key, claim.owner))

    async def finish(self, claim: Claim, content: str, ok: bool) -> bool:
        """See ``CallJournal.finish``."""
        ended = ("done", content, int(ok), claim.key, claim.owner)
        return await self.saver.run(self._write, _SQLITE.end, ended)

    async def fail(self, claim: Claim, content: str | None = None) -> bool:
        """See ``CallJournal.fail``."""
        ended = ("failed", content, 0, claim.key, claim.owner)
        return await self.saver.run(self._write, _SQLITE.end, ended)

    async def forget(self, keys: Sequence[str]) -> None:
        """See ``CallJournal.forget``."""
        if keys:
            await self.saver.run(self._delete, keys)

    def _delete(self, keys: Sequence[str]) -> None:
        self._setup()
        with self.saver.conn as conn:
            conn.executemany(_SQLITE.delete, [(key,) for key in keys])

    def _setup(self) -> None:
        if not self._ready:
            conn = self.saver.conn
            conn.execute(_CREATE.format(ok="INTEGER", time="REAL"))
            columns = {row[1] for row in conn.execute(f"PRAGMA table_info({_TABLE})")}
            for column in _ADDED:  # a journal from before the column was kept
                if column not in columns:
                    conn.execute(f"ALTER TABLE {_TABLE} ADD COLUMN {column} TEXT")
            self._ready = True

    def _begin(
        self,
        claim: Claim,
        thread_id: str | None,
        run_id: str | None,
        tool: str,
        request: str | None,
        silent_s: float | None,
    ) -> CallRecord | None:
        """None when ``claim`` won the call, else the record that stands."""
        self._setup()
        conn = self.saver.conn
        with conn:  # one transaction, committed before the handler runs
            made = conn.execute(
                _SQLITE.insert, (claim.key, claim.owner, thread_id, run_id, tool, request)
            )
            if made.rowcount:
                return None
            asked = _claim_parameters(claim, thread_id, run_id, request, silent_s)
            if conn.execute(_SQLITE.claim, asked).rowcount:
                return None
            row = conn.execute(_SQLITE.select, (claim.key,)).fetchone()
        return None if row is None else _record(row)

    def _get(self, key: str) -> CallRecord | None:
        self._setup()
        row = self.saver.conn.execute(_SQLITE.select, (key,)).fetchone()
        return None if row is None else _record(row)

    def _write(self, statement: str, parameters: tuple[Any, ...]) -> bool:
        self._setup()
        with self.saver.conn as conn:
            return bool(conn.execute(statement, parameters).rowcount)


class PostgresCallJournal:
    """The journal in the PostgreSQL checkpoint database (shared by every process, on its
    clock)."""

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
        silent_s: float | None = None,
    ) -> Claim | CallRecord:
        """See ``CallJournal.begin``."""
        await self._setup()
        claim = Claim(key, uuid.uuid4().hex)
        async with self.pool.connection() as conn:
            inserted = await conn.execute(
                _POSTGRES.insert, (key, claim.owner, thread_id, run_id, tool, request)
            )
            if inserted.rowcount:
                return claim
            asked = _claim_parameters(claim, thread_id, run_id, request, silent_s)
            if (await conn.execute(_POSTGRES.claim, asked)).rowcount:
                return claim
        found = await self.get(key)
        if found is None:  # gone between the statements (a journal cleared by hand): again
            return await self.begin(
                key,
                thread_id=thread_id,
                run_id=run_id,
                tool=tool,
                request=request,
                silent_s=silent_s,
            )
        return found

    async def touch(self, claim: Claim) -> bool:
        """See ``CallJournal.touch``."""
        return await self._write(_POSTGRES.touch, (claim.key, claim.owner))

    async def get(self, key: str) -> CallRecord | None:
        """See ``CallJournal.get``."""
        await self._setup()
        async with self.pool.connection() as conn:
            cursor = await conn.execute(_POSTGRES.select, (key,))
            row = await cursor.fetchone()
        return None if row is None else _record(tuple(row.values()))

    async def finish(self, claim: Claim, content: str, ok: bool) -> bool:
        """See ``CallJournal.finish``."""
        return await self._write(_POSTGRES.end, ("done", content, ok, claim.key, claim.owner))

    async def fail(self, claim: Claim, content: str | None = None) -> bool:
        """See ``CallJournal.fail``."""
        return await self._write(_POSTGRES.end, ("failed", content, False, claim.key, claim.owner))

    async def forget(self, keys: Sequence[str]) -> None:
        """See ``CallJournal.forget``."""
        if not keys:
            return
        await self._setup()
        async with self.pool.connection() as conn, conn.cursor() as cursor:
            await cursor.executemany(_POSTGRES.delete, [(key,) for key in keys])

    async def _write(self, statement: str, parameters: tuple[Any, ...]) -> bool:
        await self._setup()
        async with self.pool.connection() as conn:
            return bool((await conn.execute(statement, parameters)).rowcount)

    async def _setup(self) -> None:
        if self._ready:
            return
        async with self._setting_up:  # the first calls at once: one set-up, not a race
            if not self._ready:
                await self._create()

    async def _create(self) -> None:
        async with schema_lock(self.pool), self.pool.connection() as conn:
            await conn.execute(_CREATE.format(ok="BOOLEAN", time="DOUBLE PRECISION"))
            cursor = await conn.execute(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_schema = current_schema() AND table_name = %s",
                (_TABLE,),
            )
            columns = {row["column_name"] for row in await cursor.fetchall()}
            for column in _ADDED:  # a journal from before the column was kept
                if column not in columns:
                    await conn.execute(
                        f"ALTER TABLE {_TABLE} ADD COLUMN IF NOT EXISTS {column} TEXT"
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
    key, status, content, ok, request, created, updated, owner = row
    ok = None if ok is None else bool(ok)
    return CallRecord(key, status, content, ok, request, created, updated, owner)
