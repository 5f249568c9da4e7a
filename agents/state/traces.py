"""Each run's trace, kept beside its thread: how its answer was reached (the route with its
candidates and scores, the nodes with their timings, tool calls with arguments and results,
errors, usage, times), so an answer unfolds it after a reload or a restart, not only while it
streams.

Compacted and bounded: no tokens (the answer is in the thread), long values cut, at most
``MAX_EVENTS`` events a run and the traces of a thread's last ``KEEP_RUNS`` runs (older ones
are deleted as new ones come). Deleted with the thread.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from agents.events import (
    ApprovalRequired,
    Event,
    ReasoningSummary,
    RunFailed,
    RunFinished,
    Token,
    event_data,
    event_name,
)
from agents.state.documents import Documents

TRACE = "run_trace"  # one a run: its id, the thread as owner
ANSWERS = "run_answers"  # one a thread: which answer each of its runs gave
KEEP_RUNS = 100
MAX_EVENTS = 300
MAX_TEXT = 2_000  # characters of one value (a tool's result, a node's output)
MAX_BYTES = 64 * 1024  # a trace past this has its values cut shorter
SHORT_TEXT = 200
_SKIPPED = (Token, ReasoningSummary)


def compact(events: Sequence[Event], max_text: int = MAX_TEXT) -> list[dict[str, Any]]:
    """The events a trace keeps, as ``{"type", "data"}`` (the names and data of the run's
    stream), long values cut to ``max_text`` characters."""
    kept = [e for e in events if not isinstance(e, _SKIPPED)]
    if len(kept) > MAX_EVENTS:  # the first ones (route, first nodes) and how it ended
        kept = [*kept[: MAX_EVENTS - 1], kept[-1]]
    out = []
    for event in kept:
        data = event_data(event)
        if isinstance(event, RunFinished):
            data.pop("answer", None)  # it is the thread's message
        out.append({"type": event_name(event), "data": _cut(data, max_text)})
    return out


def status_of(events: Sequence[Event]) -> str:
    """How the run ended: succeeded, interrupted (waiting for an approval) or failed."""
    last = events[-1] if events else None
    if isinstance(last, RunFinished):
        waiting = any(isinstance(e, ApprovalRequired) for e in events)
        return "interrupted" if waiting else "succeeded"
    return "failed" if isinstance(last, RunFailed) or last is None else "ended"


class RunTraces:
    """The run traces of one store."""

    def __init__(self, documents: Documents, keep_runs: int = KEEP_RUNS) -> None:
        self.documents = documents
        self.keep_runs = keep_runs

    async def save(
        self,
        thread_id: str,
        run_id: str,
        events: Sequence[Event],
        *,
        started: float | None,
        ended: float | None = None,
    ) -> None:
        """Keep a run's trace (the caller holds the thread: one writer of its answers)."""
        last = events[-1] if events else None
        answer = last.message.id if isinstance(last, RunFinished) else None
        body: dict[str, Any] = {
            "run_id": run_id,
            "thread_id": thread_id,
            "status": status_of(events),
            "started": started,
            "ended": ended or time.time(),
            "answer_id": answer,
            "events": compact(events),
        }
        if len(json.dumps(body, ensure_ascii=False, default=str)) > MAX_BYTES:
            body["events"] = compact(events, SHORT_TEXT)
        # The thread's list first: a run listed whose trace is missing is a 404, never a
        # trace nobody can reach or delete.
        runs = [r for r in await self._runs(thread_id) if r[1] != run_id]
        runs.append([answer, run_id])
        dropped, runs = runs[: -self.keep_runs], runs[-self.keep_runs :]
        await self.documents.put(ANSWERS, thread_id, {"runs": runs}, owner=thread_id)
        await self.documents.put(TRACE, run_id, body, owner=thread_id, status=body["status"])
        for _, old in dropped:
            await self.documents.delete(TRACE, old)

    async def get(self, thread_id: str, run_id: str) -> dict[str, Any] | None:
        """A run's trace, or None (no such run of this thread, or its trace is gone)."""
        found = await self.documents.get(TRACE, run_id)
        return found if found is not None and found.get("thread_id") == thread_id else None

    async def answers(self, thread_id: str) -> dict[str, str]:
        """The runs of the thread by the id of the answer each gave."""
        return {answer: run_id for answer, run_id in await self._runs(thread_id) if answer}

    async def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's traces."""
        for _, run_id in await self._runs(thread_id):
            await self.documents.delete(TRACE, run_id)
        await self.documents.delete(ANSWERS, thread_id)

    async def _runs(self, thread_id: str) -> list[list[Any]]:
        found = await self.documents.get(ANSWERS, thread_id)
        return list((found or {}).get("runs", []))


def _cut(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + "…"
    if isinstance(value, dict):
        return {k: _cut(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_cut(v, limit) for v in value[:50]]
    return value
