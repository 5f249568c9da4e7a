"""The documents table as both SQL stores (SQLite and PostgreSQL) define and query it: its
schema and indexes, a listing's WHERE clause and a page's query, written for either
placeholder (``?`` or ``%s``)."""

from __future__ import annotations

import time
from typing import Any

from agents.json_bytes import json_bytes
from agents.state.documents.common import check_limit, position, prefix_range

TABLE = "skilldesk_documents"
SQLITE_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (kind TEXT NOT NULL, id TEXT NOT NULL, "
    "owner TEXT, status TEXT, updated REAL NOT NULL, body TEXT NOT NULL, PRIMARY KEY (kind, id))"
)
POSTGRES_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (kind TEXT NOT NULL, id TEXT NOT NULL, "
    "owner TEXT, status TEXT, updated DOUBLE PRECISION NOT NULL, body TEXT NOT NULL, "
    "PRIMARY KEY (kind, id))"
)
# Index name -> columns. A user's threads (a listing by kind and owner, newest first) and
# documents by status (runs waiting for an approval, counted and listed) without a scan.
INDEXES = {
    f"{TABLE}_owner": "(kind, owner, updated)",
    f"{TABLE}_status": "(kind, status, updated)",
}
# Ids found by their start in byte order (``find(id_prefix=...)``), whatever the collation
# (PostgreSQL's; SQLite compares bytes anyway, through the primary key).
POSTGRES_INDEXES = {**INDEXES, f"{TABLE}_id_c": '(kind, id COLLATE "C")'}


def where(
    kind: str,
    owner: str | None,
    status: str | None,
    before: float | None,
    id_prefix: str | None,
    mark: str,
) -> tuple[str, tuple[Any, ...]]:
    """A listing's WHERE clause (without the word) and its arguments; ``mark``: the
    placeholder."""
    clauses, args = [f"kind = {mark}"], [kind]  # type: list[str], list[Any]
    if owner is not None:
        clauses.append(f"owner = {mark}")
        args.append(owner)
    if status is not None:
        # With an owner, by the owner's index: on SQLite (never ANALYZEd) the planner would
        # take the status index, and walk every run waiting in the store for one thread's.
        # A unary plus keeps SQLite off an index for that term; PostgreSQL's statistics
        # choose well unaided.
        plus = "+" if mark == "?" and owner is not None else ""
        clauses.append(f"{plus}status = {mark}")
        args.append(status)
    if before is not None:
        clauses.append(f"updated < {mark}")
        args.append(before)
    if id_prefix is not None:
        # In byte order whatever the database's collation (under en_US, "ab9f" < "ab:" is
        # false): SQLite compares text bytewise; PostgreSQL is told to, with an index of its
        # own (POSTGRES_INDEXES).
        key = "id" if mark == "?" else 'id COLLATE "C"'
        clauses.append(f"{key} >= {mark} AND {key} < {mark}")
        args += prefix_range(id_prefix)
    return " AND ".join(clauses), tuple(args)


def page_query(
    kind: str,
    owner: str | None,
    status: str | None,
    limit: int,
    after: str | None,
    mark: str,
) -> tuple[str, tuple[Any, ...]]:
    """``find_page``'s query: one row more than the page, to know whether another follows."""
    check_limit(limit)
    clause, args = where(kind, owner, status, None, None, mark)
    start = position(after)
    if start is not None:
        clause += f" AND (updated < {mark} OR (updated = {mark} AND id < {mark}))"
        args += (start[0], start[0], start[1])
    sql = (
        f"SELECT updated, id, body FROM {TABLE} WHERE {clause} "
        f"ORDER BY updated DESC, id DESC LIMIT {mark}"
    )
    return sql, (*args, limit + 1)


def dump(body: dict[str, Any]) -> str:
    """A document's body as the table keeps it."""
    return json_bytes(body).decode()


def row_of(kind: str, doc_id: str, body: dict[str, Any], index: dict[str, Any]) -> tuple[Any, ...]:
    """A document as the table's row: kind, id, owner, status, updated (now by default),
    body."""
    updated = index.get("updated") or time.time()
    return (kind, doc_id, index.get("owner"), index.get("status"), updated, dump(body))
