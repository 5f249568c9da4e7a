"""Documents in the PostgreSQL checkpoint database, shared by every process: the table set up
once per process under the schema lock, its indexes built without holding up other writers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import structlog

from agents.state.documents.common import Changes, changed, index_of, paged
from agents.state.documents.sql import (
    POSTGRES_INDEXES,
    POSTGRES_TABLE,
    TABLE,
    page_query,
    row_of,
    where,
)
from agents.state.schema_lock import schema_lock

log = structlog.get_logger(__name__)


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
                f"INSERT INTO {TABLE} VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (kind, id) "
                "DO UPDATE SET owner = EXCLUDED.owner, status = EXCLUDED.status, "
                "updated = EXCLUDED.updated, body = EXCLUDED.body",
                row_of(kind, doc_id, body, index),
            )

    async def add(self, kind: str, doc_id: str, body: dict[str, Any], **index: Any) -> bool:
        """See ``Documents.add``."""
        await self._setup()
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                f"INSERT INTO {TABLE} VALUES (%s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (kind, id) DO NOTHING",
                row_of(kind, doc_id, body, index),
            )
            return bool(cursor.rowcount > 0)

    async def get(self, kind: str, doc_id: str) -> dict[str, Any] | None:
        """See ``Documents.get``."""
        rows = await self._read(
            f"SELECT body FROM {TABLE} WHERE kind = %s AND id = %s", (kind, doc_id)
        )
        return json.loads(rows[0]["body"]) if rows else None

    async def merge(
        self, kind: str, doc_id: str, changes: Changes, **index: Any
    ) -> dict[str, Any] | None:
        """See ``Documents.merge``: the row locked from the read to the write, so a change
        or a delete by another process in between is neither written over nor undone."""
        await self._setup()
        async with self.pool.connection() as conn, conn.transaction():
            cursor = await conn.execute(
                f"SELECT body FROM {TABLE} WHERE kind = %s AND id = %s FOR UPDATE", (kind, doc_id)
            )
            row = await cursor.fetchone()
            if row is None:
                return None
            body = changed(json.loads(row["body"]), changes)
            kind, doc_id, *fields = row_of(kind, doc_id, body, index_of(body, index))
            await conn.execute(
                f"UPDATE {TABLE} SET owner = %s, status = %s, updated = %s, body = %s "
                "WHERE kind = %s AND id = %s",
                (*fields, kind, doc_id),
            )
        return body

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
        clause, args = where(kind, owner, status, before, id_prefix, "%s")
        sql = f"SELECT body FROM {TABLE} WHERE {clause} ORDER BY updated DESC LIMIT %s"  # NULL: all
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
        sql, args = page_query(kind, owner, status, limit, after, "%s")
        rows = await self._read(sql, args)
        return paged([(row["updated"], row["id"], row["body"]) for row in rows], limit)

    async def count(self, kind: str, *, status: str | None = None) -> int:
        """See ``Documents.count``."""
        clause, args = where(kind, None, status, None, None, "%s")
        rows = await self._read(f"SELECT COUNT(*) AS n FROM {TABLE} WHERE {clause}", args)
        return int(rows[0]["n"])

    async def delete(self, kind: str, doc_id: str) -> bool:
        """See ``Documents.delete``."""
        await self._setup()
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                f"DELETE FROM {TABLE} WHERE kind = %s AND id = %s", (kind, doc_id)
            )
            return bool(cursor.rowcount)

    async def _setup(self) -> None:
        if self._ready:
            return
        async with self._setting_up:
            if self._ready:
                return
            async with schema_lock(self.pool), self.pool.connection() as conn:
                await conn.execute(POSTGRES_TABLE)
                for name, columns in POSTGRES_INDEXES.items():
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
        await conn.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {TABLE} {columns}")
    except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
        return  # another process made it meanwhile
    log.info("documents.index_built", index=name)
