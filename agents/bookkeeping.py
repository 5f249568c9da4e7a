"""A thread's record kept with its runs: under way when one starts, how it ended after, the
files its skills made, and what the router learns from it."""

from __future__ import annotations

from enum import Enum
from typing import Any

import structlog
from langchain_core.messages import BaseMessage
from langgraph.graph.state import CompiledStateGraph

from agents.events import Event, RunFailed
from agents.feed import RunFeed
from agents.memory.summaries import summarised_count
from agents.router.learned import LearnedExamples
from agents.run import RunContext, thread_config
from agents.state.attachments import AttachmentStore
from agents.state.leases import this_process
from agents.state.migrations import migrate
from agents.state.records import ThreadRecord, ThreadRecords, title_from
from agents.state.traces import RunTraces
from agents.turn_keys import KeyedTurn, with_key
from agents.turns import last_user_text

log = structlog.get_logger(__name__)


class Unread(Enum):
    """``opened``'s record, not read by its caller."""

    UNREAD = "unread"


UNREAD = Unread.UNREAD


class RunBooks:
    """What a run writes beside its checkpoints (``Conversations`` calls it at a run's start
    and end). Each part is optional: a bare graph keeps no records."""

    def __init__(
        self,
        graph: CompiledStateGraph[Any, Any, Any, Any],
        records: ThreadRecords | None = None,
        attachments: AttachmentStore | None = None,
        learner: LearnedExamples | None = None,
        traces: RunTraces | None = None,
    ) -> None:
        self.graph = graph
        self.records = records
        self.attachments = attachments
        self.learner = learner
        self.traces = traces

    async def settle_cancelled(self, ctx: RunContext) -> None:
        """A run asked to stop that a stop cut off before it could (the caller still holds
        the thread): its record says the thread is idle, so no process resumes it (the steps
        it finished are kept)."""
        if self.records is None:
            return
        try:
            record = await self.records.get(ctx.thread_id)
            if record is not None and record.get("run_id") in (ctx.run_id, None):
                await self.records.update(ctx.thread_id, status="idle")  # not a later run's
        except Exception:  # then it is resumed, as a run cut off is: logged, not raised
            log.exception("run.cancel_not_recorded")

    async def opened(
        self,
        thread_id: str,
        run_id: str,
        history: list[BaseMessage],
        new: list[BaseMessage],
        owner: str | None,
        agent: str | None = None,
        keyed: tuple[str, KeyedTurn] | None = None,
        record: ThreadRecord | Unread | None = UNREAD,
    ) -> None:
        """The thread's record says a run is under way, which, and in which process (a process
        that dies leaves it so, and the next one resumes it: ``OrphanRuns.resume``; one beside
        it on SQLite sees the thread busy while that process runs: ``process_running``); a
        thread's first message gives it its record and title (no model call). ``keyed``: the
        client's Idempotency-Key and the turn it begins, kept with the record (``turn_keys``);
        ``record``: the record as the caller just read it (read here otherwise)."""
        if self.records is None:
            return
        if record is UNREAD:
            record = await self.records.get(thread_id)
        keys: dict[str, Any] = {"keys": with_key(record, keyed[0], keyed[1])} if keyed else {}
        if record is not None:  # created empty (POST /v1/threads): named by its first message
            naming = None if history else title_from(last_user_text(new))
            running = {"status": "running", "run_id": run_id, "process": this_process()}
            # Merged into the record as stored when written, not as read: a title set since
            # the read (PATCH, through any process) stays.
            updated = await self.records.update(
                thread_id, title_if_untitled=naming, **running, **keys
            )
            if updated is not None:
                return
        first = next((m for m in history if m.type == "human"), None)  # a thread from before
        title = title_from(first.text if first is not None else last_user_text(new))
        made = await self.records.create(
            thread_id,
            owner=owner,
            title=title,
            status="running",
            agent=agent,
            run_id=run_id,
            process=this_process(),
            keys=keys.get("keys"),
        )
        if made is None:  # made meanwhile (a request claimed it): this run is under way there
            running = {"status": "running", "run_id": run_id, "process": this_process()}
            await self.records.update(thread_id, **running, **keys)

    async def closed(
        self, ctx: RunContext, values: dict[str, Any] | None, *, failed: bool
    ) -> dict[str, Any]:
        """After the run: files its skills made become the thread's attachments (their
        references in state), the thread's record says how the run ended, and a turn whose
        skill the model chose teaches the router an example."""
        values = dict(values or {})
        try:
            # Files the run's skills made (or a run a crash cut off made: a resumed run looks).
            look = ctx.resumed or (
                self.attachments is not None and self.attachments.fresh(ctx.thread_id)
            )
            if self.attachments is not None and not failed and look:
                known = {a.get("id") for a in values.get("attachments", [])}
                made = [
                    a
                    for a in await self.attachments.of_thread(ctx.thread_id)
                    if a.get("kind") == "generated" and a.get("id") not in known
                ]
                if made:
                    await self.graph.aupdate_state(
                        thread_config(ctx.thread_id), {"attachments": made}
                    )
                    values["attachments"] = [*values.get("attachments", []), *made]
            if self.records is not None:
                changes: dict[str, Any] = {"status": "failed" if failed else "idle"}
                if failed:
                    # The thread keeps what was written before the failure (the user's
                    # message at least), counted as stored; a store that cannot tell now
                    # leaves the count, never the status (a record left "running" would be
                    # resumed as an orphan).
                    try:
                        changes["messages"] = await self._stored_count(ctx.thread_id)
                    except Exception as exc:
                        log.warning("run.count_unread", error=f"{type(exc).__name__}: {exc}")
                else:
                    changes["messages"] = count = _count(values)
                if await self.records.update(ctx.thread_id, **changes) is None and not failed:
                    first = next((m for m in values.get("messages", []) if m.type == "human"), None)
                    title = title_from(first.text if first is not None else "")
                    await self.records.create(ctx.thread_id, title=title, messages=count)
            if self.learner is not None and not failed:
                await self.learner.after_turn(ctx.thread_id, ctx.run_id, values)
        except Exception:  # bookkeeping must not fail a run whose answer is written
            log.exception("run.bookkeeping_failed")
        return values

    async def posted(self, thread_id: str) -> None:
        """A message written outside a run (``Conversations.post``, the caller holding the
        thread): the thread's record counts it and moves up, as after a turn."""
        if self.records is None:
            return
        try:
            await self.records.update(thread_id, messages=await self._stored_count(thread_id))
        except Exception:  # the message is written; the listing catches up at the next turn
            log.exception("thread.record_not_updated", thread_id=thread_id)

    async def _stored_count(self, thread_id: str) -> int:
        """How many messages the thread holds as stored (the summarised ones included)."""
        snapshot = await self.graph.aget_state(thread_config(thread_id))
        return _count(migrate(dict(snapshot.values))[0] if snapshot.values else {})

    async def traced(self, feed: RunFeed, ending: Event | None) -> None:
        """Keep the run's trace, ``ending`` its last event (before the feed tells the end: a
        client that saw the end finds it)."""
        if self.traces is None:
            return
        events = [*feed.events, ending] if ending is not None else feed.events
        try:
            after = None
            if isinstance(ending, RunFailed):  # shown after the thread's last message
                snapshot = await self.graph.aget_state(thread_config(feed.thread_id))
                values = migrate(dict(snapshot.values))[0] if snapshot.values else {}
                messages = values.get("messages") or [None]
                after = getattr(messages[-1], "id", None)
            await self.traces.save(
                feed.thread_id, feed.run_id, events, started=feed.started, after=after
            )
        except Exception:  # the answer is written; a trace lost is not worth failing for
            log.exception("run.trace_not_saved")


def _count(values: dict[str, Any]) -> int:
    """The messages of a thread's state, the summarised ones included."""
    return len(values.get("messages", [])) + summarised_count(values.get("summary"))
