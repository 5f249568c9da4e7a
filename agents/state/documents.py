"""Small JSON documents beside the checkpoints (workflow run records, approvals): one table,
kept in the checkpoint database (the SQLite file, or PostgreSQL), found by kind, id and the
few fields a listing filters on."""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any, Protocol

import structlog
from langgraph.checkpoint.base import BaseCheckpointSaver

from agents.state.schema_lock import schema_lock
from agents.state.sqlite_saver import ThreadedSqliteSaver
from agents.text import json_bytes

log = structlog.get_logger(__name__)

_TABLE = "skilldesk_documents"
_SQLITE_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {_TABLE} (kind TEXT NOT NULL, id TEXT NOT NULL, "
    "owner TEXT, status TEXT, updated REAL NOT NULL, body TEXT NOT NULL, PRIMARY KEY (kind, id))"
)
_POSTGRES_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {_TABLE} (kind TEXT NOT NULL, id TEXT NOT NULL, "
    "owner TEXT, status TEXT, updated DOUBLE PRECISION NOT NULL, body TEXT NOT NULL, "
    "PRIMARY KEY (kind, id))"
)
# Index name -> columns. A user's threads (a listing by kind and owner, newest first) and
# documents by status (runs waiting for an approval, counted and listed) without a scan.
_INDEXES = {
    f"{_TABLE}_owner": "(kind, owner, updated)",
    f"{_TABLE}_status": "(kind, status, updated)",
}
# Ids found by their start in byte order (``find(id_prefix=...)``), whatever the collation
# (PostgreSQL's; SQLite compares bytes anyway, through the primary key).
_POSTGRES_INDEXES = {**_INDEXES, f"{_TABLE}_id_c": '(kind, id COLLATE "C")'}


class Documents(Protocol):
    """Where documents are kept."""

    async def put(self, kind: str, doc_id: str, body: dict[str, Any], **index: Any) -> None:
        """Write a document (``index``: its ``owner`` and ``status``, for listings, and its
        ``updated`` time, now by default)."""
        ...

    async def get(self, kind: str, doc_id: str) -> dict[str, Any] | None:
        """One document, or None."""
        ...

    async def merge(self, kind: str, doc_id: str, changes: dict[str, Any]) -> dict[str, Any] | None:
        """Write ``changes`` over a document's fields, its index (``owner``, ``status``,
        ``updated``) taken from the result; the document as written, or None (nothing
        written) when there is none."""
        ...

    async def find(
        self,
        kind: str,
        *,
        owner: str | None = None,
        status: str | None = None,
        limit: int | None = 100,
        before: float | None = None,
        id_prefix: str | None = None,
    ) -> list[dict[str, Any]]:
        """Documents of ``kind``, newest first, filtered by owner and status; ``before``: only
        those updated before that time (the next page of a listing); ``limit`` None: every
        one (for a set the service bounds itself, such as the runs under way); ``id_prefix``: only
        those whose id starts with it (ASCII letters and digits, else ValueError; read
        through an index)."""
        ...

    async def find_page(
        self,
        kind: str,
        *,
        owner: str | None = None,
        status: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
        """A page of documents of ``kind``, newest first (then by id), after the cursor
        ``after``, each with its own cursor (where a page after it starts); and whether
        more follow. Pages neither skip nor repeat documents updated at the same time.
        ValueError for a malformed cursor."""
        ...

    async def count(self, kind: str, *, status: str | None = None) -> int:
        """How many documents of ``kind`` there are (with ``status``)."""
        ...

    async def delete(self, kind: str, doc_id: str) -> bool:
        """Remove a document; whether there was one."""
        ...


class MemoryDocuments:
    """Documents in memory (tests, a graph without a store)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], tuple[str | None, str | None, float, str]] = {}

    async def put(self, kind: str, doc_id: str, body: dict[str, Any], **index: Any) -> None:
        """See ``Documents.put``."""
        row = (
            index.get("owner"),
            index.get("status"),
            index.get("updated") or time.time(),
            json.dumps(body),
        )
        self.rows[(kind, doc_id)] = row

    async def get(self, kind: str, doc_id: str) -> dict[str, Any] | None:
        """See ``Documents.get``."""
        row = self.rows.get((kind, doc_id))
        return None if row is None else dict(json.loads(row[3]))

    async def merge(self, kind: str, doc_id: str, changes: dict[str, Any]) -> dict[str, Any] | None:
        """See ``Documents.merge``."""
        return await _merged(self, kind, doc_id, changes)

    async def find(
        self,
        kind: str,
        *,
        owner: str | None = None,
        status: str | None = None,
        limit: int | None = 100,
        before: float | None = None,
        id_prefix: str | None = None,
    ) -> list[dict[str, Any]]:
        """See ``Documents.find``."""
        rows = [
            row
            for (k, doc_id), row in self.rows.items()
            if k == kind
            and owner in (None, row[0])
            and status in (None, row[1])
            and (before is None or row[2] < before)
            and (id_prefix is None or doc_id.startswith(_prefix_range(id_prefix)[0]))
        ]
        rows.sort(key=lambda row: -row[2])
        return [json.loads(row[3]) for row in rows[:limit]]

    async def find_page(
        self,
        kind: str,
        *,
        owner: str | None = None,
        status: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
        """See ``Documents.find_page``."""
        _check_limit(limit)
        start = _position(after)
        rows = sorted(
            (
                (row[2], doc_id, row[3])
                for (k, doc_id), row in self.rows.items()
                if k == kind
                and owner in (None, row[0])
                and status in (None, row[1])
                and (start is None or (row[2], doc_id) < start)
            ),
            reverse=True,
        )
        return _paged(rows[: limit + 1], limit)

    async def count(self, kind: str, *, status: str | None = None) -> int:
        """See ``Documents.count``."""
        return sum(1 for (k, _), row in self.rows.items() if k == kind and status in (None, row[1]))

    async def delete(self, kind: str, doc_id: str) -> bool:
        """See ``Documents.delete``."""
        return self.rows.pop((kind, doc_id), None) is not None


class SqliteDocuments:
    """Documents in the SQLite checkpoint file, through its saver (``ThreadedSqliteSaver.run``)."""

    def __init__(self, saver: ThreadedSqliteSaver) -> None:
        self.saver = saver
        self._ready = False

    async def put(self, kind: str, doc_id: str, body: dict[str, Any], **index: Any) -> None:
        """See ``Documents.put``."""
        row = (
            kind,
            doc_id,
            index.get("owner"),
            index.get("status"),
            index.get("updated") or time.time(),
            _dump(body),
        )
        await self.saver.run(self._write, row)

    async def get(self, kind: str, doc_id: str) -> dict[str, Any] | None:
        """See ``Documents.get``."""
        rows = await self.saver.run(
            self._read, f"SELECT body FROM {_TABLE} WHERE kind = ? AND id = ?", (kind, doc_id)
        )
        return json.loads(rows[0][0]) if rows else None

    async def merge(self, kind: str, doc_id: str, changes: dict[str, Any]) -> dict[str, Any] | None:
        """See ``Documents.merge``: the read and the write in one trip to the saver's thread."""
        return await self.saver.run(self._merge, kind, doc_id, changes)

    async def find(
        self,
        kind: str,
        *,
        owner: str | None = None,
        status: str | None = None,
        limit: int | None = 100,
        before: float | None = None,
        id_prefix: str | None = None,
    ) -> list[dict[str, Any]]:
        """See ``Documents.find``."""
        where, args = _where(kind, owner, status, before, id_prefix, "?")
        sql = f"SELECT body FROM {_TABLE} WHERE {where} ORDER BY updated DESC LIMIT ?"
        rows = await self.saver.run(self._read, sql, (*args, -1 if limit is None else limit))
        return [json.loads(row[0]) for row in rows]

    async def find_page(
        self,
        kind: str,
        *,
        owner: str | None = None,
        status: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
        """See ``Documents.find_page``."""
        sql, args = _page_query(kind, owner, status, limit, after, "?")
        rows = await self.saver.run(self._read, sql, args)
        return _paged([(row[0], row[1], row[2]) for row in rows], limit)

    async def count(self, kind: str, *, status: str | None = None) -> int:
        """See ``Documents.count``."""
        where, args = _where(kind, None, status, None, None, "?")
        rows = await self.saver.run(
            self._read, f"SELECT COUNT(*) FROM {_TABLE} WHERE {where}", args
        )
        return int(rows[0][0])

    async def delete(self, kind: str, doc_id: str) -> bool:
        """See ``Documents.delete``."""
        return await self.saver.run(self._delete, kind, doc_id)

    def _delete(self, kind: str, doc_id: str) -> bool:
        self._setup()
        with self.saver.conn as conn:
            cursor = conn.execute(f"DELETE FROM {_TABLE} WHERE kind = ? AND id = ?", (kind, doc_id))
            return cursor.rowcount > 0

    def _setup(self) -> None:
        if not self._ready:
            self.saver.conn.execute(_SQLITE_TABLE)
            for name, columns in _INDEXES.items():
                self.saver.conn.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {_TABLE} {columns}")
            self._ready = True

    def _write(self, row: tuple[Any, ...]) -> None:
        self._setup()
        with self.saver.conn as conn:
            conn.execute(f"INSERT OR REPLACE INTO {_TABLE} VALUES (?, ?, ?, ?, ?, ?)", row)

    def _read(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        self._setup()
        return list(self.saver.conn.execute(sql, args).fetchall())

    def _merge(self, kind: str, doc_id: str, changes: dict[str, Any]) -> dict[str, Any] | None:
        self._setup()
        with self.saver.conn as conn:
            row = conn.execute(
                f"SELECT body FROM {_TABLE} WHERE kind = ? AND id = ?", (kind, doc_id)
            ).fetchone()
            if row is None:
                return None
            body = {**json.loads(row[0]), **changes}
            index = _index(body)
            conn.execute(
                f"INSERT OR REPLACE INTO {_TABLE} VALUES (?, ?, ?, ?, ?, ?)",
                (kind, doc_id, index["owner"], index["status"], index["updated"], _dump(body)),
            )
            return body


class PostgresDocuments:
    """Documents in the PostgreSQL checkpoint database (shared by every process)."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self._ready = False
        self._setting_up = asyncio.Lock()  # the first requests wait for one set-up, not each

    async def put(self, kind: str, doc_id: str, body: dict[str, Any], **index: Any) -> None:
        """See ``Documents.put``."""
        await self._setup()
        async with self.pool.connection() as conn:
            await conn.execute(
                f"INSERT INTO {_TABLE} VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (kind, id) "
                "DO UPDATE SET owner = EXCLUDED.owner, status = EXCLUDED.status, "
                "updated = EXCLUDED.updated, body = EXCLUDED.body",
                (
                    kind,
                    doc_id,
                    index.get("owner"),
                    index.get("status"),
                    index.get("updated") or time.time(),
                    _dump(body),
                ),
            )

    async def get(self, kind: str, doc_id: str) -> dict[str, Any] | None:
        """See ``Documents.get``."""
        rows = await self._read(
            f"SELECT body FROM {_TABLE} WHERE kind = %s AND id = %s", (kind, doc_id)
        )
        return json.loads(rows[0]["body"]) if rows else None

    async def merge(self, kind: str, doc_id: str, changes: dict[str, Any]) -> dict[str, Any] | None:
        """See ``Documents.merge``."""
        return await _merged(self, kind, doc_id, changes)

    async def find(
        self,
        kind: str,
        *,
        owner: str | None = None,
        status: str | None = None,
        limit: int | None = 100,
        before: float | None = None,
        id_prefix: str | None = None,
    ) -> list[dict[str, Any]]:
        """See ``Documents.find``."""
        where, args = _where(kind, owner, status, before, id_prefix, "%s")
        sql = f"SELECT body FROM {_TABLE} WHERE {where} ORDER BY updated DESC LIMIT %s"  # NULL: all
        return [json.loads(row["body"]) for row in await self._read(sql, (*args, limit))]

    async def find_page(
        self,
        kind: str,
        *,
        owner: str | None = None,
        status: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
        """See ``Documents.find_page``."""
        sql, args = _page_query(kind, owner, status, limit, after, "%s")
        rows = await self._read(sql, args)
        return _paged([(row["updated"], row["id"], row["body"]) for row in rows], limit)

    async def count(self, kind: str, *, status: str | None = None) -> int:
        """See ``Documents.count``."""
        where, args = _where(kind, None, status, None, None, "%s")
        rows = await self._read(f"SELECT COUNT(*) AS n FROM {_TABLE} WHERE {where}", args)
        return int(rows[0]["n"])

    async def delete(self, kind: str, doc_id: str) -> bool:
        """See ``Documents.delete``."""
        await self._setup()
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                f"DELETE FROM {_TABLE} WHERE kind = %s AND id = %s", (kind, doc_id)
            )
            return bool(cursor.rowcount)

    async def _setup(self) -> None:
        if self._ready:
            return
        async with self._setting_up:
            if self._ready:
                return
            async with schema_lock(self.pool), self.pool.connection() as conn:
                await conn.execute(_POSTGRES_TABLE)
                for name, columns in _POSTGRES_INDEXES.items():
                    await _build_index(conn, name, columns)
            self._ready = True

    async def _read(self, sql: str, args: tuple[Any, ...]) -> list[Any]:
        await self._setup()
        async with self.pool.connection() as conn:
            cursor = await conn.execute(sql, args)
            return list(await cursor.fetchall())


async def _build_index(conn: Any, name: str, columns: str) -> None:
    """Build an index the table lacks without holding up writes: CONCURRENTLY, so the other
    processes keep writing while this one (a new version, say) builds it on a large table. A
    build that was cut off leaves an invalid index, which is dropped and built again; another
    process building the same index at the same time is left to it.
    """
    import psycopg

    cursor = await conn.execute(
        "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", (name,)
    )
    found = await cursor.fetchone()
    if found is not None and found["indisvalid"]:
        return
    if found is not None:  # being built by another process, or a build that was cut off
        cursor = await conn.execute(
            "SELECT 1 FROM pg_stat_progress_create_index WHERE index_relid = to_regclass(%s)",
            (name,),
        )
        if await cursor.fetchone() is not None:
            return
    try:
        if found is not None:
            await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        await conn.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {_TABLE} {columns}")
    except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
        return  # another process made it meanwhile
    log.info("documents.index_built", index=name)


def documents_for(saver: BaseCheckpointSaver[Any] | None) -> Documents:
    """The documents store beside ``saver``'s checkpoints (in memory for other savers)."""
    if isinstance(saver, ThreadedSqliteSaver):
        return SqliteDocuments(saver)
    pool = getattr(saver, "conn", None)
    if type(saver).__name__.startswith("AsyncPostgres") and hasattr(pool, "connection"):
        return PostgresDocuments(pool)
    return MemoryDocuments()


def _where(
    kind: str,
    owner: str | None,
    status: str | None,
    before: float | None,
    id_prefix: str | None,
    mark: str,
) -> tuple[str, tuple[Any, ...]]:
    clauses, args = [f"kind = {mark}"], [kind]  # type: list[str], list[Any]
    if owner is not None:
        clauses.append(f"owner = {mark}")
        args.append(owner)
    if status is not None:
        clauses.append(f"status = {mark}")
        args.append(status)
    if before is not None:
        clauses.append(f"updated < {mark}")
        args.append(before)
    if id_prefix is not None:
        # In byte order whatever the database's collation (under en_US, "ab9f" < "ab:" is
        # false): SQLite compares text bytewise; PostgreSQL is told to, with an index of its
        # own (_PREFIX_INDEX).
        key = "id" if mark == "?" else 'id COLLATE "C"'
        clauses.append(f"{key} >= {mark} AND {key} < {mark}")
        args += _prefix_range(id_prefix)
    return " AND ".join(clauses), tuple(args)


async def _merged(
    documents: Documents, kind: str, doc_id: str, changes: dict[str, Any]
) -> dict[str, Any] | None:
    """``Documents.merge`` as a read, then a write."""
    found = await documents.get(kind, doc_id)
    if found is None:
        return None
    body = {**found, **changes}
    await documents.put(kind, doc_id, body, **_index(body))
    return body


def _index(body: dict[str, Any]) -> dict[str, Any]:
    """The index fields of a document that holds them (a thread's record)."""
    return {
        "owner": body.get("owner"),
        "status": body.get("status"),
        "updated": body.get("updated") or time.time(),
    }


def _dump(body: dict[str, Any]) -> str:
    return json_bytes(body).decode()


def _prefix_range(id_prefix: str) -> tuple[str, str]:
    """The ids that start with ``id_prefix``, as [low, high) in byte order (no LIKE, so no
    escaping): the prefix, and the prefix with its last character the next one."""
    if not (id_prefix.isascii() and id_prefix.isalnum()):
        raise ValueError(f"id_prefix must be ASCII letters and digits, not {id_prefix!r}")
    return id_prefix, id_prefix[:-1] + chr(ord(id_prefix[-1]) + 1)


def _position(after: str | None) -> tuple[float, str] | None:
    """A page cursor's ``(updated, id)``: the last document of the page before."""
    if after is None:
        return None
    updated, _, doc_id = after.partition(" ")
    try:
        position = float(updated)
    except ValueError:
        position = math.nan
    if math.isnan(position) or not doc_id:  # a huge exponent is inf: before every time
        raise ValueError(f"not a page cursor: {after!r}; pass a next page's cursor")
    return position, doc_id


def _check_limit(limit: int) -> None:
    if limit < 1:
        raise ValueError(f"a page holds at least one document, not {limit}")


def _page_query(
    kind: str,
    owner: str | None,
    status: str | None,
    limit: int,
    after: str | None,
    mark: str,
) -> tuple[str, tuple[Any, ...]]:
    """``find_page``'s query: one row more than the page, to know whether another follows."""
    _check_limit(limit)
    where, args = _where(kind, owner, status, None, None, mark)
    start = _position(after)
    if start is not None:
        where += f" AND (updated < {mark} OR (updated = {mark} AND id < {mark}))"
        args += (start[0], start[0], start[1])
    sql = (
        f"SELECT updated, id, body FROM {_TABLE} WHERE {where} "
        f"ORDER BY updated DESC, id DESC LIMIT {mark}"
    )
    return sql, (*args, limit + 1)


def _paged(
    rows: list[tuple[float, str, str]], limit: int
) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
    """The page's documents, each with its cursor, and whether more follow."""
    page = [(f"{updated!r} {doc_id}", json.loads(body)) for updated, doc_id, body in rows[:limit]]
    return page, len(rows) > limit
