"""Runs a process that died or stopped left: found (their thread's record says running, no
process runs them) and resumed from their last checkpoint, their readers elsewhere told where
the run goes on."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import structlog
from langchain_core.messages import AIMessage

from agents.bus.common import NEVER_BEGAN
from agents.conversations import RESUME, Conversations
from agents.errors import NothingToResume
from agents.events import RunFailed, RunFinished
from agents.feed import RunFeed
from agents.queued_runs import turn_of
from agents.run import StartOptions
from agents.state.leases import lease_alive
from agents.state.migrations import migrate
from agents.state.records import THREAD, ThreadRecords

log = structlog.get_logger(__name__)

ENDING_LOOKBACK = 5  # checkpoints searched for the last one a run that had ended wrote


class OrphanRuns:
    """The runs of a service's threads that no process runs any more."""

    def __init__(self, conversations: Conversations, records: ThreadRecords) -> None:
        self.conversations = conversations
        self.records = records
        self.saver: Any = conversations.graph.checkpointer

    async def found(self) -> dict[str, str | None]:
        """Threads whose record says a run is under way that no process is running (not in
        this process, and on PostgreSQL no live lease in another), with that run's id."""
        found = await self.records.documents.find(THREAD, status="running", limit=None)
        return {
            r["thread_id"]: r.get("run_id")
            for r in found
            if not self.conversations.busy(r["thread_id"])
            and not await lease_alive(self.saver, r["thread_id"])
        }

    async def resume(self) -> list[str]:
        """Resume each run a process that died or stopped left (from its last checkpoint:
        steps that finished do not run again, side effects are not repeated) and start the
        runs that waited behind them; returns the threads resumed, once their runs ended.
        With Redis, readers of the run cut off are told where it goes on (its stream ends
        with a ``reconnect`` to the resumed run's)."""
        return await self.follow(await self.take_up())

    async def take_up(self) -> list[tuple[str, str | None, RunFeed]]:
        """Start the runs left: each one cut off, in its thread's line first, then those that
        waited (``_run_waiting``), each behind it. Returns at once with the resumed runs
        (thread, run cut off, its feed), for ``follow``: every run left is known (its id,
        ``queued``, cancellable) from then on, not only once the runs ahead of it ended."""
        started = []
        for thread_id, cut in (await self.found()).items():
            log.info("thread.resuming_orphan", thread_id=thread_id, run_id=cut)
            try:
                feed = self._start(thread_id, cut, held=False)
            except Exception:  # one thread's trouble must not stop the others'
                log.exception("thread.resume_failed", thread_id=thread_id)
                continue
            await feed.in_line.wait()  # ahead of the runs that waited for its thread
            started.append((thread_id, cut, feed))
        await self._run_waiting()
        return started

    async def follow(self, started: list[tuple[str, str | None, RunFeed]]) -> list[str]:
        """Follow the runs ``take_up`` resumed to their ends; the threads resumed."""
        ended = await asyncio.gather(
            *(self._follow(thread_id, cut, feed) for thread_id, cut, feed in started),
            return_exceptions=True,
        )
        resumed = []
        for (thread_id, _, _), result in zip(started, ended, strict=True):
            if isinstance(result, BaseException):
                log.error("thread.resume_failed", thread_id=thread_id, exc_info=result)
            elif result:
                resumed.append(thread_id)
        return resumed

    async def resume_held(self, thread_id: str, cut: str | None) -> None:
        """Resume run ``cut``, cut off on a thread the caller holds (a run that took the
        thread after the process running ``cut`` died: ``Conversations.resume_cut_off``)."""
        feed = self._start(thread_id, cut, held=True)
        try:
            await self._follow(thread_id, cut, feed)
        except asyncio.CancelledError:  # the caller is stopped (it lost its thread, say):
            self.conversations.stop_run(feed.run_id)  # this run holds the thread through it
            raise

    def _start(self, thread_id: str, cut: str | None, *, held: bool) -> RunFeed:
        """Start run ``cut`` of the thread again, from its last checkpoint."""
        # Without Redis nothing tells a reader of the run cut off where it goes on: it goes
        # on under its own id, which the client polls.
        run_id = cut if self.conversations.mirror is None and cut else None
        if held:
            return self.conversations.resume_held(thread_id, run_id)
        if run_id:
            return self.conversations.start(thread_id, RESUME, run_id=run_id)
        return self.conversations.start(thread_id, RESUME)

    async def _follow(self, thread_id: str, cut: str | None, feed: RunFeed) -> bool:
        """Read resumed run ``feed`` (of ``cut``) to its end; whether anything was left of
        ``cut`` to run."""
        mirror = self.conversations.mirror
        waiting = cut if mirror is not None else None  # its readers elsewhere wait
        try:
            async for _ in feed.read():
                if waiting is not None and mirror is not None:  # a step of it ran
                    await mirror.resumed(waiting, thread_id, feed)
                    waiting = None
            return True
        except NothingToResume:  # it had ended; only its record had not been told
            await self.records.update(thread_id, status="idle")
            if waiting is not None and mirror is not None:  # else its readers wait on
                ending = await self._ending(thread_id, waiting)
                await mirror.resumed(waiting, thread_id, None, ending)
            return False

    async def _run_waiting(self) -> None:
        """Start the runs that waited for their thread when their process ended (kept
        without Redis: ``QueuedRuns``), in the order they came, under their own ids: each
        waits for its thread as it did (behind the run resumed above). One that had begun
        and stored its turn is not run again (it was resumed above, or had ended)."""
        queued = self.conversations.queued
        if queued is None:
            return
        for run in await queued.left():
            thread_id, run_id = str(run["thread_id"]), str(run["run_id"])
            try:
                # Claimed by taking it out (of processes looking at once, one does); kept
                # again by its new run while that waits, as any waiting run is.
                if not await queued.forget(run_id):
                    continue
                if await self.records.get(thread_id) is None:  # deleted meanwhile
                    log.info("run.queued_dropped", thread_id=thread_id, run_id=run_id)
                    continue
                if await self._stored(thread_id, run_id):  # it began: resumed above if cut
                    log.info("run.queued_had_begun", thread_id=thread_id, run_id=run_id)
                    continue
                options = cast(StartOptions, {**(run.get("options") or {}), "run_id": run_id})
                feed = self.conversations.start(thread_id, turn_of(run), **options)
                feed.created = float(run.get("queued_at") or feed.created)  # when accepted
                log.info("run.queued_taken_up", thread_id=thread_id, run_id=run_id)
                await feed.in_line.wait()  # ahead of the next that waited for its thread
            except Exception:  # one run's trouble must not stop the others'
                log.exception("run.queued_not_taken_up", thread_id=thread_id, run_id=run_id)

    async def _stored(self, thread_id: str, run_id: str) -> bool:
        """Whether run ``run_id`` wrote a checkpoint of the thread (its turn is stored)."""
        async for _ in self.saver.alist(_root(thread_id), filter={"run_id": run_id}, limit=1):
            return True
        return False

    async def _ending(self, thread_id: str, run_id: str) -> RunFinished | RunFailed:
        """How run ``run_id`` of the thread had ended, nothing of it being left to run: its
        answer, from the newest checkpoint the run wrote (writes outside a run may follow
        it: a file's reference, a message posted); none: it died before its message was
        kept."""
        async for found in self.saver.alist(_root(thread_id), limit=ENDING_LOOKBACK):
            if found.metadata.get("run_id") != run_id:
                continue
            values = migrate(dict(found.checkpoint["channel_values"]))[0]
            messages = values.get("messages") or []
            if messages and isinstance(messages[-1], AIMessage):
                return RunFinished(thread_id, run_id, messages[-1])
            break
        return RunFailed(thread_id, run_id, "run_cancelled", NEVER_BEGAN)

    async def keep_resuming(self, interval_s: float) -> None:
        """Look for runs a dead process left every ``interval_s`` (several processes on
        PostgreSQL: a lease that expired means its process died)."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.resume()
            except Exception:
                log.exception("thread.orphans_failed")


def _root(thread_id: str) -> Any:
    """The config of the thread's own checkpoints (not a subgraph's)."""
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
