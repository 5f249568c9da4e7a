"""Documents in the SQLite checkpoint file: every statement on the saver's own thread, the
table and its indexes made on first use."""

from __future__ import annotations

import json
from typing import Any

from agents.state.documents.common import Changes, changed, index_of, paged
from agents.state.documents.sql import (
    INDEXES,
    SQLITE_TABLE,
    TABLE,
    page_query,
    row_of,
    where,
)
from agents.state.sqlite_saver import ThreadedSqliteSaver


class SqliteDocuments:
    """Documents in the SQLite checkpoint file, through its saver (``ThreadedSqliteSaver.run``)."""

    def __init__(self, saver: ThreadedSqliteSaver) -> None:
        self.saver = saver
        self._ready = False

    async def put(self, kind: str, doc_id: str, body: dict[str, Any], **index: Any) -> None:
        """See ``Documents.put``."""
        await self.saver.run(self._write, row_of(kind, doc_id, body, index))

    async def add(self, kind: str, doc_id: str, body: dict[str, Any], **index: Any) -> bool:
        """See ``Documents.add``."""
        return await self.saver.run(self._add, row_of(kind, doc_id, body, index))

    async def get(self, kind: str, doc_id: str) -> dict[str, Any] | None:
        """See ``Documents.get``."""
        rows = await self.saver.run(
            self._read, f"SELECT body FROM {TABLE} WHERE kind = ? AND id = ?", (kind, doc_id)
        )
        return json.loads(rows[0][0]) if rows else None

    async def merge(
        self, kind: str, doc_id: str, changes: Changes, **index: Any
    ) -> dict[str, Any] | None:
        """See ``Documents.merge``: the read and the write in one trip to the saver's thread,
        in one transaction that holds the file's write lock from the read on (other
        processes on the file included)."""
        return await self.saver.run(self._merge, kind, doc_id, changes, index)

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
        clause, args = where(kind, owner, status, before, id_prefix, "?")
        sql = f"SELECT body FROM {TABLE} WHERE {clause} ORDER BY updated DESC LIMIT ?"
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
        sql, args = page_query(kind, owner, status, limit, after, "?")
        rows = await self.saver.run(self._read, sql, args)
        return paged([(row[0], row[1], row[2]) for row in rows], limit)

    async def count(self, kind: str, *, status: str | None = None) -> int:
        """See ``Documents.count``."""
        clause, args = where(kind, None, status, None, None, "?")
        rows = await self.saver.run(
            self._read, f"SELECT COUNT(*) FROM {TABLE} WHERE {clause}", args
        )
        return int(rows[0][0])

    async def delete(self, kind: str, doc_id: str) -> bool:
        """See ``Documents.delete``."""
        return await self.saver.run(self._delete, kind, doc_id)

    def _delete(self, kind: str, doc_id: str) -> bool:
        self._setup()
        with self.saver.conn as conn:
            cursor = conn.execute(f"DELETE FROM {TABLE} WHERE kind = ? AND id = ?", (kind, doc_id))
            return cursor.rowcount > 0

    def _setup(self) -> None:
        if not self._ready:
            self.saver.conn.execute(SQLITE_TABLE)
            for name, columns in INDEXES.items():
                self.saver.conn.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {TABLE} {columns}")
            self._ready = True

    def _add(self, row: tuple[Any, ...]) -> bool:
        self._setup()
        with self.saver.conn as conn:
            sql = f"INSERT OR IGNORE INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?)"
            return conn.execute(sql, row).rowcount > 0

    def _write(self, row: tuple[Any, ...]) -> None:
        self._setup()
        with self.saver.conn as conn:
            conn.execute(f"INSERT OR REPLACE INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?)", row)

    def _read(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        self._setup()
        return list(self.saver.conn.execute(sql, args).fetchall())

    def _merge(
        self, kind: str, doc_id: str, changes: Changes, index: dict[str, Any]
    ) -> dict[str, Any] | None:
        self._setup()
        conn = self.saver.conn
        # Begun IMMEDIATE, the transaction takes the write lock before its read (waiting, as
        # any write does, the connection's timeout for another process's to end). Begun at
        # the write, as the module begins one, a process that wrote meanwhile was written
        # over: two decisions of one approval, from the service and the CLI, both taken.
        conn.execute("BEGIN IMMEDIATE")
        with conn:  # committed, or rolled back with what raised (a refused change)
            row = conn.execute(
                f"SELECT body FROM {TABLE} WHERE kind = ? AND id = ?", (kind, doc_id)
            ).fetchone()
            if row is None:
                return None
            body = changed(json.loads(row[0]), changes)
            conn.execute(
                f"INSERT OR REPLACE INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?)",
                row_of(kind, doc_id, body, index_of(body, index)),
            )
            return body
