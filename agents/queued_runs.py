"""Runs accepted while their thread answered another message, kept in the store until they
end: a process that dies with such runs waiting, or under way before their turn was stored,
leaves them for its next start, which runs them in the order they came (with Redis, a run
that never began is told failed instead, and its client sends the message again:
``agents/bus``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage, messages_from_dict, messages_to_dict

from agents.run import StartOptions
from agents.state.documents import Documents
from agents.state.leases import process_ended_here, this_process
from agents.turns import ClientTurn

QUEUED = "queued_run"
# What a waiting run is started with again (callbacks are the process's own, not kept).
_KEPT_OPTIONS = ("profile", "skill", "workflow", "idempotency_key", "owner", "agent", "guard")


Turn = ClientTurn | Sequence[BaseMessage]


def turn_of(run: dict[str, Any]) -> Turn:
    """The turn a kept run was started with."""
    if run.get("client"):
        return ClientTurn(list(run["messages"]))
    return messages_from_dict(run["messages"])


class QueuedRuns:
    """Waiting runs kept in ``documents`` (the checkpoint database) until they end."""

    def __init__(self, documents: Documents) -> None:
        self.documents = documents

    async def keep(
        self,
        thread_id: str,
        run_id: str,
        turn: Turn,
        options: StartOptions,
        queued_at: float | None = None,
    ) -> None:
        """Keep run ``run_id``, which waits for its thread, until it ends; ``queued_at``:
        when it was accepted (default: now)."""
        body = {
            "thread_id": thread_id,
            "run_id": run_id,
            # As a client sent it (OpenAI format), or as messages.
            "client": isinstance(turn, ClientTurn),
            "messages": turn.messages if isinstance(turn, ClientTurn) else messages_to_dict(turn),
            "options": {k: options.get(k) for k in _KEPT_OPTIONS if options.get(k) is not None},
            "process": this_process(),
            "queued_at": queued_at or time.time(),
        }
        await self.documents.put(QUEUED, run_id, body, owner=thread_id)

    async def forget(self, run_id: str) -> bool:
        """Run ``run_id`` ended (or will never begin), or is taken up by a process:
        forgotten here; whether it was kept."""
        return await self.documents.delete(QUEUED, run_id)

    async def forget_thread(self, thread_id: str) -> None:
        """Forget the waiting runs of a thread that is deleted (their messages with them)."""
        for run in await self.documents.find(QUEUED, owner=thread_id, limit=None):
            await self.documents.delete(QUEUED, str(run["run_id"]))

    async def left(self) -> list[dict[str, Any]]:
        """The waiting runs a process of this machine left when it ended, oldest first (those
        of a process that runs, or of another machine, are theirs)."""
        found = await self.documents.find(QUEUED, limit=None)
        left = [run for run in found if process_ended_here(run.get("process"))]
        return sorted(left, key=lambda run: float(run.get("queued_at") or 0))
