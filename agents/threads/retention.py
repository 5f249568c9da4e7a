"""A thread's storage kept bounded: the retention policy, and its passes (idle threads
deleted, old checkpoints and summarised originals pruned), once or in the background. A base
of ``Threads``."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import structlog

from agents.state.leases import sweep_thread_leases
from agents.state.retention import prune_thread, thread_bytes
from agents.threads.records import ThreadRecordsBase

log = structlog.get_logger("agents.threads")  # the threads' log, as before


@dataclass(frozen=True)
class RetentionOptions:
    """How much of each thread is kept (0 turns a rule off).

    Attributes:
        keep_checkpoints: The newest checkpoints kept per thread (older ones are pruned;
            a fork or the history reaches back this far).
        idle_days: Threads not updated for this many days are deleted, files and all.
        keep_summarised: The newest summarised messages whose originals are kept per thread
            (shown by ``GET /v1/threads/{id}``; the summary stands for the rest).
        interval_s: How often the service applies the policy in the background.
    """

    keep_checkpoints: int = 100
    idle_days: float = 0
    keep_summarised: int = 0
    interval_s: float = 3600


@dataclass
class PruneReport:
    """What one pass of retention did (or, dry, would do)."""

    dry_run: bool
    threads_deleted: list[str] = field(default_factory=list)
    checkpoints_deleted: int = 0
    summarised_deleted: int = 0  # originals of summarised messages (not counted dry)
    threads_pruned: int = 0
    skipped_busy: list[str] = field(default_factory=list)
    leases_swept: int = 0  # thread leases and line tickets dead processes left (PostgreSQL)


class ThreadRetention(ThreadRecordsBase):
    """Retention passes over every thread."""

    retention: RetentionOptions

    async def prune(self, *, dry_run: bool = False, now: float | None = None) -> PruneReport:
        """Apply the retention policy once: delete idle threads, prune old checkpoints, and
        clear the thread leases and line tickets that dead processes left long ago."""
        report = PruneReport(dry_run=dry_run)
        policy = self.retention
        now = time.time() if now is None else now
        if policy.idle_days > 0:
            cutoff = now - policy.idle_days * 86400
            for record in await self.records.idle_since(cutoff, limit=10_000):
                thread_id = record["thread_id"]
                if await self.conversations.busy_anywhere(thread_id):
                    report.skipped_busy.append(thread_id)
                    continue
                report.threads_deleted.append(thread_id)
                if not dry_run:
                    async with self.conversations.hold(thread_id):
                        await self._delete(thread_id)
        if policy.keep_checkpoints > 0 or policy.keep_summarised > 0:
            after: str | None = None
            while True:
                page, after = await self.records.page(limit=200, after=after)
                for record in page:
                    await self._prune_one(record["thread_id"], report)
                if after is None:
                    break
        if not dry_run:
            report.leases_swept = await sweep_thread_leases(self.saver)
        log.info(
            "retention.applied",
            dry_run=dry_run,
            threads_deleted=len(report.threads_deleted),
            checkpoints_deleted=report.checkpoints_deleted,
            leases_swept=report.leases_swept,
        )
        return report

    async def _prune_one(self, thread_id: str, report: PruneReport) -> None:
        keep = self.retention.keep_checkpoints
        if thread_id in report.threads_deleted:
            return
        if await self.conversations.busy_anywhere(thread_id):
            report.skipped_busy.append(thread_id)
            return
        if report.dry_run:
            extra = (await thread_bytes(self.saver, thread_id))["checkpoints"] - keep
            extra = extra if keep > 0 else 0
            report.checkpoints_deleted += max(extra, 0)
            report.threads_pruned += extra > 0
            return
        deleted = summarised = 0
        async with self.conversations.hold(thread_id):
            if keep > 0:
                deleted = await prune_thread(self.saver, thread_id, keep)
            if self.transcript is not None and self.retention.keep_summarised > 0:
                summarised = await self.transcript.prune(thread_id, self.retention.keep_summarised)
        report.checkpoints_deleted += deleted
        report.summarised_deleted += summarised
        report.threads_pruned += deleted > 0 or summarised > 0

    async def keep_bounded(self) -> None:
        """Apply the retention policy every ``interval_s`` (the service's background task)."""
        while True:
            await asyncio.sleep(self.retention.interval_s)
            try:
                await self.prune()
            except Exception:  # the next pass tries again; the service goes on
                log.exception("retention.failed")
