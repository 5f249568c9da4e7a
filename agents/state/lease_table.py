"""Leases every process sees: rows of a PostgreSQL table (a key, its holder, when it expires),
timed by the database's clock. Thread leases (``agents.state.leases``) and workflow run leases
(``agents.workflows.leases``) are two tables of this shape."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

DB_NOW = "extract(epoch from clock_timestamp())"  # the database's clock: one for every process
_LIVE: set[str] = set()  # the holders of this process whose leases are kept


def shared_pool(saver: BaseCheckpointSaver[Any] | None) -> Any:
    """The connection pool of a PostgreSQL checkpointer, which several processes share; None
    for a store of one process (SQLite, memory), whose in-process locks are enough."""
    pool: Any = getattr(saver, "conn", None)
    if not hasattr(pool, "connection") or not type(saver).__name__.startswith("AsyncPostgres"):
        return None
    return pool


def new_holder() -> str:
    """A name for a lease holder of this process (``host:pid:token``); see ``set_live``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def set_live(holder: str, live: bool) -> None:
    """Count ``holder`` as one of this process's that keeps its leases, or no longer: its
    leases left behind are then anyone's at once (see ``holder_gone``)."""
    if live:
        _LIVE.add(holder)
    else:
        _LIVE.discard(holder)


def is_live(holder: str) -> bool:
    """Whether ``holder`` (of this process) still keeps its leases (``set_live``)."""
    return holder in _LIVE


def holder_gone(holder: str) -> bool:
    """Whether a lease's holder (``host:pid:token``) is a process of this machine that is
    gone (it need not wait for the lease to expire: a restarted service takes its
    predecessor's runs at once), or a holder of this process no longer live."""
    host, pid, _ = [*holder.rsplit(":", 2), "", ""][:3]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    if int(pid) == os.getpid():
        return holder not in _LIVE  # also an earlier process that had this pid
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


async def until(claim: Callable[[], Awaitable[bool]]) -> None:
    """Try ``claim`` until it succeeds, waiting a little longer after each failure."""
    wait = 0.02
    while not await claim():
        await asyncio.sleep(wait)
        wait = min(wait * 2, 0.5)


async def delete_lapsed(pool: Any, table: str, lapsed_s: float) -> int:
    """Delete the rows of ``table`` (an ``expires`` column, the database's clock) that
    expired more than ``lapsed_s`` ago; how many."""
    async with pool.connection() as conn:
        cursor = await conn.execute(
            f"DELETE FROM {table} WHERE expires < {DB_NOW} - %s", (lapsed_s,)
        )
        return int(cursor.rowcount or 0)


class LeaseTable:
    """The lease rows of one table: ``key`` (its primary key), ``holder``, ``expires``.

    Args:
        pool: A psycopg async pool (rows read as dicts), as ``shared_pool`` returns.
        table: The table's name.
        key: The name of its key column (``thread_id``, ``run_id``).
    """

    def __init__(self, pool: Any, table: str, key: str) -> None:
        self.pool = pool
        self.table = table
        self.key = key

    async def create(self) -> None:
        """Create the table if it is not there (under the caller's ``schema_lock``)."""
        async with self.pool.connection() as conn:
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self.table} ({self.key} TEXT PRIMARY KEY, "
                "holder TEXT NOT NULL, expires DOUBLE PRECISION NOT NULL)"
            )

    def taken_unless_held(self) -> str:
        """The ``ON CONFLICT`` clause of a claim (an ``INSERT`` of key, holder, expiry): the
        lease is the claimant's if it expired or is the claimant's already."""
        table = self.table
        return (
            f"ON CONFLICT ({self.key}) DO UPDATE SET holder = EXCLUDED.holder, "
            f"expires = EXCLUDED.expires WHERE {table}.expires < {DB_NOW} "
            f"OR {table}.holder = EXCLUDED.holder"
        )

    async def claim(self, key: str, holder: str, lease_s: float) -> bool:
        """Take ``key`` for ``lease_s`` if nobody holds it, its lease expired, it is
        ``holder``'s already, or its holder is gone (``holder_gone``); of several claimants
        at once, one wins (one statement decides)."""
        table, column = self.table, self.key
        while True:
            async with self.pool.connection() as conn:
                cursor = await conn.execute(
                    f"INSERT INTO {table} VALUES (%s, %s, {DB_NOW} + %s) "
                    f"{self.taken_unless_held()} RETURNING {column}",
                    (key, holder, lease_s),
                )
                if await cursor.fetchone() is not None:
                    return True
                cursor = await conn.execute(
                    f"SELECT holder FROM {table} WHERE {column} = %s", (key,)
                )
                row = await cursor.fetchone()
                if row is not None and not holder_gone(row["holder"]):
                    return False
                if row is not None:  # its process is gone: free the key, then claim it
                    await conn.execute(
                        f"DELETE FROM {table} WHERE {column} = %s AND holder = %s",
                        (key, row["holder"]),
                    )

    async def renew(self, keys: list[str], holder: str, lease_s: float) -> set[str]:
        """Extend ``holder``'s leases of ``keys`` by ``lease_s``; returns those it still held
        (the others were claimed by another once they expired)."""
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                f"UPDATE {self.table} SET expires = {DB_NOW} + %s "
                f"WHERE holder = %s AND {self.key} = ANY(%s) RETURNING {self.key}",
                (lease_s, holder, keys),
            )
            return {r[self.key] for r in await cursor.fetchall()}

    async def release(self, key: str, holder: str) -> None:
        """Let ``key`` go if ``holder`` holds it (a lease another took over stays)."""
        async with self.pool.connection() as conn:
            await conn.execute(
                f"DELETE FROM {self.table} WHERE {self.key} = %s AND holder = %s", (key, holder)
            )

    async def sweep(self, lapsed_s: float) -> int:
        """Delete the leases that expired more than ``lapsed_s`` ago (their processes died;
        a key nobody claims again would keep its row for good); how many. An expired lease
        is anyone's already: deleting it changes no claim."""
        return await delete_lapsed(self.pool, self.table, lapsed_s)

    async def alive(self, keys: list[str]) -> set[str]:
        """Those of ``keys`` held now: their leases unexpired and their holders not gone."""
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                f"SELECT {self.key}, holder FROM {self.table} "
                f"WHERE {self.key} = ANY(%s) AND expires >= {DB_NOW}",
                (keys,),
            )
            rows = await cursor.fetchall()
        return {r[self.key] for r in rows if not holder_gone(r["holder"])}
