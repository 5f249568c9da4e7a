"""A thread's record and what goes with it: created, made sure of, found, listed, renamed,
deleted (its workflow runs waiting for an approval cancelled; those under way end at their
next step), its summarised messages' originals. The base of ``Threads``, which sets its
parts."""

from __future__ import annotations

import uuid
from typing import Any, Protocol

import structlog
from langchain_core.messages import BaseMessage

from agents.conversations import Conversations
from agents.errors import ThreadBusy, ThreadNotFound
from agents.memory.summaries import summarised_count
from agents.state.attachments import AttachmentStore
from agents.state.records import ThreadRecord, ThreadRecords, title_from
from agents.state.retention import delete_thread
from agents.state.transcript import Transcript

log = structlog.get_logger("agents.threads")  # the threads' log, as before


def new_thread_id() -> str:
    """An id for a thread the client did not name: ``thr_`` and 128 random bits."""
    return f"thr_{uuid.uuid4().hex}"


class WaitingRuns(Protocol):
    """The workflow runs waiting for a decision, by thread (``WorkflowEngine``)."""

    async def approvals_page(
        self, limit: int = ..., after: str | None = ..., thread_id: str | None = ...
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Pending approvals of runs on ``thread_id``, a page at a time, and the next cursor."""
        ...

    async def cancel(self, run_id: str, reason: str) -> dict[str, Any]:
        """End a waiting run without a decision: its approval leaves the inbox."""
        ...


class ThreadRecordsBase:
    """Threads by their records, through the parts ``Threads`` sets."""

    conversations: Conversations
    workflows: WaitingRuns | None
    records: ThreadRecords
    attachments: AttachmentStore
    transcript: Transcript | None
    saver: Any

    async def create(
        self,
        *,
        owner: str | None = None,
        title: str | None = None,
        thread_id: str | None = None,
        agent: str | None = None,
    ) -> ThreadRecord:
        """A new empty thread (its title set now, or from its first message); ``agent``: the
        agent that made it on the owner's behalf."""
        thread_id = thread_id or new_thread_id()
        made = None
        if not await self.exists(thread_id):  # a thread from before records has no record
            made = await self.records.create(thread_id, owner=owner, title=title, agent=agent)
        if made is None:
            raise ThreadBusy(f"thread {thread_id!r} exists already", code="thread_exists")
        return made

    async def ensure(self, thread_id: str, *, owner: str | None, title: str) -> str | None:
        """Make the thread, empty, unless it is there, and return its owner: a workflow run
        started on a new thread is told its outcome there later (a message is never written
        into a thread that is not there, which a deleted one is not). Made while holding the
        thread (every process): of two callers naming one new id at once, one makes it and
        the other finds it made, with its owner, rather than both writing the record."""
        if not await self.exists(thread_id):
            async with self.conversations.hold(thread_id):
                made = not await self.exists(thread_id) and await self.records.create(
                    thread_id, owner=owner, title=title
                )
                if made:
                    return owner
        record = await self.records.get(thread_id)  # made by another caller meanwhile
        return record.get("owner") if record is not None else None

    async def get(self, thread_id: str) -> ThreadRecord:
        """A thread's record (made up from its state for a thread from before records).

        Raises:
            ThreadNotFound: no record and no state.
        """
        record = await self.records.get(thread_id)
        if record is not None:
            return record
        values = await self.conversations.state(thread_id)
        if not values:
            raise ThreadNotFound(f"There is no thread {thread_id!r}.")
        messages = values.get("messages", [])
        first = next((m for m in messages if m.type == "human"), None)
        made = await self.records.create(
            thread_id,
            title=title_from(first.text if first is not None else ""),
            messages=len(messages) + summarised_count(values.get("summary")),
        )
        return made or await self.get(thread_id)  # or made meanwhile: that one

    async def find(self, *, owner: str | None = None, limit: int = 20) -> list[ThreadRecord]:
        """The ``limit`` threads updated last, newest first, of one owner when given."""
        return await self.records.find(owner=owner, limit=limit)

    async def page(
        self, *, owner: str | None = None, limit: int = 20, after: str | None = None
    ) -> tuple[list[ThreadRecord], str | None]:
        """A page of threads newest first, from the cursor ``after`` on, and the next
        page's cursor (``ThreadRecords.page``)."""
        return await self.records.page(owner=owner, limit=limit, after=after)

    async def rename(self, thread_id: str, title: str) -> ThreadRecord:
        """Give a thread a title of the user's."""
        await self.get(thread_id)
        updated = await self.records.update(thread_id, title=title.strip())
        assert updated is not None
        return updated

    async def delete(self, thread_id: str) -> None:
        """Delete the thread: checkpoints, writes, journalled calls, record, attachments,
        the examples routing learned from it, and the approvals its workflow runs wait for
        (the runs are cancelled; a workflow run under way on it ends cancelled at its next
        step: ``WorkflowEngine.watch_threads``). A record that says running with no process
        running it (the run cut off) does not keep it.

        Raises:
            ThreadNotFound: no such thread.
            ThreadBusy: a run of the thread is under way (in any process).
        """
        await self.get(thread_id)
        if await self.conversations.busy_anywhere(thread_id):
            raise ThreadBusy(f"thread {thread_id!r} is answering a message; delete it after")
        async with self.conversations.hold(thread_id):
            await self._delete(thread_id)

    async def _delete(self, thread_id: str) -> None:
        await delete_thread(self.saver, thread_id)
        await self.attachments.delete_thread(thread_id)
        if self.transcript is not None:
            await self.transcript.delete_thread(thread_id)
        await self.records.delete(thread_id)
        if self.conversations.traces is not None:
            await self.conversations.traces.delete_thread(thread_id)
        if self.conversations.learner is not None:  # users' words go with their thread
            await self.conversations.learner.forget_thread(thread_id)
        if self.conversations.queued is not None:  # messages that waited when a process died
            await self.conversations.queued.forget_thread(thread_id)
        # Once it is gone: a run that comes to wait meanwhile is found here, or finds its
        # thread gone itself (``RunDriver``).
        await self._cancel_waiting(thread_id)
        self.conversations.kept.forget_thread(thread_id)  # its ended runs, kept for a while
        log.info("thread.deleted", thread_id=thread_id)

    async def _cancel_waiting(self, thread_id: str) -> None:
        """Cancel the thread's runs waiting for an approval: a decision would resume a run
        whose thread is gone, and the inbox would keep asking for it."""
        if self.workflows is None:
            return
        after: str | None = None
        while True:
            pending, after = await self.workflows.approvals_page(500, after, thread_id)
            for approval in pending:
                await self.workflows.cancel(approval["run_id"], "its thread was deleted")
            if after is None:
                break

    async def summarised(self, thread_id: str, count: int) -> list[tuple[int, BaseMessage]]:
        """The originals of the thread's first ``count`` messages, which a summary took out
        of its active history, with their indices (those summarised before originals were
        kept are not there)."""
        if self.transcript is None or not count:
            return []
        return await self.transcript.read(thread_id, below=count)

    async def exists(self, thread_id: str) -> bool:
        """Whether the thread has a record or any checkpoint."""
        return await self.records.get(thread_id) is not None or await self.has_state(thread_id)

    async def has_state(self, thread_id: str) -> bool:
        """Whether the thread has any checkpoint."""
        return await self.saver.aget_tuple(checkpoint_at(thread_id)) is not None


def checkpoint_at(thread_id: str, checkpoint_id: str | None = None) -> Any:
    configurable = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}
