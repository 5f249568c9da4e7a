"""Run conversation turns on the checkpointed graph, as a result or as a stream of events."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager, nullcontext
from typing import Any, Unpack

import structlog
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage
from langgraph.graph.state import CompiledStateGraph

from agents.across_processes import AcrossProcesses, busy_error
from agents.bookkeeping import RunBooks
from agents.bus.common import NEVER_BEGAN
from agents.cancelling import stop_tasks
from agents.endings import cancelled, failed
from agents.errors import (
    InvalidTurn,
    KeyReused,
    NothingToResume,
    ShuttingDown,
    ThreadNotFound,
)
from agents.events import (
    Event,
    RunFailed,
    RunFinished,
)
from agents.feed import STOP_ASKED, TAKEN_OVER, THREAD_TAKEN_OVER, FeedMirror, RunFeed
from agents.kept_runs import RETAIN_S, KeptRuns
from agents.queued_runs import QueuedRuns
from agents.router.learned import LearnedExamples
from agents.router.router import Router
from agents.run import RunBudget, RunContext, RunLimits, RunOptions, StartOptions, thread_config
from agents.state.attachments import AttachmentStore
from agents.state.leases import LEASE_S, ThreadLocks, letting_go
from agents.state.migrations import migrate
from agents.state.records import ThreadRecords
from agents.state.traces import RunTraces
from agents.turn_runner import TurnRunner
from agents.turns import (
    ClientTurn,
    turn_fingerprint,
)

log = structlog.get_logger(__name__)

# At a stop, a run cut off gets this long to end after its cancel (its bookkeeping), then is
# cancelled again until it ends (it dropped the cancel: Python 3.11's ``wait_for``), at most
# ``STOP_WAIT_S`` in all: a stop never waits for good.
CUT_WAIT_S = 2.0
STOP_WAIT_S = 10.0

# A turn with no new input: go on from the thread's latest checkpoint (after a crash).
RESUME: tuple[BaseMessage, ...] = ()


class Conversations(AcrossProcesses):
    """The one entry point the service uses to talk to the graph.

    Args:
        graph: The compiled conversation graph (with its checkpointer).
        limits: Budget applied to every run (the service's settings; none: unlimited).
        router: The graph's router, to start a turn's retrieval early (optional).
        records: Thread records to keep up to date (title, times, status, message count).
        attachments: Where files the run's skills make are kept (they become the thread's).
        retain_s: How long an ended run stays readable by its id (its status and events).
        learner: Learns examples from turns whose skill the model chose (optional).
        traces: Where each run's trace is kept, for its answer to unfold later (optional).
        mirror: Shares runs' events and status with other processes (``agents.bus``).
        queued: Where runs waiting for their thread are kept until they begin, without a
            mirror (``agents/queued_runs.py``).
    """

    def __init__(
        self,
        graph: CompiledStateGraph[Any, Any, Any, Any],
        limits: RunLimits | None = None,
        router: Router | None = None,
        records: ThreadRecords | None = None,
        attachments: AttachmentStore | None = None,
        retain_s: float = RETAIN_S,
        lease_s: float = LEASE_S,
        learner: LearnedExamples | None = None,
        traces: RunTraces | None = None,
        mirror: FeedMirror | None = None,
        queued: QueuedRuns | None = None,
    ) -> None:
        self.graph = graph
        self.traces = traces
        self.mirror = mirror
        # Without Redis, the runs waiting for their thread are kept in the store until they
        # begin (with it, one that never began is told failed: ``agents/bus``).
        self.queued = queued if mirror is None else None
        self.stopping: float | None = None  # when the process was told to stop (monotonic)
        self.learner = learner
        self.kept = KeptRuns(retain_s)  # the runs under way and those that ended lately
        self.limits = limits or RunLimits()
        self.router = router
        self.records = records
        self.attachments = attachments
        self._locks = ThreadLocks(lease_s)
        self.books = RunBooks(graph, records, attachments, learner, traces)
        self._turns = TurnRunner(graph, router, records, self.books)
        self._turns.cut_off = self._cut_off_first
        self._tasks: set[asyncio.Task[None]] = set()
        self._run_tasks: dict[str, asyncio.Task[None]] = {}
        # What resumes a run another process left cut off on a thread a run now holds
        # (``OrphanRuns.resume_held``, wired by ``Threads``): thread id, the cut run.
        self.resume_cut_off: Callable[[str, str | None], Awaitable[None]] | None = None

    @property
    def retain_s(self) -> float:
        """How long an ended run stays readable by its id."""
        return self.kept.retain_s

    @retain_s.setter
    def retain_s(self, seconds: float) -> None:
        self.kept.retain_s = seconds

    async def state(self, thread_id: str) -> dict[str, Any]:
        """The thread's state values in the current schema (empty for a new thread)."""
        snapshot = await self.graph.aget_state(thread_config(thread_id))
        return migrate(dict(snapshot.values))[0] if snapshot.values else {}

    @asynccontextmanager
    async def hold(
        self,
        thread_id: str,
        in_line: asyncio.Event | None = None,
        lost: Callable[[], None] | None = None,
    ) -> AsyncIterator[None]:
        """Hold the thread between runs (a change outside a run: delete, prune, a post).
        ``in_line``: set once the caller is in the thread's line (``RunFeed.in_line``);
        ``lost``: called before the caller's task is cancelled, should another process take
        the thread over (``ThreadLocks.hold``)."""
        async with self._locks.hold(thread_id, self.graph.checkpointer, in_line, lost):
            yield

    async def history(self, thread_id: str) -> list[BaseMessage]:
        """Messages of a thread so far (empty for a new thread)."""
        return list((await self.state(thread_id)).get("messages", []))

    async def usage(self, thread_id: str) -> dict[str, int]:
        """Token usage of a thread so far."""
        return dict((await self.state(thread_id)).get("usage", {}))

    async def post(
        self,
        thread_id: str,
        message: BaseMessage,
        events: Sequence[Event] = (),
        started: float | None = None,
        usage: dict[str, int] | None = None,
    ) -> None:
        """Add a message the service writes outside a run (a workflow that ended after an
        approval tells the thread), between runs of the thread; ``events`` (what led to
        it, from ``started``) are kept as its trace, as a run's are, and ``usage`` (the
        model calls that led to it) joins the thread's. A thread that is not there (deleted
        while the workflow waited) is not told: writing would make it again."""
        started = started or time.time()
        if isinstance(message, AIMessage) and not message.id:
            message = message.model_copy(update={"id": str(uuid.uuid4())})
        async with self.hold(thread_id):
            if not await self._exists(thread_id):
                log.warning("thread.post_skipped", thread_id=thread_id, reason="no such thread")
                return
            written: dict[str, Any] = {"messages": [message]}
            if usage:
                written["usage"] = usage
            await self.graph.aupdate_state(thread_config(thread_id), written)
            await self.books.posted(thread_id)
            if self.traces is None or not events or not isinstance(message, AIMessage):
                return
            run_id = str(uuid.uuid4())
            told = [*events, RunFinished(thread_id, run_id, message)]
            try:
                await self.traces.save(thread_id, run_id, told, started=started)
            except Exception:  # the message is written; a trace lost is not worth failing for
                log.exception("run.trace_not_saved")

    async def _exists(self, thread_id: str) -> bool:
        """Whether the thread is there: its record, or (a thread from before records) its
        state."""
        if self.records is not None and await self.records.get(thread_id) is not None:
            return True
        return bool(await self.state(thread_id))

    async def update(self, thread_id: str, values: dict[str, Any]) -> None:
        """Write ``values`` to the thread's state between runs (an attachment's reference)."""
        async with self.hold(thread_id):
            await self.graph.aupdate_state(thread_config(thread_id), values)

    async def run(
        self,
        thread_id: str,
        messages: Sequence[BaseMessage] | ClientTurn,
        **options: Unpack[RunOptions],
    ) -> RunFinished | RunFailed:
        """Run one turn to the end and return how it ended."""
        last: RunFinished | RunFailed | None = None
        async for event in self.stream(thread_id, messages, **options):
            if isinstance(event, RunFinished | RunFailed):
                last = event
        assert last is not None  # stream() always ends with one of the two
        return last

    async def stream(
        self,
        thread_id: str,
        messages: Sequence[BaseMessage] | ClientTurn,
        **options: Unpack[RunOptions],
    ) -> AsyncIterator[Event]:
        """Run one turn, yielding its events; always ends with RunFinished or RunFailed.

        The run goes on if the caller stops reading (its answer is in the thread). The same
        new message sent while the thread answers it, or a request with the same
        ``idempotency_key`` (while it runs, or up to ten minutes after), joins that run and
        reads its events from the first instead of starting another.

        Args:
            thread_id: The conversation.
            messages: The new messages of this turn, or what a client sent (a ClientTurn:
                which messages are new is decided against the history read for the run);
                ``RESUME`` (none) goes on from the latest checkpoint, a run a crash cut off.
            options: How to run it (``RunOptions``).

        Raises:
            InvalidTurn: before any event, when a ClientTurn has no usable new message.
            NothingToResume: before any event, for ``RESUME`` on a thread with no step left.
        """
        async for event in self.start(thread_id, messages, **options).read():
            yield event

    def start(
        self,
        thread_id: str,
        messages: Sequence[BaseMessage] | ClientTurn,
        **options: Unpack[StartOptions],
    ) -> RunFeed:
        """Start a run (or join the same one under way, as ``stream`` does) and return its
        feed at once: its id, status and events. ``if_busy="reject"``: a thread answering
        another message raises ThreadBusy instead of queueing the run after it."""
        unknown = options.keys() - StartOptions.__optional_keys__
        if unknown:  # a misspelt option would otherwise be dropped without a word
            raise TypeError(f"unknown run option(s) {sorted(unknown)}; see RunOptions")
        idempotency_key = options.get("idempotency_key")
        wanted = turn_fingerprint(messages, options)
        joined = self.kept.joinable(thread_id, wanted, idempotency_key)
        if joined is not None and idempotency_key is not None and wanted != joined.fingerprint:
            raise KeyReused.for_message(idempotency_key, thread_id, joined.run_id)
        if joined is not None:
            # The same message again while it is answered (a client that retried on a
            # timeout): one run, and this request gets its answer too.
            log.info("run.joined", thread_id=thread_id, by_key=idempotency_key is not None)
            return joined
        if self.stopping is not None:
            raise ShuttingDown(
                "This service process is stopping and takes no new runs; send the request "
                "again (another process answers it)."
            )
        if options.get("if_busy", "enqueue") == "reject" and self.busy(thread_id):
            raise busy_error(thread_id)
        ctx = RunContext(
            thread_id=thread_id,
            run_id=options.get("run_id") or str(uuid.uuid4()),
            profile=options.get("profile"),
            target_skill=options.get("skill"),
            target_workflow=options.get("workflow"),
            budget=RunBudget(self.limits),
        )
        feed = RunFeed(wanted, idempotency_key, ctx.run_id, thread_id, self.mirror)
        feed.guard = options.get("guard")
        waits = self.queued is not None and bool(messages) and self.busy(thread_id)
        self.kept.add(feed)
        drive = self._drive(
            ctx,
            messages,
            options.get("callbacks"),
            feed,
            options.get("owner"),
            options.get("agent"),
            options if waits else None,
        )
        self._launch(ctx.run_id, drive)
        return feed

    def resume_held(self, thread_id: str, run_id: str | None = None) -> RunFeed:
        """Resume the thread's run a process left cut off, for a caller that holds the
        thread (``hold``) and waits for this run's end: a run that took the thread after it
        (``resume_cut_off``). ``run_id``: the resumed run's (default: made up)."""
        ctx = RunContext(
            thread_id=thread_id, run_id=run_id or str(uuid.uuid4()), budget=RunBudget(self.limits)
        )
        feed = RunFeed("", None, ctx.run_id, thread_id, self.mirror)
        self.kept.add(feed)
        self._launch(ctx.run_id, self._drive(ctx, RESUME, None, feed, held=True))
        return feed

    def _launch(self, run_id: str, drive: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(drive)
        self._tasks.add(task)
        self._run_tasks[run_id] = task
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _: self._run_tasks.pop(run_id, None))

    def get_run(self, run_id: str) -> RunFeed | None:
        """A run under way, or one that ended less than ``retain_s`` ago, by its id."""
        return self.kept.get(run_id)

    def cancel(self, run_id: str) -> RunFeed | None:
        """Stop a run now: a queued one before it starts, a running one in the step under
        way (a model call is cut off, a side-effecting tool call goes on to its end and is
        recorded for a retry; the steps done are kept, so the history stays valid). None
        for an unknown id."""
        feed = self.get_run(run_id)
        if feed is None or feed.done or feed.cancel_requested:
            return feed  # a second cancel must not cut the first one's bookkeeping short
        feed.request_cancel()
        task = self._run_tasks.get(run_id)
        if task is not None:
            task.cancel()
        log.info("run.cancel_requested", run_id=run_id, queued=feed.started is None)
        return feed

    def stop_run(self, run_id: str) -> None:
        """Cut run ``run_id`` off in the step under way, as a stop does (nobody asked it to
        end: its thread's record stays running, and the thread's next run takes it up)."""
        task = self._run_tasks.get(run_id)
        if task is not None:
            task.cancel()

    def drain(self) -> None:
        """Take no new runs (the process was told to stop); readers of the runs under way
        wake up to see it. The runs go on: ``aclose`` gives them their grace period."""
        if self.stopping is None:
            self.stopping = time.monotonic()
        for feed in self.kept.by_id.values():
            feed.wake()

    async def aclose(self, grace_s: float = 0.0) -> list[str]:
        """Stop: runs under way may end within ``grace_s`` of ``drain``; those still going
        are stopped then, each ending as failed here (elsewhere, with Redis, as under way
        until resumed), their threads' leases released and records left ``running``, so
        another process (or this one's next start) resumes them; a run asked to cancel ends
        as cancelled, its thread idle. Returns the threads of the runs cut off."""
        told = self.stopping  # by a signal (``drain``); otherwise no grace: stop now
        self.drain()
        left = grace_s - (time.monotonic() - told) if told is not None else 0
        if self._tasks and left > 0:
            await asyncio.wait(list(self._tasks), timeout=left)
        cut = [
            thread
            for thread, feeds in self.kept.under_way.items()
            if any(f.started and not f.cancel_requested for f in feeds)  # asked to stop: not cut
        ]
        await self._stop_runs()
        return cut

    async def _stop_runs(self) -> None:
        """Cancel the run tasks, cancelling again those that go on (see ``CUT_WAIT_S``)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if not tasks:
            return
        until = time.monotonic() + STOP_WAIT_S
        await asyncio.wait(tasks, timeout=CUT_WAIT_S)  # then those going are cancelled again
        left = await stop_tasks(tasks, within_s=STOP_WAIT_S - CUT_WAIT_S)
        if left:
            runs = [run for run, task in self._run_tasks.items() if task in left]
            log.error("run.not_stopped", run_ids=runs, waited_s=STOP_WAIT_S)
        # A run cut off again as it let go of its thread: its lease's release goes on.
        await letting_go(until - time.monotonic())

    async def _drive(
        self,
        ctx: RunContext,
        turn: Sequence[BaseMessage] | ClientTurn,
        callbacks: list[BaseCallbackHandler] | None,
        feed: RunFeed,
        owner: str | None = None,
        agent: str | None = None,
        waiting: StartOptions | None = None,
        held: bool = False,
    ) -> None:
        """Run the turn into its feed, whoever reads it (the run goes on without readers);
        ``waiting``: the options of a run that waits for its thread, kept until it ends (a
        process that dies meanwhile leaves it to its next start, which runs it unless its
        turn was stored: ``OrphanRuns``); ``held``: the caller holds the thread for it
        (``resume_held``).

        The run's end is told once the thread is free again: a client that sends its next
        message the moment it reads the answer (to another process, behind a load balancer)
        finds the thread free, rather than waiting out a lease poll."""
        STOP_ASKED.set(lambda: feed.cancel_requested)  # this run's task and those it starts
        joinable = True  # by its key, once ended
        handed_over = False  # cut by a stop once under way: its kept run stays for a start
        keeping: asyncio.Task[None] | None = None
        if waiting is not None and self.queued is not None:
            # Written beside the wait for the thread, not before it: the thread's lock takes
            # its runs in the order they came, and a cancel meanwhile finds the run waiting.
            keeping = asyncio.create_task(self._keep_waiting(ctx, turn, waiting, feed.created))
        try:
            ending: Event | None = None
            lost = feed.lose_thread  # the run is cancelled: see below
            holding = nullcontext() if held else self.hold(ctx.thread_id, feed.in_line, lost)
            async with holding:
                if await self._ended_elsewhere(feed):
                    joinable = False
                    return  # never begun: the thread goes to its next run
                feed.begin()
                try:
                    async for event in self._turns.run(ctx, turn, callbacks, owner, agent, feed):
                        if isinstance(event, RunFinished | RunFailed):
                            ending = event  # the last one
                        else:
                            feed.put(event)
                except asyncio.CancelledError:
                    if feed.cancel_requested:  # asked to stop, then cut by a stop before the
                        # step it was to end at: while the thread is still held, so no process
                        # takes it for a run cut off; its trace kept as it ended (counted
                        # once it is put below).
                        await self.books.settle_cancelled(ctx)
                        await self.books.traced(feed, cancelled(ctx, count=False))
                    raise
                if not ctx.replayed:  # a replayed answer's trace is its first run's
                    await self.books.traced(feed, ending)
            if ending is not None:
                feed.put(ending)
        except (InvalidTurn, NothingToResume, ThreadNotFound, KeyReused) as exc:
            joinable = not isinstance(exc, KeyReused)  # the key is its first turn's still
            feed.close(exc)
        except asyncio.CancelledError:
            if feed.done:  # ended elsewhere before it began, then stopped as it let go
                raise
            if ending is not None:  # stopped as it let go of the thread: the run had ended
                feed.put(ending)
                feed.close()
                raise
            if feed.thread_lost:  # cancelled here: another process took its thread over
                feed.put(RunFailed(ctx.thread_id, ctx.run_id, THREAD_TAKEN_OVER, TAKEN_OVER))
                feed.close()
                return
            if feed.cancel_requested:  # cancelled while queued (it never ran), or cut by a
                feed.put(cancelled(ctx))  # stop before the step it was to end at (settled)
                feed.close()
                return
            message = "The service stopped during the run; the conversation so far is kept."
            if feed.started is None:  # as with Redis (``agents/bus``): its client resends it
                message = NEVER_BEGAN
            elif self.stopping is not None:  # handed over
                handed_over = True
                message += " It is resumed from its last step (by another process, or this "
                message += "one when it starts again): its answer will be in the thread."
                # Elsewhere the run stays under way until the process that resumes it says
                # where it goes on (``FeedMirror.resumed``); readers there wait, then follow.
                feed.mirror = None
            feed.put(RunFailed(ctx.thread_id, ctx.run_id, "run_cancelled", message))
            feed.close()
            raise
        except Exception as exc:  # taking or letting go of the thread failed (its store)
            log.exception("run.hold_failed")
            feed.put(ending if ending is not None else failed(ctx, exc))
            feed.close()
        else:
            if keeping is not None:  # it ended: before it says so, as every ending does here
                await self._forget_kept(ctx.run_id, keeping)
                keeping = None
            feed.close()
        finally:
            feed.in_line.set()  # however it ended: nobody waits for it to be in line
            self.kept.forget(feed, joinable)
            if keeping is not None and not handed_over:  # it ended (or never will begin)
                await self._forget_kept(ctx.run_id, keeping)
