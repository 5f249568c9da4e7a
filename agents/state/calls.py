"""The call journal: side-effecting calls recorded before they run, beside the checkpoints.

A side effect must happen once, crash or not. Before a side-effecting tool (or, next, a
workflow node) runs, its idempotency key is recorded durably; a resumed or retried run that
makes the same call finds the record: a finished call's result is reused without running the
handler again, and a call that failed or was cut off (the process died mid-call) runs again
with the same key, so the handler can tell the repeat and refuse it. A record names what was
asked (``request``: the tool and its arguments' hash), so a key sent again with another
request is told apart from a retry.

Each claim has an owner token, and a call's beats and end are written only under the claim
that stands: a caller whose call was taken over (it went silent, its beats lost) writes
nothing over the claim that took it. Times are the journal's own clock (the database's), so
hosts whose clocks disagree agree on which call is silent.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from langgraph.checkpoint.base import BaseCheckpointSaver

from agents.state.schema_lock import schema_lock
from agents.state.sqlite_saver import ThreadedSqliteSaver

CallStatus = Literal["started", "done", "failed"]


@dataclass(frozen=True)
class CallRecord:
    """A recorded call: ``content`` and ``ok`` once it finished; what it asked (``request``,
    None in a record from before requests were kept), when it started and when it was last
    heard of (Unix times, by the journal's clock), and the claim that makes or made it
    (``owner``, None in a record from before claims had owners)."""

    key: str
    status: CallStatus
    content: str | None = None
    ok: bool | None = None
    request: str | None = None
    created: float = 0.0
    updated: float = 0.0  # its last sign of life: a call under way beats every few seconds
    owner: str | None = None


@dataclass(frozen=True)
class Claim:
    """A caller's claim on a call: it makes the call, and writes its beats and its end with
    ``owner``; once another caller has taken the call over, those write nothing."""

    key: str
    owner: str


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
        silent_s: float | None = None,
    ) -> Claim | CallRecord:
        """Claim the call: a ``Claim`` when the caller is to make it (the key is new, or its
        call failed, or was cut off: started and not heard of for ``silent_s`` seconds by
        the journal's clock; None: never), recorded as started under a new owner; else the
        record that stands (a call done, or one under way elsewhere, or one that asked
        another ``request``; None: any). One claimant wins, whatever the processes."""
        ...

    async def get(self, key: str) -> CallRecord | None:
        """The key's record, if it has one."""
        ...

    async def touch(self, claim: Claim) -> bool:
        """A call under way is alive (its record's ``updated`` is now). False when the
        claim no longer stands (the call was taken over, or ended): nothing is written."""
        ...

    async def finish(self, claim: Claim, content: str, ok: bool) -> bool:
        """Record the call's result. False when the claim no longer stands (another caller
        took the call over): its record is left as that one wrote it."""
        ...

    async def fail(self, claim: Claim, content: str | None = None) -> bool:
        """Record that the call failed, and what it answered (the calls that waited for it
        get that answer; a later retry runs it again, at once). False, writing nothing,
        when the claim no longer stands."""
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
        silent_s: float | None = None,
    ) -> Claim | CallRecord:
        """See ``CallJournal.begin``."""
        earlier = self.records.get(key)
        now = time.time()
        if earlier is not None and not _claimable(earlier, request, silent_s, now):
            return earlier
        claim = Claim(key, uuid.uuid4().hex)
        asked = request if earlier is None else earlier.request
        self.records[key] = CallRecord(key, "started", None, None, asked, now, now, claim.owner)
        return claim

    async def get(self, key: str) -> CallRecord | None:
        """See ``CallJournal.get``."""
        return self.records.get(key)

    async def touch(self, claim: Claim) -> bool:
        """See ``CallJournal.touch``."""
        earlier = self._held(claim)
        if earlier is None or earlier.status != "started":
            return False
        self.records[claim.key] = replace(earlier, updated=time.time())
        return True

    async def finish(self, claim: Claim, content: str, ok: bool) -> bool:
        """See ``CallJournal.finish``."""
        return self._end(claim, "done", content, ok)

    async def fail(self, claim: Claim, content: str | None = None) -> bool:
        """See ``CallJournal.fail``."""
        return self._end(claim, "failed", content, False)

    def _held(self, claim: Claim) -> CallRecord | None:
        """The claim's record, while the claim stands."""
        record = self.records.get(claim.key)
        return record if record is not None and record.owner == claim.owner else None

    def _end(self, claim: Claim, status: CallStatus, content: str | None, ok: bool) -> bool:
        earlier = self._held(claim)
        if earlier is None:
            return False
        self.records[claim.key] = replace(
            earlier, status=status, content=content, ok=ok, updated=time.time()
        )
        return True


def _claimable(record: CallRecord, request: str | None, silent_s: float | None, now: float) -> bool:
    """Whether a call may take over ``record``: it asks the same (or one of them does not
    say), and the record's call failed, or started and was not heard of for ``silent_s``."""
    if request is not None and record.request not in (None, request):
        return False
    if record.status == "failed":
        return True
    return record.status == "started" and silent_s is not None and record.updated < now - silent_s


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


@dataclass(frozen=True)
class _Statements:
    """The journal's statements in one database's dialect."""

    insert: str
    claim: str
    touch: str
    end: str
    select: str

    @classmethod
    def of(cls, mark: str, now: str) -> _Statements:
        made = (s.format(m=mark, now=now) for s in (_INSERT, _CLAIM, _TOUCH, _END, _SELECT))
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
