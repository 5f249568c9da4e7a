"""Thread records: one small row per conversation (owner, title, times, status, message
count) in the documents table beside the checkpoints, so a user's threads are listed
newest first without reading a single checkpoint."""

from __future__ import annotations

import re
import time
from typing import Any, Literal, TypedDict

from agents.state.documents import Documents

THREAD = "thread"
TITLE_CHARS = 60

ThreadStatus = Literal["idle", "running", "failed"]


class ThreadRecord(TypedDict, total=False):
    """What a listing shows of a thread."""

    thread_id: str
    owner: str | None
    title: str
    created: float
    updated: float
    status: ThreadStatus
    messages: int
    forked_from: dict[str, str] | None
    agent: str | None  # the agent that acts for the owner (on-behalf-of), if one made it
    run_id: str  # the run under way (status ``running``), for the process that resumes it
    process: str  # the process running it (``leases.this_process``), seen from the others
    keys: list[list[Any]]  # the clients' last Idempotency-Keys and their turns (``turn_keys``)


DEFAULT_TITLE = "New conversation"  # a thread's until its first message names it


def title_from(text: str) -> str:
    """A title from the first message (no model call): its first line, whitespace
    collapsed, cut at a word boundary to about 60 characters."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    # One line of text: control characters (an escape, a NUL) become spaces, as line breaks.
    line = re.sub(r"[\s\x00-\x1f\x7f-\x9f]+", " ", first).strip()
    if len(line) <= TITLE_CHARS:
        return line or DEFAULT_TITLE
    cut = line[:TITLE_CHARS].rsplit(" ", 1)[0]
    return (cut if len(cut) >= TITLE_CHARS // 2 else line[:TITLE_CHARS]).rstrip(" ,.;:") + "…"


class ThreadRecords:
    """The thread records of one store."""

    def __init__(self, documents: Documents) -> None:
        self.documents = documents

    async def get(self, thread_id: str) -> ThreadRecord | None:
        """One thread's record, or None."""
        found = await self.documents.get(THREAD, thread_id)
        return ThreadRecord(**found) if found is not None else None  # type: ignore[typeddict-item]

    async def create(
        self,
        thread_id: str,
        *,
        owner: str | None = None,
        title: str | None = None,
        messages: int = 0,
        status: ThreadStatus = "idle",
        forked_from: dict[str, str] | None = None,
        agent: str | None = None,
        run_id: str | None = None,
        process: str | None = None,
        keys: list[list[Any]] | None = None,
    ) -> ThreadRecord | None:
        """Write a new thread's record unless the thread has one (at once: of callers making
        one thread, one does: a record is never written over); None when it has one."""
        now = time.time()
        record = ThreadRecord(
            thread_id=thread_id,
            owner=owner,
            title=title or DEFAULT_TITLE,
            created=now,
            updated=now,
            status=status,
            messages=messages,
            forked_from=forked_from,
        )
        if agent is not None:
            record["agent"] = agent
        if run_id is not None:
            record["run_id"] = run_id
        if process is not None:
            record["process"] = process
        if keys:
            record["keys"] = keys
        index = {"owner": owner, "status": status, "updated": now}
        if not await self.documents.add(THREAD, thread_id, dict(record), **index):
            return None
        return record

    async def update(
        self, thread_id: str, *, title_if_untitled: str | None = None, **changes: Any
    ) -> ThreadRecord | None:
        """Change a record's fields (``updated`` set to now); None when there is none.
        ``title_if_untitled``: its title, unless it has one other than the default as it is
        stored when written (a title a user set meanwhile stays)."""
        changes["updated"] = time.time()

        def change(stored: dict[str, Any]) -> dict[str, Any]:
            if title_if_untitled is None or stored.get("title") not in (None, "", DEFAULT_TITLE):
                return changes
            return {**changes, "title": title_if_untitled}

        found = await self.documents.merge(THREAD, thread_id, change)
        return ThreadRecord(**found) if found is not None else None  # type: ignore[typeddict-item]

    async def find(
        self, *, owner: str | None = None, limit: int = 20, before: float | None = None
    ) -> list[ThreadRecord]:
        """Records newest first (by last update), of one owner when given, updated before
        ``before`` when given (a time bound, not a page: ``page`` pages)."""
        found = await self.documents.find(THREAD, owner=owner, limit=limit, before=before)
        return [ThreadRecord(**row) for row in found]  # type: ignore[typeddict-item]

    async def page(
        self, *, owner: str | None = None, limit: int = 20, after: str | None = None
    ) -> tuple[list[ThreadRecord], str | None]:
        """A page of records newest first (by last update, then id), of one owner when
        given, from the cursor ``after`` on; and the next page's cursor (None after the
        last). Records updated at the same instant are neither skipped nor repeated.
        ValueError for a malformed cursor."""
        rows, more = await self.documents.find_page(THREAD, owner=owner, limit=limit, after=after)
        records = [ThreadRecord(**body) for _, body in rows]  # type: ignore[typeddict-item]
        return records, rows[-1][0] if more else None

    async def idle_since(self, cutoff: float, limit: int = 500) -> list[ThreadRecord]:
        """Records not updated since ``cutoff`` (oldest last), for retention."""
        return await self.find(limit=limit, before=cutoff)

    async def delete(self, thread_id: str) -> bool:
        """Remove a thread's record; whether there was one."""
        return await self.documents.delete(THREAD, thread_id)
