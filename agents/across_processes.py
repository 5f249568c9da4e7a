"""What the service's conversations do across processes: a thread busy in another process,
a run accepted once it is in its thread's line, an Idempotency-Key kept with the thread's
record, a run another process left cut off resumed first, runs waiting for their thread kept
in the store, and one another process ended before it began. A base of ``Conversations``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Unpack

import structlog
from langchain_core.messages import BaseMessage
from langgraph.graph.state import CompiledStateGraph

from agents.errors import KeyReused, ThreadBusy
from agents.feed import RunFeed
from agents.kept_runs import KeptRuns
from agents.queued_runs import QueuedRuns
from agents.run import RunContext, StartOptions
from agents.state.leases import lease_alive, process_running
from agents.state.records import ThreadRecords
from agents.turn_keys import ask_digest, keyed_turn
from agents.turns import ClientTurn, turn_fingerprint

log = structlog.get_logger("agents.conversations")  # the conversations' log, as before

IN_LINE_WAIT_S = 5.0  # the most ``begin`` waits for its run to be in its thread's line


class AcrossProcesses:
    """The part of ``Conversations`` that looks past this process (see the module)."""

    graph: CompiledStateGraph[Any, Any, Any, Any]
    records: ThreadRecords | None
    kept: KeptRuns
    queued: QueuedRuns | None
    # What resumes a run another process left cut off on a thread a run now holds
    # (``OrphanRuns.resume_held``, wired by ``Threads``): thread id, the cut run.
    resume_cut_off: Callable[[str, str | None], Awaitable[None]] | None

    def busy(self, thread_id: str) -> bool:
        """Whether a run of the thread is under way in this process."""
        return self.kept.busy(thread_id)

    def start(
        self,
        thread_id: str,
        messages: Sequence[BaseMessage] | ClientTurn,
        **options: Unpack[StartOptions],
    ) -> RunFeed:
        """Start a run in this process (``Conversations.start``)."""
        raise NotImplementedError

    async def post(self, thread_id: str, message: BaseMessage, *more: Any) -> None:
        """Add a message between runs of the thread (``Conversations.post``)."""
        raise NotImplementedError

    async def post_between_turns(
        self,
        thread_id: str,
        message: BaseMessage,
        *more: Any,
        wait_s: float,
        waiting: Callable[[], None] | None = None,
    ) -> None:
        """``post``, once no process answers the thread: what a command beside the service
        writes (a run's outcome after a decision taken there). In one process a post waits in
        the thread's line; on SQLite, which has no leases across processes, a message written
        while the service answers the thread would be lost under that turn's next
        checkpoint. Waits at most ``wait_s``, then writes all the same; ``waiting`` is
        called once if it waits."""
        deadline = time.monotonic() + wait_s
        said = False
        while await self.busy_anywhere(thread_id) and time.monotonic() <= deadline:
            if not said and waiting is not None:
                waiting()
            said = True
            await asyncio.sleep(0.2)
        await self.post(thread_id, message, *more)

    async def busy_anywhere(self, thread_id: str) -> bool:
        """Whether a run of the thread is under way in this process or in another one: on
        PostgreSQL a process holds the thread's lease (a run, or a change between runs); on
        SQLite, which has no leases, the thread's record says running in a process of this
        machine that still runs (the service, seen from a command beside it). A record left
        running by a process that ended is not busy: its run is resumed, or deleted."""
        return (
            self.busy(thread_id)
            or await self._leased(thread_id)
            or await self._answered_elsewhere(thread_id)
        )

    async def _answered_elsewhere(self, thread_id: str) -> bool:
        record = await self.records.get(thread_id) if self.records is not None else None
        if record is None or record.get("status") != "running":
            return False
        return process_running(record.get("process"))

    async def begin(
        self,
        thread_id: str,
        messages: Sequence[BaseMessage] | ClientTurn,
        **options: Unpack[StartOptions],
    ) -> RunFeed:
        """``start``, with ``if_busy="reject"`` applied across processes: a thread another
        process is answering raises ThreadBusy too (``start`` alone sees this process's
        runs only). Two requests reaching two idle processes at the same instant may both
        pass; the second then waits for the first, as ``enqueue`` would."""
        if (
            options.get("if_busy", "enqueue") == "reject"
            and not self.busy(thread_id)  # this process's own: start joins or rejects
            and await self._leased(thread_id)
        ):
            raise busy_error(thread_id)
        key = options.get("idempotency_key")
        if key is not None and self.records is not None:
            await self._check_kept_key(thread_id, turn_fingerprint(messages, options), key)
        feed = self.start(thread_id, messages, **options)
        # Accepted once in the thread's line: a message sent after the answer (202) comes,
        # to any process, goes after this one (QA: sent back to back to two processes, the
        # later one's task had reached the line first).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(feed.in_line.wait(), IN_LINE_WAIT_S)
        return feed

    async def _check_kept_key(self, thread_id: str, wanted: str, key: str) -> None:
        """Refuse, before the run is accepted, a key the thread's record holds for another
        request (``wanted``, its fingerprint; a process that answered it stopped since):
        else the refusal came from the run, after the client had its 202."""
        if self.kept.joinable(thread_id, wanted, key) is not None:
            return  # this process knows the key's run: ``start`` decides
        assert self.records is not None
        keyed = keyed_turn(await self.records.get(thread_id), key)
        if keyed is not None and keyed.fingerprint != ask_digest(wanted):
            raise KeyReused.for_message(key, thread_id, keyed.run_id)

    async def _leased(self, thread_id: str) -> bool:
        saver: Any = self.graph.checkpointer  # lease_alive tells PostgreSQL from the rest
        return await lease_alive(saver, thread_id)

    async def _cut_off_first(self, ctx: RunContext) -> bool:
        """Before run ``ctx`` answers its message, holding a thread with steps left to run:
        a run that another process left cut off on it (it died; its record says running)
        is resumed first, by ``resume_cut_off``; whether it was. Else
        the message taking the thread first (queued in another process, which saw the dead
        one's lease gone at once) left it unanswered for good: its record said idle after,
        and no process looked for it again (QA)."""
        if self.resume_cut_off is None or self.records is None:
            return False
        try:
            record = await self.records.get(ctx.thread_id)
            if record is None or record.get("status") != "running":
                return False  # steps left by a run waiting for an approval, say
            cut = record.get("run_id")
            if cut == ctx.run_id:  # its own (a kept run taken up again)
                return False
            log.info("thread.resuming_cut_off_first", cut_run_id=cut)
            await self.resume_cut_off(ctx.thread_id, cut)
            return True
        except Exception:  # this run's message is answered all the same
            log.exception("thread.cut_off_not_resumed")
            return False

    async def _keep_waiting(
        self,
        ctx: RunContext,
        turn: Sequence[BaseMessage] | ClientTurn,
        options: StartOptions,
        queued_at: float,
    ) -> None:
        """Keep a run that waits for its thread (see ``QueuedRuns``); a store that fails
        here costs the run nothing but that."""
        assert self.queued is not None
        try:
            await self.queued.keep(ctx.thread_id, ctx.run_id, turn, options, queued_at)
        except Exception:
            log.warning("run.queued_not_kept", exc_info=True)

    async def _forget_kept(self, run_id: str, keeping: asyncio.Task[None]) -> None:
        """Forget a run kept while it waited (it ended, or never will begin), once the write
        keeping it is through."""
        assert self.queued is not None
        await keeping  # ``_keep_waiting`` raises nothing but a cancel, which it never gets
        try:
            await self.queued.forget(run_id)
        except Exception:  # its next start would answer it again: logged
            log.warning("run.queued_not_forgotten", run_id=run_id, exc_info=True)

    async def _ended_elsewhere(self, feed: RunFeed) -> bool:
        """Whether queued run ``feed``, holding its thread now, was ended meanwhile by another
        process (``FeedMirror.begin``), which took this one for gone while it could not
        reach Redis: then it ends here too, as it ended there, and never runs (its readers
        everywhere were told it failed, its client to send the message again)."""
        ended = await feed.mirror.begin(feed) if feed.mirror is not None else None
        if ended is None:
            return False
        log.warning("run.ended_elsewhere_before_it_began", run_id=feed.run_id)
        feed.mirror = None  # its shared status and stream say so already: not written over
        feed.put(ended)
        feed.close()
        # Found by its id as the mirror has it; the message sent again with its key is a
        # new run, in whichever process (a run kept here would answer it with this failure).
        self.kept.by_id.pop(feed.run_id, None)
        return True


def busy_error(thread_id: str) -> ThreadBusy:
    """The refusal of a message for a thread that is answering another."""
    return ThreadBusy(
        f"thread {thread_id!r} is answering another message; send this one after it "
        "ends, or with if_busy=enqueue to run it then"
    )
