"""The originals of a thread's summarised messages, kept beside its checkpoints.

A summary takes messages out of the active history (the model reads the summary instead);
the checkpoints before it still hold them, but only as long as retention keeps those
checkpoints. The transcript keeps them for the reader: each summary step writes the batch
it compressed as one document (kind ``summarised``, owned by the thread, found by the index
of its first message), so ``GET /v1/threads/{id}`` shows the whole conversation, the
summarised messages marked, however little of the checkpoint history is left. A batch is
written under a name made from its first index: a step run again after a crash writes the
same document, not a second one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage, messages_from_dict

from agents.errors import SkilldeskError
from agents.state.documents import Documents

KIND = "summarised"
# A thread's batches are read in one query: ten thousand batches of a dozen messages each.
MAX_BATCHES = 10_000


class TranscriptUnavailable(SkilldeskError):
    """The store refused to keep summarised messages (the summary step is skipped)."""

    code = "transcript_unavailable"


class Transcript:
    """Summarised messages per thread, in the service's document table."""

    def __init__(self, documents: Documents) -> None:
        self.documents = documents

    async def keep(self, thread_id: str, first: int, messages: Sequence[BaseMessage]) -> None:
        """Keep ``messages``, the thread's messages from index ``first`` on.

        Raises:
            TranscriptUnavailable: the store failed (whatever its driver raised).
        """
        body = {"thread_id": thread_id, "first": first, "messages": [_compact(m) for m in messages]}
        try:
            await self.documents.put(KIND, _name(thread_id, first), body, owner=thread_id)
        except Exception as exc:  # sqlite3, psycopg or pool errors alike
            raise TranscriptUnavailable(f"summarised messages not kept: {exc}") from exc

    async def read(self, thread_id: str, below: int | None = None) -> list[tuple[int, BaseMessage]]:
        """The thread's summarised messages with their indices, in order (those with an
        index below ``below``); messages summarised before transcripts were kept are not
        there."""
        out: list[tuple[int, BaseMessage]] = []
        for batch in await self._batches(thread_id):
            first = int(batch["first"])
            for i, message in enumerate(messages_from_dict(batch["messages"]), start=first):
                if below is not None and i >= below:
                    return out
                out.append((i, message))
        return out

    async def copy(self, source: str, target: str, below: int) -> None:
        """Give thread ``target`` (a fork) the batches of ``source`` before index ``below``."""
        for batch in await self._batches(source):
            if batch["first"] < below:
                kept = batch["messages"][: below - batch["first"]]
                await self.documents.put(
                    KIND,
                    _name(target, batch["first"]),
                    {**batch, "thread_id": target, "messages": kept},
                    owner=target,
                )

    async def prune(self, thread_id: str, keep: int) -> int:
        """Forget all but the newest ``keep`` summarised messages of the thread, a whole
        batch at a time (a batch with any of the newest ``keep`` stays); how many went."""
        batches = await self._batches(thread_id)
        if not batches:
            return 0
        end = int(batches[-1]["first"]) + len(batches[-1]["messages"])
        gone = 0
        for batch in batches:
            if int(batch["first"]) + len(batch["messages"]) > end - keep:
                break
            await self.documents.delete(KIND, _name(thread_id, batch["first"]))
            gone += len(batch["messages"])
        return gone

    async def size(self, thread_id: str) -> int:
        """The bytes the thread's summarised messages take (their JSON)."""
        return sum(len(json.dumps(b, ensure_ascii=False)) for b in await self._batches(thread_id))

    async def delete_thread(self, thread_id: str) -> None:
        """Forget the thread's summarised messages."""
        for batch in await self._batches(thread_id):
            await self.documents.delete(KIND, _name(thread_id, batch["first"]))

    async def _batches(self, thread_id: str) -> list[dict[str, Any]]:
        found = await self.documents.find(KIND, owner=thread_id, limit=MAX_BATCHES)
        return sorted(found, key=lambda b: int(b["first"]))


def _compact(message: BaseMessage) -> dict[str, Any]:
    """What a reader needs of a message: its kind, id, words and calls (not the provider's
    metadata, which can outweigh the words)."""
    data: dict[str, Any] = {"content": message.content, "id": message.id}
    if message.name:
        data["name"] = message.name
    if isinstance(message, AIMessage) and message.tool_calls:
        data["tool_calls"] = message.tool_calls
    if isinstance(message, ToolMessage):
        data["tool_call_id"] = message.tool_call_id
    return {"type": message.type, "data": data}


def _name(thread_id: str, first: int) -> str:
    return f"{thread_id}:{first:09d}"
