"""One turn through the conversation graph: the thread read once, the new messages taken, the
history repaired, the graph's steps streamed as events, then how the run ended."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, cast

import structlog
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import StateSnapshot

from agents import failpoints
from agents.bookkeeping import UNREAD, RunBooks, Unread
from agents.endings import cancelled, failed, finished, graph_event
from agents.errors import InvalidTurn, KeyReused, NothingToResume, ThreadNotFound
from agents.events import Event, RunFinished
from agents.feed import RunFeed, fingerprint
from agents.replies import forget_all
from agents.router.router import Router
from agents.run import RunContext, thread_config
from agents.state.leases import this_process
from agents.state.migrations import migrate
from agents.state.readonce import ReadOnce
from agents.state.records import ThreadRecord, ThreadRecords
from agents.state.schema import SCHEMA_VERSION, add_usage, usage_since
from agents.turn_keys import KeyedTurn, answer_to, ask_digest, keyed_turn
from agents.turns import (
    ClientTurn,
    last_user_text,
    new_turn,
    repairs,
    turn_id,
    unless_retried,
    with_ids,
)

log = structlog.get_logger(__name__)


class TurnRunner:
    """Runs one turn of a thread on the graph (the caller holds the thread)."""

    def __init__(
        self,
        graph: CompiledStateGraph[Any, Any, Any, Any],
        router: Router | None,
        records: ThreadRecords | None,
        books: RunBooks,
    ) -> None:
        self.graph = graph
        self.router = router
        self.records = records
        self.books = books
        # Resumes a run another process left cut off on the thread, before this turn
        # (``Conversations._cut_off_first``); whether it did.
        self.cut_off: Callable[[RunContext], Awaitable[bool]] | None = None

    async def run(
        self,
        ctx: RunContext,
        turn: Sequence[BaseMessage] | ClientTurn,
        callbacks: list[BaseCallbackHandler] | None,
        owner: str | None = None,
        agent: str | None = None,
        feed: RunFeed | None = None,
    ) -> AsyncIterator[Event]:
        """The run's steps: read the thread, take the new messages, repair the history,
        stream the graph, then report how it ended; every failure ends as RunFailed."""
        structlog.contextvars.bind_contextvars(thread_id=ctx.thread_id, run_id=ctx.run_id)
        resuming = not isinstance(turn, ClientTurn) and not turn
        saver = self.graph.checkpointer
        once = saver if isinstance(saver, ReadOnce) else None
        try:
            if self.router is not None and not resuming:  # overlaps the reads and writes
                self.router.anticipate(last_user_text(turn), ctx)
            key = feed.key if feed is not None else None
            record: ThreadRecord | Unread | None = UNREAD
            if feed is not None and (feed.guard is not None or key) and self.records is not None:
                record = await self.records.get(ctx.thread_id)
                if (
                    feed.guard is not None
                    and record is not None
                    and record.get("owner") != feed.guard
                ):
                    raise ThreadNotFound(f"There is no thread {ctx.thread_id!r}.")
            # One read of the thread before the run and none after: the run's last values are
            # the thread's state (each read deserialises the whole history). The graph's own
            # read when it starts gets this one (``ReadOnce``) unless the thread is written
            # in between.
            if once is not None:
                once.keep_next_read(ctx.thread_id)
            snapshot = await self.graph.aget_state(thread_config(ctx.thread_id))
            # Steps left to run: a run cut off (its process killed), or one waiting for an
            # approval. The first is resumed before this turn, which reads the thread after.
            taker = None if resuming or not snapshot.next else self.cut_off
            if taker is not None and await taker(ctx):
                if once is not None:
                    once.keep_next_read(ctx.thread_id)
                snapshot = await self.graph.aget_state(thread_config(ctx.thread_id))
            values, upgrade = migrate(dict(snapshot.values)) if snapshot.values else ({}, {})
            history = list(values.get("messages", []))
            before = dict(values.get("usage", {}))
            if not resuming:  # the writes of tasks a stopped run finished are not taken up
                before = usage_since(before, _pending_usage(snapshot))
            run_input: dict[str, Any] | None
            if resuming:
                if not snapshot.next:
                    raise NothingToResume(
                        f"thread {ctx.thread_id!r} has no unfinished run to resume; "
                        "send a message to go on"
                    )
                log.info("run.resumed", next=list(snapshot.next))
                ctx.resumed = True
                if self.records is not None:  # the run under way is this one now
                    await self.records.update(
                        ctx.thread_id, status="running", run_id=ctx.run_id, process=this_process()
                    )
                if feed is not None:  # the client resending its message joins this run
                    asked = next(
                        (m for m in reversed(history) if isinstance(m, HumanMessage)), None
                    )
                    feed.fingerprint = fingerprint(asked.content) if asked is not None else ""
                    feed.resumed = True
                ctx.turn_id = turn_id(history, [])  # the same keys for its side effects
                ctx.again = True
                run_input = None
            else:
                messages = (
                    new_turn(turn.messages, has_history=bool(history))
                    if isinstance(turn, ClientTurn)
                    else list(turn)
                )
                log.info("run.started", new_messages=len(messages), profile=ctx.profile)
                fixes = repairs(history)
                if fixes:
                    await self.graph.aupdate_state(
                        thread_config(ctx.thread_id), {"messages": fixes}
                    )
                known = None if record is UNREAD else record
                keyed = keyed_turn(known, key) if key is not None else None
                if keyed is not None and feed is not None:
                    # The key's turn began before this process's memory of its runs (a
                    # restart): answered from the thread, or, without an answer yet, again.
                    if keyed.fingerprint != ask_digest(feed.fingerprint):
                        raise KeyReused.for_message(key or "", ctx.thread_id, keyed.run_id)
                    answer = answer_to(history, keyed.turn_id)
                    if answer is not None:
                        log.info("run.replayed", turn_id=keyed.turn_id, first_run=keyed.run_id)
                        ctx.replayed = True
                        yield RunFinished(ctx.thread_id, ctx.run_id, answer)
                        return
                    asked_last = next((m for m in reversed(history) if m.type == "human"), None)
                    if asked_last is not None and asked_last.id != keyed.turn_id:
                        # Its turn ended with no answer the thread shows (it failed, or was
                        # summarised away) and others came after: answered again, it would be
                        # a new turn making its side effects again.
                        raise KeyReused(
                            f"Idempotency-Key {key!r} began a turn of thread "
                            f"{ctx.thread_id!r} (run {keyed.run_id}) that has ended, and the "
                            "thread has gone on since; send the message again with a new key"
                        )
                new = unless_retried(history, with_ids(messages))
                ctx.turn_id = turn_id(history, new)
                ctx.again = bool(messages) and not new  # resent: answered from its start
                began = None
                if key is not None and feed is not None:  # the turn this key answers now
                    first_run = keyed.run_id if keyed is not None else ctx.run_id
                    began = (key, KeyedTurn(ctx.turn_id, ask_digest(feed.fingerprint), first_run))
                await self.books.opened(
                    ctx.thread_id,
                    ctx.run_id,
                    history,
                    new,
                    owner,
                    agent,
                    keyed=began,
                    record=record,
                )
                if failpoints.armed("turn.opened"):  # its record written, its turn not yet
                    failpoints.hit("turn.opened", last_user_text(messages))
                run_input = {**upgrade, "messages": new, "schema_version": SCHEMA_VERSION}
            steps = self.graph.astream(
                run_input,
                thread_config(ctx.thread_id, run_id=ctx.run_id, callbacks=callbacks),
                context=ctx,
                stream_mode=["custom", "values"],
            )
            try:
                async for mode, payload in steps:
                    if mode == "values":
                        values = cast(dict[str, Any], payload)
                        if feed is not None and feed.cancel_requested:
                            break  # at a step's end: the steps so far are checkpointed
                    elif (event := graph_event(mode, payload)) is not None:
                        yield event
            finally:
                await cast(Any, steps).aclose()
        except (InvalidTurn, NothingToResume, ThreadNotFound, KeyReused):
            raise  # before any event: the caller answers it as a bad request
        except Exception as exc:
            await self.books.closed(ctx, None, failed=True)
            yield failed(ctx, exc)
            return
        finally:
            if once is not None:
                once.forget(ctx.thread_id)
        values = await self.books.closed(ctx, values, failed=False)
        if feed is not None and feed.cancel_requested:
            log.info("run.cancelled")
            yield cancelled(ctx)
            return
        await forget_all(ctx.recorded)  # a message sent from now on is a new turn
        yield finished(ctx, values, before)


def _pending_usage(snapshot: StateSnapshot) -> dict[str, int]:
    """What the tasks of the thread's last step that finished before their run stopped
    used: the state read counts it, a run with new input starts without it."""
    used: dict[str, int] = {}
    for task in snapshot.tasks:
        written = task.result.get("usage") if isinstance(task.result, dict) else None
        if isinstance(written, dict):  # one write, or several as {"$writes": [...]}
            for one in written.get("$writes", [written]):
                used = add_usage(used, one)
    return used
