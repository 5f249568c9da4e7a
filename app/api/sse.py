"""A run's events as Server-Sent Events: from this process's memory (``RunFeed``) or from
another process's through Redis (``RunBus``), with keep-alives on an idle stream and, when
this process is stopping, a last ``reconnect`` event saying where to read on; ``Cutoffs``,
the deadline of a response that drives its run itself (a streamed workflow run)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar, cast

import structlog
from fastapi.responses import StreamingResponse
from starlette.types import Send

from agents.bus import RunBus, reconnect_data
from agents.cancelling import stop_tasks
from agents.events import Event, event_data, event_name
from agents.feed import RunFeed

KEEPALIVE = ": keep-alive\n\n"
RECONNECT_MS = 1000  # the `retry:` a stopping process asks of EventSource clients


T = TypeVar("T")
log = structlog.get_logger(__name__)


class CutOff(Exception):
    """Work a request started was cut off by the process's stop (``Cutoffs``): its grace
    period was over."""


class Last(str):
    """A stream's last chunk: ``EventStream`` sends it with the response's end."""


class EventStream(StreamingResponse):
    """Server-Sent Events whose last chunk (a ``Last``) goes out with the end of the response:
    one socket write and one pass through the middleware fewer a run (writes to the socket
    are the largest part of the HTTP layer's time under load)."""

    async def stream_response(self, send: Send) -> None:
        start = {"type": "http.response.start", "status": self.status_code}
        await send({**start, "headers": self.raw_headers})
        async for chunk in self.body_iterator:
            last = isinstance(chunk, Last)
            body = chunk if isinstance(chunk, bytes | memoryview) else chunk.encode(self.charset)
            await send({"type": "http.response.body", "body": body, "more_body": not last})
            if last:
                aclose = getattr(self.body_iterator, "aclose", None)
                if aclose is not None:
                    await aclose()
                return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class Cutoffs:
    """When the requests whose work is their own (a workflow run, a chat answer waited for)
    stop waiting for it: never, until the process is told to stop; then at the end of its
    grace period, a moment before uvicorn cuts them off (``skilldesk serve`` gives uvicorn
    the grace rounded up to a whole second), so that such a response can let its run go to
    be resumed and end with an event saying where the run goes on, rather than just end.
    Such work runs detached from its request (``detached``, ``detached_events``): a client
    that goes away leaves it going on; the app's close stops what is left (``aclose``)."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._at: float | None = None  # the loop's time of the cut-off, once told to stop
        self._waits: set[asyncio.Timeout] = set()
        self._detached: set[asyncio.Task[Any]] = set()

    def stop(self) -> None:
        """The process was told to stop (on the event loop): every wait ends by the grace
        period's end."""
        if self._at is not None:  # a second signal: the first one's deadline holds
            return
        self._at = asyncio.get_running_loop().time() + self.grace_s
        for wait in self._waits:
            wait.reschedule(self._at)

    @contextlib.asynccontextmanager
    async def wait(self) -> AsyncIterator[asyncio.Timeout]:
        """Bound what is awaited inside by the cut-off: cancelled there, it raises
        ``TimeoutError`` and the yielded timeout says ``expired()`` (another TimeoutError
        from inside does not)."""
        async with asyncio.timeout_at(self._at) as wait:
            self._waits.add(wait)
            try:
                yield wait
            finally:
                self._waits.discard(wait)

    async def detached(self, work: Awaitable[T]) -> T:
        """``work``'s result, ``work`` run by a task of its own rather than by the request
        that waits for it: a client that goes away (its request cancelled) leaves the work
        going on to its end (a workflow run, which its request drove: it stopped where it
        was, RUNNING until the next start looked for runs left). The process's stop cuts it
        off at the end of the grace period, as before: ``CutOff`` then. The work must start
        in the task (a workflow run's lease names the task that claimed it)."""
        task = self._spawn(self._bounded(work))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:  # its request went: a failure is told here
            task.add_done_callback(_told)
            raise

    def detached_events(self, events: AsyncIterator[T]) -> AsyncIterator[T]:
        """``events``, read by a task of its own from the first (see ``detached``): a reader
        that stops reading leaves them going on to their end; cut off by the process's stop,
        the reader's next read raises ``CutOff``; what they raise, the reader's next read
        raises (and, once some came, it is logged: the reader may have gone)."""
        queue: asyncio.Queue[tuple[bool, Any]] = asyncio.Queue()
        came = False

        async def drive() -> None:
            nonlocal came
            async with contextlib.aclosing(cast(Any, events)) as closing:
                async for event in closing:
                    came = True
                    queue.put_nowait((True, event))

        async def passed_on() -> None:
            try:
                await self._bounded(drive())
            except BaseException as exc:
                queue.put_nowait((False, exc))
                if not isinstance(exc, Exception):
                    raise
                if came and not isinstance(exc, CutOff):
                    log.warning("request.detached_work_failed", exc_info=exc)
            else:
                queue.put_nowait((False, None))

        self._spawn(passed_on())

        async def read() -> AsyncIterator[T]:
            while True:
                more, item = await queue.get()
                if more:
                    yield item
                elif item is None:
                    return
                elif isinstance(item, asyncio.CancelledError):  # the app closed meanwhile
                    raise CutOff("the service stopped")
                else:
                    raise item

        return read()

    async def aclose(self, within_s: float = 5.0) -> None:
        """The app closes: detached work still going gets what is left of the grace period
        (told to stop, ``stop``), then is cancelled (a workflow run lets go of its lease, to
        be resumed as a stop's are); those that outlast ``within_s`` more are logged."""
        left = list(self._detached)
        if not left:
            return
        if self._at is not None:
            await asyncio.wait(left, timeout=max(0.0, self._at - asyncio.get_running_loop().time()))
        going = await stop_tasks(left, within_s=within_s)
        if going:
            log.error("request.detached_work_not_stopped", tasks=len(going))

    async def _bounded(self, work: Awaitable[T]) -> T:
        try:
            async with self.wait() as wait:
                return await work
        except TimeoutError:
            if wait.expired():
                raise CutOff("the service stopped; its grace period is over") from None
            raise

    def _spawn(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.create_task(work)
        self._detached.add(task)
        task.add_done_callback(self._detached.discard)
        return task


def _told(task: asyncio.Task[Any]) -> None:
    """The failure of detached work whose request went: logged, nobody else sees it."""
    if not task.cancelled() and not isinstance(task.exception(), CutOff | None):
        log.warning("request.detached_work_failed", exc_info=task.exception())


def run_stream(
    events: AsyncIterator[str], thread_id: str, run_id: str, status: int = 200
) -> EventStream:
    """A run's events as the response of a request (its thread and run in the headers;
    proxies told not to buffer)."""
    return EventStream(
        events,
        status_code=status,
        media_type="text/event-stream",
        headers={
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
            "X-Thread-Id": thread_id,
            "X-Run-Id": run_id,
        },
    )


def frame(event: Event, seq: int | None = None) -> str:
    """One event as Server-Sent Events text (``id:`` its sequence number in the run)."""
    return raw_frame(event_name(event), json.dumps(event_data(event), ensure_ascii=False), seq)


def raw_frame(kind: str, data: str, seq: int | None = None) -> str:
    """An event of type ``kind`` whose data is the JSON text ``data``."""
    # The id after the event's name: clients that look for a block starting `event:` and
    # take what follows `data: ` as the JSON go on working.
    seq_line = "" if seq is None else f"id: {seq}\n"
    return f"event: {kind}\n{seq_line}data: {data}\n\n"


def reconnect(thread_id: str, run_id: str, seen: int) -> str:
    """The last event of a stream whose process is stopping: the run goes on (here for a
    grace period, or resumed elsewhere); read on at ``url`` with ``Last-Event-ID``."""
    data = reconnect_data(thread_id, run_id, seen, "shutting_down")
    return f"event: reconnect\nretry: {RECONNECT_MS}\ndata: {json.dumps(data)}\n\n"


async def follow(
    feed: RunFeed,
    after: int,
    keepalive_s: float,
    on_disconnect: Callable[[], object] | None = None,
    leaving: Callable[[], bool] | None = None,
) -> AsyncIterator[str]:
    """A run's events after the first ``after`` as SSE, each with its sequence id, and a
    comment whenever ``keepalive_s`` pass without one; ``on_disconnect`` if the client goes
    before the run ends; the ``reconnect`` event once ``leaving()`` (the process stops and
    another can serve the rest)."""
    seen = after
    try:
        while True:
            if seen < len(feed.events):
                # The events that came meanwhile (a model's tokens come in bursts) in one
                # chunk: one write through the middleware and the socket, not one each.
                done = feed.done  # then these are the run's last events
                ready = feed.events[seen:]
                text = "".join(frame(e, n) for n, e in enumerate(ready, seen + 1))
                seen += len(ready)
                yield Last(text) if done else text
                if done:
                    return
                continue  # more may have come while the chunk was sent
            if feed.done:
                return
            if leaving is not None and leaving():
                yield reconnect(feed.thread_id, feed.run_id, seen)
                return
            await feed.wait(seen, keepalive_s)
            if seen == len(feed.events) and not feed.done and not (leaving and leaving()):
                yield KEEPALIVE
    finally:
        if on_disconnect is not None and not feed.done and not (leaving and leaving()):
            on_disconnect()


async def follow_shared(
    bus: RunBus,
    thread_id: str,
    run_id: str,
    after: int,
    keepalive_s: float,
    leaving: Callable[[], bool],
) -> AsyncIterator[str]:
    """As ``follow``, for a run another process runs: its events from Redis."""
    seen, quiet_since = after, time.monotonic()
    async for event in bus.events(run_id, after):
        if leaving():
            yield reconnect(thread_id, run_id, seen)
            return
        if event is not None:
            seen, quiet_since = event.seq, time.monotonic()
            yield raw_frame(event.type, event.data, event.seq)
        elif time.monotonic() - quiet_since >= keepalive_s:
            quiet_since = time.monotonic()
            yield KEEPALIVE
