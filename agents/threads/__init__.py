"""Threads as users and operators see them: listed, created, renamed, deleted, branched,
their checkpoints listed, their files attached, their storage kept bounded (retention).

Runs (a message, a resume) go through ``Conversations``; this is what happens around them.

``Threads`` is built here, on its parts: ``records.py`` (records, delete), ``checkpoints.py``
(history, fork), ``retention.py`` (the policy and its passes); attachments here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from agents.conversations import Conversations
from agents.orphans import OrphanRuns
from agents.state.attachments import AttachmentStore
from agents.state.records import ThreadRecords
from agents.state.schema import Attachment
from agents.state.transcript import Transcript
from agents.threads.checkpoints import ThreadCheckpoints
from agents.threads.records import WaitingRuns
from agents.threads.retention import PruneReport, RetentionOptions, ThreadRetention

__all__ = ["PruneReport", "RetentionOptions", "Threads", "WaitingRuns"]


class Threads(ThreadCheckpoints, ThreadRetention):
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
        # A run that takes a thread a dead process left cut off resumes that run first.
        conversations.resume_cut_off = self.orphans.resume_held

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
