"""A run's events for every reader: the request that started the run and any that join it.

The run is driven by a task of its own, not by its first reader: a reader that goes away
(a client that disconnects or times out) does not stop the run, and a reader that comes
later (the same message sent again while it is answered) reads every event from the first.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any, Literal, Protocol, overload

import structlog

from agents import metrics
from agents.events import ApprovalRequired, Event, RunFailed, RunFinished

log = structlog.get_logger(__name__)

RunStatus = Literal["queued", "running", "interrupted", "succeeded", "failed", "cancelled"]
CANCELLED = "run_cancelled_by_request"
THREAD_TAKEN_OVER = "thread_taken_over"  # another process took the thread during the run
TAKEN_OVER = (
    "This process lost its hold on the thread during the run (the database was out of reach "
    "longer than a lease) and another process took the thread over, so the run was stopped: "
    "two runs must not write one thread. The steps it finished are kept, and the thread's "
    "next run takes it up from there first: its answer will be in the thread."
)
# Where a run started in this context reports the tokens it used (the service's per-key
# token rate); read once, when the run starts.
USAGE_SINK: ContextVar[Callable[[dict[str, int]], None] | None] = ContextVar(
    "skilldesk_usage_sink", default=None
)
# Whether the run answered in this context was asked to stop (a cancel), rather than cut off
# by the service stopping: what it started (a workflow run) ends with it instead of being
# left to be resumed. Set by the run's task, seen by the tasks it starts.
STOP_ASKED: ContextVar[Callable[[], bool]] = ContextVar(
    "skilldesk_stop_asked", default=lambda: False
)


class FeedMirror(Protocol):
    """Where a run's events and status are shared with other processes (``agents.bus``)."""

    def changed(self, feed: RunFeed, event: Event | None = None) -> None:
        """The run has a new event (``event``) or a new status; returns at once."""
        ...

    async def resumed(
        self,
        run_id: str,
        thread_id: str,
        to: RunFeed | None,
        ended: RunFinished | RunFailed | None = None,
    ) -> None:
        """Run ``run_id``, cut off by a process that stopped or died, goes on as ``to``
        (None: there was nothing left to run; ``ended``: how it had ended): its readers
        elsewhere are told."""
        ...

    async def begin(self, feed: RunFeed) -> RunFailed | None:
        """Queued run ``feed`` holds its thread and is about to begin: None when it may (every
        process sees it running from now on), else how another process ended it meanwhile
        (it must not run: its readers there were told it failed)."""
        ...


class RunFeed:
    """The events of one run so far, and the end of it.

    Args:
        fingerprint: What the run answers (the new user message), to match a duplicate.
        key: The client's idempotency key for the request, if it sent one.
        run_id: The run's id.
        thread_id: The run's thread.
        mirror: Shares the run with other processes (none: this process only).
    """

    def __init__(
        self,
        fingerprint: str,
        key: str | None = None,
        run_id: str = "",
        thread_id: str = "",
        mirror: FeedMirror | None = None,
    ) -> None:
        self.fingerprint = fingerprint
        self.resumed = False  # a run that went on from a crash (no new input)
        self.key = key
        self.run_id, self.thread_id = run_id, thread_id
        self.events: Sequence[Event] = []  # a list, until ``pack``
        self.error: BaseException | None = None
        self.done = False
        self.created = time.time()
        self.queued_at = time.monotonic()  # how long it waited for its thread, clock-proof
        self.started: float | None = None
        self.ended: float | None = None
        self.ended_at = 0.0
        self.cancel_requested = False
        self.thread_lost = False  # another process took the thread during the run
        # Set once the run is in its thread's line (``ThreadLocks.hold``): in every process,
        # the runs that came later go after it.
        self.in_line = asyncio.Event()
        self.guard: str | None = None  # the user the thread must belong to
        self.sink = USAGE_SINK.get()
        self._waiters: list[asyncio.Future[None]] = []
        self._final: RunStatus | None = None  # how it ended, once packed
        self._unpackable = False  # an event did not pickle
        self.mirror = mirror
        metrics.RUNS_ACTIVE.inc()
        if mirror is not None:
            mirror.changed(self)

    @property
    def status(self) -> RunStatus:
        """Where the run is: queued (waiting for the thread), running, or how it ended
        (interrupted: it waits for an approval)."""
        if not self.done:
            return "running" if self.started is not None else "queued"
        if self._final is not None:
            return self._final
        last = self.events[-1] if self.events else None
        if isinstance(last, RunFailed):
            return "cancelled" if last.code == CANCELLED else "failed"
        if isinstance(last, RunFinished):
            waiting = any(isinstance(e, ApprovalRequired) for e in self.events)
            return "interrupted" if waiting else "succeeded"
        return "cancelled" if self.cancel_requested else "failed"

    def summary(self) -> dict[str, Any]:
        """The run as ``GET .../runs/{id}`` shows it (what other processes read of it)."""
        last = self.events[-1] if self.done and self.events else None
        return {
            "id": self.run_id,
            "thread_id": self.thread_id,
            "status": self.status,
            "created": self.created,
            "started": self.started,
            "ended": self.ended,
            "events": len(self.events),
            "answer": last.message.text if isinstance(last, RunFinished) else None,
            "error": {"code": last.code, "message": last.message}
            if isinstance(last, RunFailed)
            else _refusal(self.error),
            "cancel_requested": self.cancel_requested,
            "usage": dict(last.usage) if isinstance(last, RunFinished) else None,
            "approval": self._awaited() if self.done else None,
        }

    def _awaited(self) -> dict[str, str] | None:
        """The approval an interrupted run ended waiting for, and the workflow run its
        decision resumes (that run goes on, not this one)."""
        asked = next((e for e in reversed(self.events) if isinstance(e, ApprovalRequired)), None)
        if asked is None or self.status != "interrupted":
            return None
        return {"approval_id": asked.approval_id, "workflow_run_id": asked.run_id}

    def begin(self) -> None:
        """The run holds its thread: it is running."""
        self.started = time.time()
        self._changed()

    def lose_thread(self) -> None:
        """Mark the run as having lost its thread to another process (its task is then
        cancelled: ``ThreadLocks.hold``)."""
        self.thread_lost = True

    def request_cancel(self) -> None:
        """Mark the run as asked to stop (``Conversations.cancel`` stops it)."""
        self.cancel_requested = True
        self._changed()

    def matches(self, fingerprint: str, key: str | None) -> bool:
        """Whether a request for ``fingerprint`` (with ``key``) asks for this same run."""
        if key is not None or self.key is not None:
            return key == self.key
        if self.resumed:  # its fingerprint is its message's (the target is not kept)
            return asked_of(fingerprint) == self.fingerprint
        return fingerprint == self.fingerprint

    def put(self, event: Event) -> None:
        """Add an event; readers waiting for one wake up."""
        events = self.events if isinstance(self.events, list) else list(self.events)
        events.append(event)
        self.events, self._final = events, None
        if isinstance(event, RunFinished) and self.sink is not None:
            self.sink(event.usage)
        self._changed(event)
        self.wake()

    def close(self, error: BaseException | None = None) -> None:
        """End the feed; ``error`` is raised to readers once they have read every event."""
        if not self.done:
            metrics.RUNS_ACTIVE.dec()
        self.error, self.done, self.ended_at = error, True, time.monotonic()
        self.ended = time.time()
        self._changed()
        self.wake()

    def pack(self) -> None:
        """Keep the events of this ended run as one pickled blob (``PackedEvents``). A run
        is kept ``retain_s`` after it ends (ten minutes: tens of thousands of runs at load),
        and each of its events is a few objects the garbage collector walks at every
        collection of the generation they sit in: ~70 a run, 1.8 million at 43 turns a
        second, a full collection that stalled the service for a second or more. Packed,
        a run is a handful. Its readers see the same events (unpickled as they read)."""
        if not self.done or self._unpackable or isinstance(self.events, PackedEvents):
            return
        status = self.status
        try:
            packed = PackedEvents(list(self.events))
        except Exception as exc:  # an event that does not pickle: kept as it is, once tried
            self._unpackable = True
            log.debug("run.events_not_packed", run_id=self.run_id, error=str(exc))
            return
        self.events, self._final, self.sink = packed, status, None
        if self.error is not None:  # its frames (and their locals) need not be kept
            self.error.__traceback__ = None

    async def wait(self, seen: int, patience_s: float) -> None:
        """Return when there are more than ``seen`` events, the run ended, or ``patience_s``
        seconds passed (a reader that sends keep-alives meanwhile)."""
        if seen < len(self.events) or self.done:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await asyncio.wait([waiter], timeout=patience_s)

    async def read(self, after: int = 0) -> AsyncIterator[Event]:
        """Every event from the first (or after the first ``after``), then each as it comes,
        to the end."""
        seen = after
        while True:
            # A packed run's events unpickled once, not once an event.
            events = self.events if isinstance(self.events, list) else list(self.events)
            while seen < len(events):
                seen += 1
                yield events[seen - 1]
            if self.done:
                if self.error is not None:
                    raise self.error
                return
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    def _changed(self, event: Event | None = None) -> None:
        if self.mirror is not None:
            self.mirror.changed(self, event)

    def wake(self) -> None:
        """Wake the readers waiting for an event (they look again: the process may be
        stopping)."""
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()


class PackedEvents(Sequence[Event]):
    """An ended run's events as one pickled blob, unpickled whenever they are read."""

    __slots__ = ("_blob", "_count")

    def __init__(self, events: list[Event]) -> None:
        self._blob = pickle.dumps(events, protocol=pickle.HIGHEST_PROTOCOL)
        self._count = len(events)

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> list[Event]: ...

    def __getitem__(self, index: int | slice) -> Event | list[Event]:
        return self.unpacked()[index]

    def __iter__(self) -> Iterator[Event]:
        return iter(self.unpacked())

    def unpacked(self) -> list[Event]:
        """The events, unpickled anew."""
        events: list[Event] = pickle.loads(self._blob)  # pickled by this process
        return events


TARGET_MARK = "\x1f"  # between a turn's message and its target in its fingerprint
_ESCAPED = "\x1e"  # begins the fingerprint of text that holds TARGET_MARK (``fingerprint``)


def fingerprint(content: Any) -> str:
    """A message's content as a comparable string: never holding ``TARGET_MARK``, so a
    turn's fingerprint tells its message from its target. Text holding it (or
    ``_ESCAPED``) is ``_ESCAPED`` and the text as JSON, which escapes both: text as it is
    never begins so."""
    if not isinstance(content, str):
        return json.dumps(content, sort_keys=True)
    if TARGET_MARK in content or _ESCAPED in content:
        return _ESCAPED + json.dumps(content)
    return content


def asked_of(turn_fingerprint: str) -> str:
    """The message part of a turn's fingerprint (``agents.turns.turn_fingerprint``), what a
    resumed run knows of the turn it answers: not the target its first request named."""
    return turn_fingerprint.split(TARGET_MARK, 1)[0]


def _refusal(error: BaseException | None) -> dict[str, str] | None:
    """A run refused once accepted (its thread not the caller's, nothing to resume, ...),
    as a run's error: its code and message."""
    if error is None:
        return None
    return {"code": str(getattr(error, "code", "run_failed")), "message": str(error)}
