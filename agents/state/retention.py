"""Keeping storage bounded: a thread's old checkpoints pruned (the newest N kept), a whole
thread's rows deleted, and how much a thread takes, on the SQLite file and on PostgreSQL.

Thread state uses no ``DeltaChannel``: each checkpoint references (by channel version, in
the blobs tables of both stores) or holds inline every value it needs, so dropping older
checkpoints never breaks a newer one, once the values no kept checkpoint refers to go too.
The caller holds the thread (no run writes it meanwhile).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from agents.state.sqlite_saver import BLOBS, ThreadedSqliteSaver

_CALLS = "skilldesk_calls"  # the call journal (agents/state/call_stores.py)


def _pool(saver: BaseCheckpointSaver[Any]) -> Any:
    pool = getattr(saver, "conn", None)
    if type(saver).__name__.startswith("AsyncPostgres") and hasattr(pool, "connection"):
        return pool
    return None


async def prune_thread(saver: BaseCheckpointSaver[Any], thread_id: str, keep: int) -> int:
    """Delete all but the ``keep`` newest checkpoints of each namespace of the thread, with
    their pending writes (and, on PostgreSQL, the blobs no kept checkpoint references).
    Returns how many checkpoints were deleted (0 for a store without tables: in memory)."""
    if keep < 1:
        raise ValueError("keep at least one checkpoint (the thread's current state)")
    if isinstance(saver, ThreadedSqliteSaver):
        return await saver.run_long(_prune_sqlite, saver, thread_id, keep)
    pool = _pool(saver)
    if pool is None:
        return 0
    async with pool.connection() as conn, conn.transaction():
        cursor = await conn.execute(
            "SELECT DISTINCT checkpoint_ns FROM checkpoints WHERE thread_id = %s", (thread_id,)
        )
        deleted = 0
        for row in await cursor.fetchall():
            ns = row["checkpoint_ns"]
            cutoff = await _cutoff_pg(conn, thread_id, ns, keep)
            if cutoff is None:
                continue
            args = (thread_id, ns, cutoff)
            await conn.execute(
                "DELETE FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_ns = %s "
                "AND checkpoint_id < %s",
                args,
            )
            gone = await conn.execute(
                "DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s "
                "AND checkpoint_id < %s",
                args,
            )
            deleted += gone.rowcount
            await conn.execute(
                "DELETE FROM checkpoint_blobs b WHERE b.thread_id = %s AND b.checkpoint_ns = %s "
                "AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = b.thread_id "
                "AND c.checkpoint_ns = b.checkpoint_ns "
                "AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)",
                (thread_id, ns),
            )
        return deleted


async def _cutoff_pg(conn: Any, thread_id: str, ns: str, keep: int) -> str | None:
    cursor = await conn.execute(
        "SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s "
        "ORDER BY checkpoint_id DESC OFFSET %s LIMIT 1",
        (thread_id, ns, keep - 1),
    )
    row = await cursor.fetchone()
    return None if row is None else str(row["checkpoint_id"])


def _prune_sqlite(saver: ThreadedSqliteSaver, thread_id: str, keep: int) -> int:
    conn = saver.conn
    deleted = 0
    with saver.lock, conn:
        spaces = conn.execute(
            "SELECT DISTINCT checkpoint_ns FROM checkpoints WHERE thread_id = ?", (thread_id,)
        ).fetchall()
        for (ns,) in spaces:
            row = conn.execute(
                "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? "
                "ORDER BY checkpoint_id DESC LIMIT 1 OFFSET ?",
                (thread_id, ns, keep - 1),
            ).fetchone()
            if row is None:
                continue
            args = (thread_id, ns, row[0])
            conn.execute(
                "DELETE FROM writes WHERE thread_id = ? AND checkpoint_ns = ? "
                "AND checkpoint_id < ?",
                args,
            )
            gone = conn.execute(
                "DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? "
                "AND checkpoint_id < ?",
                args,
            ).rowcount
            deleted += gone
            if gone:
                _drop_unreferenced_blobs(saver, thread_id, ns)
    return deleted


def _drop_unreferenced_blobs(saver: ThreadedSqliteSaver, thread_id: str, ns: str) -> None:
    """Delete the channel values no remaining checkpoint of the namespace refers to."""
    conn = saver.conn
    referenced: set[tuple[str, str]] = set()
    for kind, blob in conn.execute(
        "SELECT type, checkpoint FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ?",
        (thread_id, ns),
    ):
        versions = saver.serde.loads_typed((kind, blob)).get("channel_versions", {})
        referenced.update((str(c), str(v)) for c, v in versions.items())
    stored = conn.execute(
        f"SELECT channel, version FROM {BLOBS} WHERE thread_id = ? AND checkpoint_ns = ?",
        (thread_id, ns),
    ).fetchall()
    garbage = [(thread_id, ns, c, v) for c, v in stored if (c, v) not in referenced]
    conn.executemany(
        f"DELETE FROM {BLOBS} WHERE thread_id = ? AND checkpoint_ns = ? AND channel = ? "
        "AND version = ?",
        garbage,
    )


async def delete_thread(saver: BaseCheckpointSaver[Any], thread_id: str) -> None:
    """Delete every checkpoint, write and journalled call of the thread."""
    await saver.adelete_thread(thread_id)
    if isinstance(saver, ThreadedSqliteSaver):
        await saver.run_long(_forget_calls_sqlite, saver.conn, thread_id)
        return
    pool = _pool(saver)
    if pool is not None:
        async with pool.connection() as conn:
            if await _has_table_pg(conn, _CALLS):
                await conn.execute(f"DELETE FROM {_CALLS} WHERE thread_id = %s", (thread_id,))


def _forget_calls_sqlite(conn: sqlite3.Connection, thread_id: str) -> None:
    with conn:
        found = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (_CALLS,)
        ).fetchone()
        if found:
            conn.execute(f"DELETE FROM {_CALLS} WHERE thread_id = ?", (thread_id,))


async def _has_table_pg(conn: Any, name: str) -> bool:
    cursor = await conn.execute("SELECT to_regclass(%s) IS NOT NULL AS found", (name,))
    row = await cursor.fetchone()
    return bool(row["found"])


async def thread_bytes(saver: BaseCheckpointSaver[Any], thread_id: str) -> dict[str, int]:
    """How much the thread's checkpoints take: ``checkpoints`` (rows) and ``bytes`` (stored
    values, checkpoints and writes; blobs on PostgreSQL)."""
    if isinstance(saver, ThreadedSqliteSaver):
        return await saver.run_long(_bytes_sqlite, saver.conn, thread_id)
    pool = _pool(saver)
    if pool is None:
        return {"checkpoints": 0, "bytes": 0}
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT (SELECT count(*) FROM checkpoints WHERE thread_id = %(t)s) AS n, "
            "(SELECT coalesce(sum(pg_column_size(checkpoint) + pg_column_size(metadata)), 0) "
            "FROM checkpoints WHERE thread_id = %(t)s) + "
            "(SELECT coalesce(sum(pg_column_size(blob)), 0) FROM checkpoint_blobs "
            "WHERE thread_id = %(t)s) + "
            "(SELECT coalesce(sum(pg_column_size(blob)), 0) FROM checkpoint_writes "
            "WHERE thread_id = %(t)s) AS size",
            {"t": thread_id},
        )
        row = await cursor.fetchone()
    return {"checkpoints": int(row["n"]), "bytes": int(row["size"])}


def _bytes_sqlite(conn: sqlite3.Connection, thread_id: str) -> dict[str, int]:
    n, stored = conn.execute(
        "SELECT count(*), coalesce(sum(length(checkpoint) + length(metadata)), 0) "
        "FROM checkpoints WHERE thread_id = ?",
        (thread_id,),
    ).fetchone()
    (writes,) = conn.execute(
        "SELECT coalesce(sum(length(value)), 0) FROM writes WHERE thread_id = ?", (thread_id,)
    ).fetchone()
    (blobs,) = conn.execute(
        f"SELECT coalesce(sum(length(blob)), 0) FROM {BLOBS} WHERE thread_id = ?", (thread_id,)
    ).fetchone()
    return {"checkpoints": int(n), "bytes": int(stored) + int(writes) + int(blobs)}
