"""Threads as users and operators see them: listed, created, renamed, deleted, branched,
their checkpoints listed, their files attached, their storage kept bounded (retention).

Runs (a message, a resume) go through ``Conversations``; this is what happens around them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog
from langchain_core.messages import BaseMessage

from agents.conversations import Conversations
from agents.errors import CheckpointNotFound, ThreadBusy, ThreadNotFound
from agents.memory.summaries import summarised_count
from agents.orphans import OrphanRuns
from agents.state.attachments import AttachmentStore
from agents.state.migrations import migrate
from agents.state.records import ThreadRecord, ThreadRecords, title_from
from agents.state.retention import delete_thread, prune_thread, thread_bytes
from agents.state.schema import Attachment
from agents.state.steps import history_entry
from agents.state.transcript import Transcript

log = structlog.get_logger(__name__)


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


@dataclass
class PruneReport:
    """What one pass of retention did (or, dry, would do)."""

    dry_run: bool
    threads_deleted: list[str] = field(default_factory=list)
    checkpoints_deleted: int = 0
    summarised_deleted: int = 0  # originals of summarised messages (not counted dry)
    threads_pruned: int = 0
    skipped_busy: list[str] = field(default_factory=list)


class Threads:
    """The threads of one service; ``workflows``: the runs started from them that wait for
    an approval, cancelled when their thread is deleted."""

    def __init__(
        self,
        conversations: Conversations,
        records: ThreadRecords,
        attachments: AttachmentStore,
        retention: RetentionOptions | None = None,
        *,
        transcript: Transcript | None = None,
        workflows: WaitingRuns | None = None,
    ) -> None:
        self.conversations = conversations
        self.workflows = workflows
        self.records = records
        self.attachments = attachments
        self.retention = retention or RetentionOptions()
        self.transcript = transcript
        self.saver: Any = conversations.graph.checkpointer
        self.orphans = OrphanRuns(conversations, records)

    # Records.

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
        thread_id = thread_id or f"thr_{uuid.uuid4().hex}"
        if await self.exists(thread_id):
            raise ThreadBusy(f"thread {thread_id!r} exists already", code="thread_exists")
        return await self.records.create(thread_id, owner=owner, title=title, agent=agent)

    async def ensure(self, thread_id: str, *, owner: str | None, title: str) -> str | None:
        """Make the thread, empty, unless it is there, and return its owner: a workflow run
        started on a new thread is told its outcome there later (a message is never written
        into a thread that is not there, which a deleted one is not). Made while holding the
        thread (every process): of two callers naming one new id at once, one makes it and
        the other finds it made, with its owner, rather than both writing the record."""
        if not await self.exists(thread_id):
            async with self.conversations.hold(thread_id):
                if not await self.exists(thread_id):
                    await self.records.create(thread_id, owner=owner, title=title)
                    return owner
        record = await self.records.get(thread_id)
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
        return await self.records.create(
            thread_id,
            title=title_from(first.text if first is not None else ""),
            messages=len(messages) + summarised_count(values.get("summary")),
        )

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
        (the runs are cancelled).

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
        await self._cancel_waiting(thread_id)
        await delete_thread(self.saver, thread_id)
        await self.attachments.delete_thread(thread_id)
        if self.transcript is not None:
            await self.transcript.delete_thread(thread_id)
        await self.records.delete(thread_id)
        if self.conversations.traces is not None:
            await self.conversations.traces.delete_thread(thread_id)
        if self.conversations.learner is not None:  # users' words go with their thread
            await self.conversations.learner.forget_thread(thread_id)
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

    # Checkpoints.

    async def history(
        self, thread_id: str, *, limit: int = 50, before: str | None = None
    ) -> list[dict[str, Any]]:
        """The thread's checkpoints, newest first: id, parent, step, time, the node that
        wrote it, what runs next, the message count and a one-line summary of the change.

        Raises:
            ThreadNotFound: the thread has no checkpoints.
            CheckpointNotFound: ``before`` names no checkpoint of the thread.
        """
        config: Any = {"configurable": {"thread_id": thread_id}}
        start = _at(thread_id, before) if before else None
        if start is not None and await self.saver.aget_tuple(start) is None:
            raise CheckpointNotFound(
                f"thread {thread_id!r} has no checkpoint {before!r} to page before (pruned, or "
                f"never its); GET /v1/threads/{thread_id}/history starts from the newest",
                param="before",
            )
        snapshots = [
            s
            async for s in self.conversations.graph.aget_state_history(
                config, before=start, limit=limit + 1
            )
        ]
        if not snapshots and before is None:
            raise ThreadNotFound(f"There is no thread {thread_id!r}.")
        entries = []
        for i, snap in enumerate(snapshots[:limit]):
            parent = snapshots[i + 1] if i + 1 < len(snapshots) else None
            entries.append(history_entry(snap, parent))
        return entries

    async def checkpoint_before(self, thread_id: str, index: int) -> str:
        """The checkpoint from which the thread's message ``index`` (from 0, summarised
        messages counted) was sent: the end of the turn before it. Forking there and sending
        another message edits that one.

        Raises:
            ThreadNotFound: no such thread.
            CheckpointNotFound: no turn ended with ``index`` messages (the message is not a
                user's that opened a turn, or retention removed that checkpoint).
        """
        await self.get(thread_id)
        config: Any = {"configurable": {"thread_id": thread_id}}
        async for snap in self.conversations.graph.aget_state_history(config):
            values = migrate(dict(snap.values))[0] if snap.values else {}
            count = len(values.get("messages", [])) + summarised_count(values.get("summary"))
            if count == index and not snap.next:
                return str(snap.config["configurable"]["checkpoint_id"])
            if count < index:
                break  # newest first: the count only falls from here
        first = " (to change the first message, start a new thread)" if index == 0 else ""
        raise CheckpointNotFound(
            f"no turn of thread {thread_id!r} ended with {index} messages: message {index} "
            f"is not a user's message that opened a turn, or retention removed the "
            f"checkpoint before it{first}; GET /v1/threads/{thread_id}/history lists those kept"
        )

    async def fork(
        self,
        thread_id: str,
        checkpoint_id: str,
        *,
        new_thread_id: str | None = None,
        owner: str | None = None,
    ) -> ThreadRecord:
        """A new thread whose state is the thread's at ``checkpoint_id``; the original is
        not touched. Forking where an earlier message was sent, then sending an edited
        message to the fork, is how a message is edited. A fork mid-turn has that
        checkpoint's ``next`` steps still to run: resuming the fork runs them.

        Raises:
            ThreadNotFound / CheckpointNotFound: nothing to fork from.
            ThreadBusy: ``new_thread_id`` names a thread that exists.
        """
        source = await self.get(thread_id)
        found = await self.saver.aget_tuple(_at(thread_id, checkpoint_id))
        if found is None:
            raise CheckpointNotFound(
                f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}; "
                f"GET /v1/threads/{thread_id}/history lists them"
            )
        target = new_thread_id or f"thr_{uuid.uuid4().hex}"
        if await self.records.get(target) is not None or await self._has_state(target):
            raise ThreadBusy(f"thread {target!r} exists already", code="thread_exists")
        checkpoint = dict(found.checkpoint)
        metadata = {
            **found.metadata,
            "source": "fork",
            "forked_from": {"thread_id": thread_id, "checkpoint_id": checkpoint_id},
        }
        config: Any = {"configurable": {"thread_id": target, "checkpoint_ns": ""}}
        # The checkpoint alone, not its pending writes: those are what its next steps wrote
        # in the original (a mid-turn checkpoint's answer). As LangGraph's time travel does,
        # the fork runs those steps again (resume), or a new message starts from it.
        await self.saver.aput(config, checkpoint, metadata, dict(checkpoint["channel_versions"]))
        values = await self.conversations.state(target)
        summarised = summarised_count(values.get("summary"))
        if self.transcript is not None and summarised:
            await self.transcript.copy(thread_id, target, below=summarised)
        messages = [
            *(m for _, m in await self.summarised(target, summarised)),
            *values.get("messages", []),
        ]
        if self.conversations.traces is not None:  # its answers unfold as the original's do
            try:
                ids = [m.id for m in messages if m.id]
                await self.conversations.traces.copy(thread_id, target, ids)
            except Exception:  # the fork stands; its answers just do not unfold
                log.exception("thread.traces_not_copied", thread_id=thread_id, fork=target)
        count = len(values.get("messages", [])) + summarised
        log.info("thread.forked", thread_id=thread_id, checkpoint_id=checkpoint_id, fork=target)
        return await self.records.create(
            target,
            owner=owner if owner is not None else source.get("owner"),
            title=source.get("title"),
            messages=count,
            forked_from={"thread_id": thread_id, "checkpoint_id": checkpoint_id},
        )

    async def exists(self, thread_id: str) -> bool:
        """Whether the thread has a record or any checkpoint."""
        return await self.records.get(thread_id) is not None or await self._has_state(thread_id)

    async def _has_state(self, thread_id: str) -> bool:
        return await self.saver.aget_tuple(_at(thread_id)) is not None

    # Attachments.

    async def attach(
        self,
        thread_id: str,
        *,
        name: str,
        media_type: str,
        chunks: AsyncIterator[bytes],
        caption: str = "",
    ) -> Attachment:
        """Store an uploaded file and put its reference in the thread's state.

        Raises:
            ThreadNotFound: no such thread.
            AttachmentRejected: too large, a type not accepted, or not what it says.
        """
        await self.get(thread_id)
        attachment = await self.attachments.save(
            thread_id, name=name, media_type=media_type, chunks=chunks, caption=caption
        )
        await self.conversations.update(thread_id, {"attachments": [attachment]})
        await self.records.update(thread_id)
        return attachment

    # Retention.

    async def prune(self, *, dry_run: bool = False, now: float | None = None) -> PruneReport:
        """Apply the retention policy once: delete idle threads, prune old checkpoints."""
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
        log.info(
            "retention.applied",
            dry_run=dry_run,
            threads_deleted=len(report.threads_deleted),
            checkpoints_deleted=report.checkpoints_deleted,
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


def _at(thread_id: str, checkpoint_id: str | None = None) -> Any:
    configurable = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}
