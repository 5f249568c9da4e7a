"""Which process runs a workflow run: on PostgreSQL, a lease row per run under way that its
process renews. A run whose lease expired (its process died) is claimed by one other process,
which resumes it. A run that waits for an approval runs nowhere and has no lease."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import structlog
from langgraph.checkpoint.base import BaseCheckpointSaver

from agents.state.lease_table import LeaseTable, new_holder, set_live, shared_pool, until
from agents.state.leases import LEASE_S
from agents.state.schema_lock import schema_lock

log = structlog.get_logger(__name__)

LEASES = "skilldesk_workflow_leases"


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
        self.pool: Any = shared_pool(checkpointer)
        self._table = LeaseTable(self.pool, LEASES, "run_id")
        self.lease_s = lease_s
        self.holder = new_holder()
        self._held: dict[str, asyncio.Task[Any] | None] = {}  # run id: the task driving it
        self._renewing: asyncio.Task[None] | None = None
        self._looking: asyncio.Task[None] | None = None  # ``on_renew`` under way
        self._ready = False
        self._setting_up = asyncio.Lock()
        # Looked at after each renewal (the cancels other processes asked: ``RunStops.sweep``).
        self.on_renew: Callable[[], Awaitable[None]] | None = None
        set_live(self.holder, True)

    async def take(self, run_id: str) -> None:
        """Hold ``run_id`` for a run that starts or goes on after its approval, waiting while
        another holds it (a process that claimed it to look at it)."""
        if self._held.get(run_id, False) is asyncio.current_task():
            return
        await until(lambda: self.claim(run_id))

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
        """Let ``run_id`` go (it ended or waits); a failure is logged: the lease expires. A
        release cut off (its task cancelled) leaves the run held, for ``let_go`` or the next
        look for runs whose task ended (``_abandoned``) to release."""
        if self.pool is not None:
            try:
                await self._table.release(run_id, self.holder)
            except Exception:
                log.warning("workflow.lease_release_failed", run_id=run_id, exc_info=True)
        self._held.pop(run_id, None)

    async def live(self, run_ids: list[str]) -> set[str]:
        """Those of ``run_ids`` a process runs now: this one, or (PostgreSQL) another whose
        lease has not expired and which, on this machine, still runs."""
        for run_id in self._abandoned():
            await self.release(run_id)
        here = {r for r in run_ids if r in self._held}
        if self.pool is None or not run_ids:
            return here
        await self._setup()
        return here | await self._table.alive(run_ids)

    async def let_go(self, wait_s: float) -> None:
        """Stop holding runs (the service stops): the tasks driving them get ``wait_s`` to
        let them go (requests the server cut off are cancelled already), those still going are
        then cancelled and get ``wait_s`` more, and the lease of every run whose task is over
        is released, so that another process may resume it at once rather than once its lease
        expires. A task still going after that (stuck in a handler's thread, say) keeps its
        lease: its run is another's only once the lease expires, never twice at once."""
        me = asyncio.current_task()
        driving = {t for t in self._held.values() if t is not None and t is not me}
        if driving:
            _, going = await asyncio.wait(driving, timeout=wait_s)
            for task in going:
                task.cancel()
            if going:
                await asyncio.wait(going, timeout=wait_s)
        for run_id in self._abandoned():
            await self.release(run_id)
        if not self._held and self._renewing is not None:
            self._renewing.cancel()
        if not self._held and self._looking is not None:
            self._looking.cancel()

    def abandon(self) -> None:
        """Stop holding and renewing anything, as a process that died would (its runs are
        another's once their leases expire, at once for a process of this machine)."""
        set_live(self.holder, False)
        self._held.clear()
        for task in (self._renewing, self._looking):
            if task is not None:
                task.cancel()

    def _abandoned(self) -> list[str]:
        """Runs whose driving task ended without letting them go."""
        return [r for r, task in self._held.items() if task is not None and task.done()]

    async def _claim(self, run_id: str) -> bool:
        await self._setup()
        return await self._table.claim(run_id, self.holder, self.lease_s)

    async def _renew(self) -> None:
        """Renew this holder's leases every third of ``lease_s`` while it holds any."""
        while self._held:
            await asyncio.sleep(self.lease_s / 3)
            try:
                for run_id in self._abandoned():
                    log.warning("workflow.lease_abandoned", run_id=run_id)
                    await self.release(run_id)
                held = list(self._held)
                kept = await self._table.renew(held, self.holder, self.lease_s)
                for run_id in set(held) - kept:
                    if run_id in self._held:  # taken over: this process was silent too long
                        self._lost(run_id)
                self._look_after_renewal()
            except Exception:
                log.warning("workflow.lease_renew_failed", exc_info=True)

    def _look_after_renewal(self) -> None:
        """Run ``on_renew`` in a task of its own (one at a time): a slow or stalled look
        never delays the renewals (the leases would expire, and the runs be taken over)."""
        if self.on_renew is None or (self._looking is not None and not self._looking.done()):
            return
        self._looking = asyncio.create_task(self._look(self.on_renew))

    async def _look(self, on_renew: Callable[[], Awaitable[None]]) -> None:
        try:
            async with asyncio.timeout(self.lease_s):  # a stalled one gives way to the next
                await on_renew()
        except Exception:  # TimeoutError included: the next renewal looks again
            log.warning("workflow.lease_look_failed", exc_info=True)

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
                async with schema_lock(self.pool):  # one process at a time, as the other tables
                    await self._table.create()
            except psycopg.errors.UniqueViolation:
                pass  # created at the same moment by a process of a version without the lock
            self._ready = True
