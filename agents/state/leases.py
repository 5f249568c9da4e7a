"""One run at a time per thread: an asyncio lock in a process and, on PostgreSQL, a lease row
that every process sees."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

LEASES = "skilldesk_thread_leases"
LEASE_S = 30.0  # a holder that stops renewing (its process died) loses the thread after this
_NOW = "extract(epoch from clock_timestamp())"  # the database's clock: one for every process


@asynccontextmanager
async def thread_lock(
    saver: BaseCheckpointSaver[Any], thread_id: str, lease_s: float = LEASE_S
) -> AsyncIterator[None]:
    """Hold the thread for one run across processes (a lease row in PostgreSQL).

    Several service processes behind one load balancer share a PostgreSQL checkpointer; two
    turns of one thread arriving at two processes would otherwise both start from the same
    checkpoint. The holder renews its lease while the run goes on and deletes it at the end;
    a process that dies leaves a lease that expires, so another can take the thread over. A
    lease holds no connection: a session advisory lock did, one per run under way, and 50
    concurrent runs emptied the pool that their own checkpoint writes needed. SQLite is one
    process's embedded store: its in-process lock is enough.
    """
    pool: Any = getattr(saver, "conn", None)
    if not hasattr(pool, "connection") or not type(saver).__name__.startswith("AsyncPostgres"):
        yield
        return
    holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    await _lease(pool, thread_id, holder, lease_s)
    _HELD.add(holder)
    renewing = asyncio.create_task(_renew(pool, thread_id, holder, lease_s))
    try:
        yield
    finally:
        _HELD.discard(holder)
        renewing.cancel()
        await asyncio.gather(renewing, return_exceptions=True)
        async with pool.connection() as conn:
            await conn.execute(
                f"DELETE FROM {LEASES} WHERE thread_id = %s AND holder = %s", (thread_id, holder)
            )


_HELD: set[str] = set()  # the leases this process holds


def _dead(holder: str) -> bool:
    """Whether a thread lease's holder is gone (see ``holder_gone``)."""
    return holder_gone(holder, _HELD)


def holder_gone(holder: str, live: set[str]) -> bool:
    """Whether a lease's holder (``host:pid:token``) is a process of this machine that is
    gone (it need not wait for the lease to expire: a restarted service takes its
    predecessor's runs at once); ``live``: the holders this process has now."""
    host, pid, _ = [*holder.rsplit(":", 2), "", ""][:3]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    if int(pid) == os.getpid():
        return holder not in live  # an earlier process that had this pid
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


async def lease_alive(saver: BaseCheckpointSaver[Any], thread_id: str) -> bool:
    """Whether a process holds the thread now (its lease unexpired and, on this machine, its
    process running); always False for a store of one process (SQLite, memory): a run it
    left marked running has no process."""
    pool: Any = getattr(saver, "conn", None)
    if not hasattr(pool, "connection") or not type(saver).__name__.startswith("AsyncPostgres"):
        return False
    async with pool.connection() as conn:
        cursor = await conn.execute(
            f"SELECT holder FROM {LEASES} WHERE thread_id = %s AND expires >= {_NOW}",
            (thread_id,),
        )
        row = await cursor.fetchone()
    return row is not None and not _dead(str(row["holder"]))


async def _lease(pool: Any, thread_id: str, holder: str, lease_s: float) -> None:
    """Wait until the thread's lease is free (or expired), then take it."""
    wait = 0.02
    while True:
        async with pool.connection() as conn:
            cursor = await conn.execute(
                f"INSERT INTO {LEASES} VALUES (%s, %s, {_NOW} + %s) ON CONFLICT (thread_id) "
                f"DO UPDATE SET holder = EXCLUDED.holder, expires = EXCLUDED.expires "
                f"WHERE {LEASES}.expires < {_NOW} RETURNING holder",
                (thread_id, holder, lease_s),
            )
            if await cursor.fetchone() is not None:
                return
            cursor = await conn.execute(
                f"SELECT holder FROM {LEASES} WHERE thread_id = %s", (thread_id,)
            )
            row = await cursor.fetchone()
            if row is not None and _dead(str(row["holder"])):  # its process is gone: free it
                await conn.execute(
                    f"DELETE FROM {LEASES} WHERE thread_id = %s AND holder = %s",
                    (thread_id, row["holder"]),
                )
                continue
        await asyncio.sleep(wait)
        wait = min(wait * 2, 0.5)


async def _renew(pool: Any, thread_id: str, holder: str, lease_s: float) -> None:
    while True:
        await asyncio.sleep(lease_s / 3)
        async with pool.connection() as conn:
            await conn.execute(
                f"UPDATE {LEASES} SET expires = {_NOW} + %s WHERE thread_id = %s AND holder = %s",
                (lease_s, thread_id, holder),
            )


class ThreadLocks:
    """One run at a time per thread: two concurrent turns would both start from the same
    checkpoint and the later write would drop the other's messages. The asyncio lock covers
    one process; on PostgreSQL a renewed lease (``lease_s``) covers several."""

    def __init__(self, lease_s: float = LEASE_S) -> None:
        self.lease_s = lease_s
        self._locks: dict[str, asyncio.Lock] = {}
        self._waiting: dict[str, int] = {}

    @asynccontextmanager
    async def hold(self, thread_id: str, checkpointer: Any) -> AsyncIterator[None]:
        """Wait for the thread, then hold it (in this process and in the store)."""
        lock = self._locks.setdefault(thread_id, asyncio.Lock())
        self._waiting[thread_id] = self._waiting.get(thread_id, 0) + 1
        try:
            async with lock, thread_lock(checkpointer, thread_id, self.lease_s):
                yield
        finally:
            self._waiting[thread_id] -= 1
            if not self._waiting[thread_id]:  # nobody else waits: forget the lock
                del self._waiting[thread_id]
                self._locks.pop(thread_id, None)
