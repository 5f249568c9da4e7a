"""Orphaned workflow runs: runs left RUNNING that no process runs (their process stopped or
died), found and resumed from their last checkpoint.

Each orphan is resumed in a task of its own, a few at a time (each holds a store connection at
times), and claimed only once a slot is free, so that another process with a free slot may
take it first. The periodic look never waits for the runs it resumes; of several processes
looking at once, one resumes a run (its lease says which).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from agents.workflows.records import RUN, RunRecords

log = structlog.get_logger(__name__)
_RESUMING = 4  # orphaned runs resumed at once (each holds a store connection at times)


class Orphans:
    """Finds the runs no process runs, and resumes those this process claims.

    Args:
        records: The execution records (the runs under way here are no orphans).
        resume: Goes on with a run from its last checkpoint (the engine's ``resume``).
    """

    def __init__(
        self, records: RunRecords, resume: Callable[[str], Awaitable[dict[str, Any]]]
    ) -> None:
        self.records = records
        self.leases = records.leases
        self._resume = resume
        self.resuming: dict[str, asyncio.Task[str | None]] = {}  # orphans being resumed
        self._slots = asyncio.Semaphore(_RESUMING)

    async def find(self) -> list[str]:
        """Runs left RUNNING that no process runs: not this one, nor (PostgreSQL) another
        whose lease on them is alive; their process stopped or died."""
        documents, under_way = self.records.documents, self.records.under_way
        found = [r["id"] for r in await documents.find(RUN, status="RUNNING", limit=None)]
        live = await self.leases.live(found)
        return [run_id for run_id in found if run_id not in live and run_id not in under_way]

    async def resume(self, run_ids: list[str] | None = None) -> list[str]:
        """Resume the runs ``find`` found (by default, looks now), each one this process
        claims (of several processes looking at once, one resumes a run); returns those."""
        found = await self.find() if run_ids is None else run_ids
        resumed = await asyncio.gather(*self._resume_each(found))
        return [run_id for run_id in resumed if run_id is not None]

    async def keep_resuming(self, interval_s: float) -> None:
        """Look for runs a dead process left every ``interval_s`` (several processes on
        PostgreSQL: a lease that expired means its process died); each is resumed in a task
        of its own, a few at a time, and the next look does not wait for them."""
        try:
            while True:
                await asyncio.sleep(interval_s)
                try:
                    self._resume_each(await self.find())
                except Exception:
                    log.exception("workflow.orphans_failed")
        finally:
            resuming = list(self.resuming.values())
            for task in resuming:
                task.cancel()
            await asyncio.gather(*resuming, return_exceptions=True)

    def _resume_each(self, run_ids: list[str]) -> list[asyncio.Task[str | None]]:
        """A task resuming each of ``run_ids`` not under way here nor being resumed."""
        tasks = []
        for run_id in run_ids:
            if run_id in self.records.under_way or run_id in self.resuming:
                continue
            task = asyncio.create_task(self._resume_one(run_id))
            self.resuming[run_id] = task
            task.add_done_callback(functools.partial(self._resumed, run_id))
            tasks.append(task)
        return tasks

    def _resumed(self, run_id: str, _: asyncio.Task[str | None]) -> None:
        self.resuming.pop(run_id, None)

    async def _resume_one(self, run_id: str) -> str | None:
        """Resume ``run_id`` if this process claims it; its id once resumed, else None."""
        async with self._slots:  # claimed only when it can go on: others may take it
            if not await self.leases.claim(run_id):
                return None
            try:
                stored = await self.records.documents.get(RUN, run_id)  # it may have ended since
                if stored is None or stored["status"] != "RUNNING":
                    await self.leases.release(run_id)
                    return None
                log.info("workflow.resuming", run_id=run_id)
                await self._resume(run_id)
            except Exception:  # one run's trouble must not stop the others'
                log.exception("workflow.resume_failed", run_id=run_id)
                await self.leases.release(run_id)
                return None
            return run_id
