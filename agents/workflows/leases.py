"""Which process runs a workflow run: on PostgreSQL, a lease row per run under way that its
process renews. A run whose lease expired (its process died) is claimed by one other process,
which resumes it. A run that waits for an approval runs nowhere and has no lease."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from typing import Any

import psycopg
import structlog
from langgraph.checkpoint.base import BaseCheckpointSaver

from agents.state.leases import LEASE_S, holder_gone
from agents.state.schema_lock import schema_lock

log = structlog.get_logger(__name__)

LEASES = "skilldesk_workflow_leases"
_NOW = "extract(epoch from clock_timestamp())"  # the database's clock: one for every process
_CREATE = (
    f"CREATE TABLE IF NOT EXISTS {LEASES} (run_id TEXT PRIMARY KEY, holder TEXT NOT NULL, "
    "expires DOUBLE PRECISION NOT NULL)"
)
# Take the run if nobody holds it or its lease expired: in one statement, so one claimant wins.
_CLAIM = (
    f"INSERT INTO {LEASES} VALUES (%s, %s, {_NOW} + %s) ON CONFLICT (run_id) DO UPDATE "
    "SET holder = EXCLUDED.holder, expires = EXCLUDED.expires "
    f"WHERE {LEASES}.expires < {_NOW} OR {LEASES}.holder = EXCLUDED.holder RETURNING run_id"
)
_LIVE: set[str] = set()  # the holders of this process (one per engine)


class RunLeases:
    """The workflow runs one engine runs, held across processes.

    A run is taken when it starts (or goes on after its approval) and released when it ends
    or waits. The asyncio task that took it keeps it: once that task is over without
    releasing it (the request that drove the run was cancelled), the lease goes, and the run
    is left for a process to resume. Without PostgreSQL (SQLite, memory: one process) the
    leases are this object's alone.

    Args:
        checkpointer: The service's checkpointer (PostgreSQL: its pool holds the leases).
        lease_s: A holder renews its leases every third of this; one that stops (its
            process died) loses its runs after it.
    """

    def __init__(
        self, checkpointer: BaseCheckpointSaver[Any] | None, lease_s: float = LEASE_S
    ) -> None:
        pool: Any = getattr(checkpointer, "conn", None)
        shared = type(checkpointer).__name__.startswith("AsyncPostgres")
        self.pool: Any = pool if shared and hasattr(pool, "connection") else None
        self.lease_s = lease_s
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._held: dict[str, asyncio.Task[Any] | None] = {}  # run id: the task driving it
        self._renewing: asyncio.Task[None] | None = None
        self._ready = False
        self._setting_up = asyncio.Lock()
        _LIVE.add(self.holder)

    async def take(self, run_id: str) -> None:
        """Hold ``run_id`` for a run that starts or goes on after its approval, waiting while
        another holds it (a process that claimed it to look at it)."""
        if self._held.get(run_id, False) is asyncio.current_task():
            return
        wait = 0.02
        while not await self.claim(run_id):
            await asyncio.sleep(wait)
            wait = min(wait * 2, 0.5)

    def holds(self, run_id: str) -> bool:
        """Whether this engine holds ``run_id`` (runs it, or is about to)."""
        return run_id in self._held

    async def claim(self, run_id: str) -> bool:
        """Take ``run_id`` if no process holds it (its lease expired, or its process, on this
        machine, ended); of several claimants at once, one wins."""
        if run_id in self._held:
            return False
        self._held[run_id] = asyncio.current_task()  # before the wait: one claimant here
        try:
            won = self.pool is None or await self._claim(run_id)
        except BaseException:
            self._held.pop(run_id, None)
            raise
        if not won:
            self._held.pop(run_id, None)
            return False
        if self.pool is not None and (self._renewing is None or self._renewing.done()):
            self._renewing = asyncio.create_task(self._renew())
        return True

    async def release(self, run_id: str) -> None:
        """Let ``run_id`` go (it ended or waits); a failure is logged: the lease expires."""
        self._held.pop(run_id, None)
        if self.pool is None:
            return
        try:
            async with self.pool.connection() as conn:
                await conn.execute(
                    f"DELETE FROM {LEASES} WHERE run_id = %s AND holder = %s",
                    (run_id, self.holder),
                )
        except Exception:
            log.warning("workflow.lease_release_failed", run_id=run_id, exc_info=True)

    async def live(self, run_ids: list[str]) -> set[str]:
        """Those of ``run_ids`` a process runs now: this one, or (PostgreSQL) another whose
        lease has not expired and which, on this machine, still runs."""
        for run_id in self._abandoned():
            await self.release(run_id)
        here = {r for r in run_ids if r in self._held}
        if self.pool is None or not run_ids:
            return here
        await self._setup()
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                f"SELECT run_id, holder FROM {LEASES} WHERE run_id = ANY(%s) AND expires >= {_NOW}",
                (run_ids,),
            )
            rows = await cursor.fetchall()
        return here | {r["run_id"] for r in rows if not holder_gone(r["holder"], _LIVE)}

    async def let_go(self, wait_s: float) -> list[str]:
        """Stop holding runs (the service stops): the tasks driving them get ``wait_s`` to
        let them go (requests the server cut off are cancelled already), those still going are
        then cancelled, and every lease still held is released, so that another process may
        resume the runs at once rather than once their leases expire. Returns the runs held."""
        held = list(self._held)
        me = asyncio.current_task()
        driving = {t for t in self._held.values() if t is not None and t is not me}
        if driving:
            _, going = await asyncio.wait(driving, timeout=wait_s)
            for task in going:
                task.cancel()
            if going:
                await asyncio.wait(going, timeout=wait_s)
        for run_id in list(self._held):
            await self.release(run_id)
        if self._renewing is not None:
            self._renewing.cancel()
        return held

    def abandon(self) -> None:
        """Stop holding and renewing anything, as a process that died would (its runs are
        another's once their leases expire, at once for a process of this machine)."""
        _LIVE.discard(self.holder)
        self._held.clear()
        if self._renewing is not None:
            self._renewing.cancel()

    def _abandoned(self) -> list[str]:
        """Runs whose driving task ended without letting them go."""
        return [r for r, task in self._held.items() if task is not None and task.done()]

    async def _claim(self, run_id: str) -> bool:
        await self._setup()
        while True:
            async with self.pool.connection() as conn:
                cursor = await conn.execute(_CLAIM, (run_id, self.holder, self.lease_s))
                if await cursor.fetchone() is not None:
                    return True
                cursor = await conn.execute(
                    f"SELECT holder FROM {LEASES} WHERE run_id = %s", (run_id,)
                )
                row = await cursor.fetchone()
                if row is not None and not holder_gone(row["holder"], _LIVE):
                    return False
                if row is not None:  # its process is gone: free the run, then claim it
                    await conn.execute(
                        f"DELETE FROM {LEASES} WHERE run_id = %s AND holder = %s",
                        (run_id, row["holder"]),
                    )

    async def _renew(self) -> None:
        """Renew this holder's leases every third of ``lease_s`` while it holds any."""
        while self._held:
            await asyncio.sleep(self.lease_s / 3)
            try:
                for run_id in self._abandoned():
                    log.warning("workflow.lease_abandoned", run_id=run_id)
                    await self.release(run_id)
                held = list(self._held)
                async with self.pool.connection() as conn:
                    cursor = await conn.execute(
                        f"UPDATE {LEASES} SET expires = {_NOW} + %s "
                        "WHERE holder = %s AND run_id = ANY(%s) RETURNING run_id",
                        (self.lease_s, self.holder, held),
                    )
                    kept = {r["run_id"] for r in await cursor.fetchall()}
                for run_id in set(held) - kept:
                    if run_id in self._held:  # taken over: this process was silent too long
                        self._lost(run_id)
            except Exception:
                log.warning("workflow.lease_renew_failed", exc_info=True)

    def _lost(self, run_id: str) -> None:
        """Another process holds ``run_id`` now (it claimed the run once this one's lease
        expired): the task driving it here is cancelled, so one process runs it, not two."""
        task = self._held.pop(run_id, None)
        log.error(
            "workflow.lease_lost",
            run_id=run_id,
            why="its lease expired unrenewed and another process claimed it; its driver here "
            "is cancelled, the run is that process's now",
        )
        if task is not None and not task.done():
            task.cancel()

    async def _setup(self) -> None:
        if self._ready:
            return
        async with self._setting_up:
            if self._ready:
                return
            try:
                async with schema_lock(self.pool), self.pool.connection() as conn:
                    await conn.execute(_CREATE)  # one process at a time, as the other tables
            except psycopg.errors.UniqueViolation:
                pass  # created at the same moment by a process of a version without the lock
            self._ready = True
