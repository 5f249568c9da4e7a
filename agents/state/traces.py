"""Each run's trace, kept beside its thread: how its answer was reached (the route with its
candidates and scores, the nodes with their timings, tool calls with arguments and results,
errors, usage, times), so an answer unfolds it after a reload or a restart, not only while it
streams.

A run that failed is kept beside the message it followed (with its error), so the page can
say after a reload that the answer failed and how far it got; a message the service wrote
outside a run (a workflow's end, told after an approval) keeps the events that led to it the
same way; a fork takes the traces of the answers it copies.

Compacted and bounded: no tokens (the answer is in the thread), long values cut, at most
``MAX_EVENTS`` events a run and the traces of a thread's last ``KEEP_RUNS`` runs (older ones
are deleted as new ones come). Deleted with the thread.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
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
from agents.json_bytes import json_bytes
from agents.state.documents import Documents

TRACE = "run_trace"  # one a run: its id, the thread as owner
ANSWERS = "run_answers"  # one a thread: which answer each of its runs gave (or where it failed)
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


@dataclass
class ThreadRuns:
    """The runs of a thread with a kept trace, by the message each is shown with.

    Attributes:
        answers: Run id by the id of the answer it gave.
        failed: By the id of the last message before a run that failed: that run's id,
            error code and message (``{"run_id", "code", "message"}``).
    """

    answers: dict[str, str] = field(default_factory=dict)
    failed: dict[str, dict[str, str]] = field(default_factory=dict)


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
        after: str | None = None,
    ) -> None:
        """Keep a run's trace (the caller holds the thread: one writer of its answers).
        ``after``: for a run that failed, the id of the thread's last message then (the
        failure is shown after it)."""
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
        if len(json_bytes(body)) > MAX_BYTES:
            body["events"] = compact(events, SHORT_TEXT)
        # The thread's list first: a run listed whose trace is missing is a 404, never a
        # trace nobody can reach or delete.
        runs = [r for r in await self._runs(thread_id) if r[1] != run_id]
        if isinstance(last, RunFailed) and after:
            runs.append([None, run_id, after, last.code, _cut(last.message, SHORT_TEXT)])
        else:
            runs.append([answer, run_id])
        dropped, runs = runs[: -self.keep_runs], runs[-self.keep_runs :]
        await self.documents.put(ANSWERS, thread_id, {"runs": runs}, owner=thread_id)
        await self.documents.put(TRACE, run_id, body, owner=thread_id, status=body["status"])
        for entry in dropped:
            await self.documents.delete(TRACE, entry[1])

    async def get(self, thread_id: str, run_id: str) -> dict[str, Any] | None:
        """A run's trace, or None (no such run of this thread, or its trace is gone)."""
        found = await self.documents.get(TRACE, run_id)
        return found if found is not None and found.get("thread_id") == thread_id else None

    async def runs(self, thread_id: str) -> ThreadRuns:
        """The thread's runs with a kept trace, by the message each is shown with."""
        found = ThreadRuns()
        for answer, run_id, *failure in await self._runs(thread_id):
            if answer:
                found.answers[answer] = run_id
            elif len(failure) == 3:
                after, code, message = failure
                found.failed[after] = {"run_id": run_id, "code": code, "message": message}
        return found

    async def copy(self, source: str, target: str, message_ids: Iterable[str]) -> int:
        """Give ``target`` (a fork of ``source``) the traces of the runs shown with its
        ``message_ids``, under new run ids (each thread deletes its own). Returns how many."""
        wanted = set(message_ids)
        runs: list[list[Any]] = []
        for entry in await self._runs(source):
            shown_with = entry[0] or (entry[2] if len(entry) == 5 else None)
            found = await self.get(source, entry[1]) if shown_with in wanted else None
            if found is None:
                continue
            run_id = str(uuid.uuid4())
            body = {**found, "run_id": run_id, "thread_id": target, "copied_from": entry[1]}
            await self.documents.put(TRACE, run_id, body, owner=target, status=body["status"])
            runs.append([entry[0], run_id, *entry[2:]])
        if runs:
            await self.documents.put(ANSWERS, target, {"runs": runs}, owner=target)
        return len(runs)

    async def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's traces."""
        for entry in await self._runs(thread_id):
            await self.documents.delete(TRACE, entry[1])
        await self.documents.delete(ANSWERS, thread_id)

    async def _runs(self, thread_id: str) -> list[list[Any]]:
        """``[answer id, run id]`` for each run, oldest first; a failed run shown after a
        message: ``[None, run id, that message's id, code, message]``."""
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
