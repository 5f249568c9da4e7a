"""A thread's checkpoints: its history listed, the checkpoint a message was sent from, and
a fork (a new thread from a checkpoint, with its transcript and traces). A base of
``Threads``."""

from __future__ import annotations

import re
from typing import Any

import structlog

from agents.errors import CheckpointNotFound, ThreadBusy, ThreadNotFound
from agents.memory.summaries import summarised_count
from agents.state.migrations import migrate
from agents.state.records import DEFAULT_TITLE, ThreadRecord
from agents.state.steps import history_entry
from agents.threads.records import ThreadRecordsBase, checkpoint_at
from agents.threads.records import new_thread_id as make_thread_id

log = structlog.get_logger("agents.threads")  # the threads' log, as before

TITLE_MAX = 200  # as a title the API takes (``ThreadPatch``)
# A fork's mark: "<title> (fork)", "<title> (edited)", "(edited 2)" when that is taken...
FORK_MARK = re.compile(r" \((?:fork|edited)(?: \d+)?\)$")
TITLES_SEEN = 500  # the owner's newest threads a fork's name is told apart from


class ThreadCheckpoints(ThreadRecordsBase):
    """History, the checkpoint before a message, forks."""

    async def history(
        self, thread_id: str, *, limit: int = 50, before: str | None = None
    ) -> list[dict[str, Any]]:
        """The thread's checkpoints, newest first: id, parent, step, time, the node that
        wrote it, what runs next, the message count and a one-line summary of the change.

        Raises:
            ThreadNotFound: no such thread (none for one made and not used yet).
            CheckpointNotFound: ``before`` names no checkpoint of the thread.
        """
        config: Any = {"configurable": {"thread_id": thread_id}}
        start = checkpoint_at(thread_id, before) if before else None
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
        if not snapshots and before is None and await self.records.get(thread_id) is None:
            raise ThreadNotFound(f"There is no thread {thread_id!r}.")  # else made, unused
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
        title: str | None = None,
        edit: bool = False,
    ) -> ThreadRecord:
        """A new thread whose state is the thread's at ``checkpoint_id``; the original is
        not touched. Forking where an earlier message was sent, then sending an edited
        message to the fork, is how a message is edited. A fork mid-turn has that
        checkpoint's ``next`` steps still to run: resuming the fork runs them.

        The fork is named ``title`` when given, else told apart from its source in a listing:
        ``"<source title> (fork)"``, or ``"(edited)"`` for an ``edit``, numbered (``"(edited
        2)"``...) when the owner has a thread of that name already (see ``fork_title``).

        Raises:
            ThreadNotFound / CheckpointNotFound: nothing to fork from.
            ThreadBusy: ``new_thread_id`` names a thread that exists.
        """
        source = await self.get(thread_id)
        found = await self.saver.aget_tuple(checkpoint_at(thread_id, checkpoint_id))
        if found is None:
            raise CheckpointNotFound(
                f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}; "
                f"GET /v1/threads/{thread_id}/history lists them"
            )
        target = new_thread_id or make_thread_id()
        if await self.records.get(target) is not None or await self.has_state(target):
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
        made = await self.records.create(
            target,
            owner=owner if owner is not None else source.get("owner"),
            title=title.strip() if title else await self.fork_title(source, owner, edit=edit),
            messages=count,
            forked_from={"thread_id": thread_id, "checkpoint_id": checkpoint_id},
        )
        if made is None:  # another caller made a thread of that id meanwhile: never taken
            raise ThreadBusy(f"thread {target!r} exists already", code="thread_exists")
        return made

    async def fork_title(
        self, source: ThreadRecord, owner: str | None = None, *, edit: bool = False
    ) -> str:
        """A fork's default title: its source's, its mark (a fork's or an edit's) taken off,
        then `` (fork)`` or `` (edited)``, or `` (edited 2)``... when one of the owner's
        newest threads (``TITLES_SEEN``) has that name; cut to ``TITLE_MAX`` with its mark
        whole. A source not named yet gives its default title: the fork's first message
        names it, as any thread's."""
        title = source.get("title") or DEFAULT_TITLE
        base = FORK_MARK.sub("", title)
        if not base.strip() or base == DEFAULT_TITLE:
            return DEFAULT_TITLE
        whose = owner if owner is not None else source.get("owner")
        taken = {t.get("title") for t in await self.records.find(owner=whose, limit=TITLES_SEEN)}
        mark = "edited" if edit else "fork"
        n = 1
        while True:
            suffix = f" ({mark})" if n == 1 else f" ({mark} {n})"
            named = base[: TITLE_MAX - len(suffix)].rstrip() + suffix
            if named not in taken:
                return named
            n += 1
