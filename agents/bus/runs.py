"""``RunBus``: one process's connection to the others through Redis (see ``agents.bus``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import structlog

from agents.bus.common import (
    ENDS,
    LIVE_TTL_S,
    NEVER_BEGAN,
    POLL_S,
    STREAM_MAXLEN,
    SharedEvent,
    as_text,
    closing_status,
    failure_of,
)
from agents.bus.connection import redis_client
from agents.bus.keys import KeyClaims
from agents.bus.scripts import BEGIN, END_QUEUED
from agents.events import (
    Event,
    RunFailed,
    RunFinished,
    Token,
    answer_event,
    event_data,
    event_name,
)
from agents.feed import RunFeed
from agents.state.leases import LEASE_S

log = structlog.get_logger(__name__)

BEGIN_WAIT_S = 2.0  # a run's start waits this long for Redis's word, then goes by its own

Handler = Callable[[dict[str, Any]], object]  # quick: long work goes into a task of its own


class RunBus(KeyClaims):
    """One process's connection to the others (see the module's description).

    Args:
        url: Redis, ``redis://host:6379/0``.
        prefix: Starts every key and the channel (several services may share one Redis).
        retain_s: How long an ended run's events and status stay readable.
        alive_s: How long after its last word this process counts as gone (it says it is
            alive every third of it): the run lease's time, ``SKILLDESK_RUN_LEASE_S``.
    """

    def __init__(
        self,
        url: str,
        prefix: str = "skilldesk",
        retain_s: float = 600,
        *,
        alive_s: float = LEASE_S,
    ) -> None:
        self.client: Any = redis_client(url)
        self.prefix = prefix
        self.retain_s = retain_s
        self.alive_s = alive_s
        self.origin = uuid.uuid4().hex  # this process, so it skips what it sent itself
        self._pending: list[tuple[RunFeed, int, Event | None]] = []
        self._writer: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None
        self._alive: asyncio.Task[None] | None = None

    async def ping(self, timeout_s: float = 2.0) -> None:
        """Raise when Redis does not answer within ``timeout_s`` (``/readyz``)."""
        await asyncio.wait_for(self.client.ping(), timeout_s)

    @property
    def channel(self) -> str:
        """The pub/sub channel every process listens to."""
        return f"{self.prefix}:control"

    def _events(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:events"

    def _status(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}"

    def _process(self, origin: str) -> str:
        return f"{self.prefix}:process:{origin}"

    # The process running a run.

    def changed(self, feed: RunFeed, event: Event | None = None) -> None:
        """The run has a new event (its sequence number is its count) or a new status."""
        self._pending.append((feed, len(feed.events), event))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write())
        if self._alive is None:
            self._alive = asyncio.get_running_loop().create_task(self._keep_alive())

    async def _keep_alive(self) -> None:
        """Say this process is alive (its runs' statuses name it), every third of
        ``alive_s``, until ``aclose``."""
        while True:
            try:
                await self.client.set(self._process(self.origin), "1", px=self._alive_ms)
                wait = self.alive_s / 3
            except Exception as exc:  # Redis away: said again as soon as it is back, so that
                log.warning("bus.alive_not_written", error=str(exc))  # its queued runs are
                wait = min(0.5, self.alive_s / 3)  # not taken for a dead process's then
            await asyncio.sleep(wait)

    @property
    def _alive_ms(self) -> int:
        return max(1, int(self.alive_s * 1000))

    async def _write(self) -> None:
        """Write what is pending, in order, a pipeline at a time, until nothing is."""
        while self._pending:
            batch, self._pending = self._pending, []
            latest: dict[str, RunFeed] = {}
            async with self.client.pipeline(transaction=False) as pipe:
                # Alive before any status naming this process is read.
                pipe.set(self._process(self.origin), "1", px=self._alive_ms)
                for feed, seq, event in batch:
                    latest[feed.run_id] = feed
                    if event is None:
                        continue
                    fields = {
                        "t": event_name(event),
                        "d": json.dumps(event_data(event), ensure_ascii=False),
                    }
                    pipe.xadd(
                        self._events(feed.run_id),
                        fields,
                        id=f"0-{seq}",
                        maxlen=STREAM_MAXLEN,
                        approximate=True,
                    )
                for run_id, feed in latest.items():
                    if feed.mirror is not self:  # handed over: the resumer says how it went
                        continue
                    ttl = max(1, int(self.retain_s)) if feed.done else LIVE_TTL_S
                    status = {**feed.summary(), "process": self.origin}
                    pipe.set(self._status(run_id), json.dumps(status), ex=ttl)
                    pipe.expire(self._events(run_id), ttl)
                try:
                    await pipe.execute()
                except Exception as exc:  # readers elsewhere miss it; the run goes on
                    log.warning("bus.write_failed", error=str(exc), events=len(batch))

    async def resumed(
        self,
        run_id: str,
        thread_id: str,
        to: RunFeed | None,
        ended: RunFinished | RunFailed | None = None,
    ) -> None:
        """End the shared stream of run ``run_id`` (cut off by a process that stopped or
        died) with a ``reconnect`` to run ``to``, which goes on from its last checkpoint, or,
        when nothing was left to run, with how it had ended (``ended``: its answer, found in
        the thread, or why there is none; by default ``run_failed``); its status says so.
        Readers in any process follow."""
        try:
            seq = await self._closing_seq(run_id)
            if seq is None:
                return  # told already (another process resumed it, or it ended)
            stored = await self._stored(run_id)
            fields, status = closing_status(run_id, thread_id, stored, seq, to, ended)
            key, ttl = self._events(run_id), max(1, int(self.retain_s))
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.xadd(key, fields, id=f"0-{seq}", maxlen=STREAM_MAXLEN, approximate=True)
                pipe.set(self._status(run_id), json.dumps(status), ex=ttl)
                pipe.expire(key, ttl)
                await pipe.execute()
        except Exception as exc:  # its readers wait for the keys to expire; the run goes on
            log.warning("bus.resumed_not_written", run_id=run_id, error=str(exc))

    async def _closing_seq(self, run_id: str) -> int | None:
        """The sequence number a closing event of the run's stream takes; None when the
        stream is closed already."""
        last = await self.client.xrevrange(self._events(run_id), count=1)
        if last and as_text(last[0][1].get(b"t", b"")) in ENDS:
            return None
        return int(as_text(last[0][0]).rsplit("-", 1)[1]) + 1 if last else 1

    async def begin(self, feed: RunFeed) -> RunFailed | None:
        """Say that queued run ``feed`` begins: its status says ``running`` for every process
        from now on (``status`` no longer ends it). None when it may begin; else how another
        process ended it meanwhile, having taken this one for gone (its alive key lapsed
        while Redis was out of its reach): it must not run, its readers having been told
        that it failed and its client to send the message again.

        Its ``running`` is written here, in the script, not later by the batched writer: a
        process cut off from Redis right after it began would otherwise leave ``queued``
        stored, and once its alive key lapsed another process would end a run that runs.
        Redis unreachable: it begins if it waited less than half ``alive_s``, as nobody can
        have ended it yet (that takes this process's alive key absent, and the write that
        stored its status ``queued`` set the key for ``alive_s``), so an outage of Redis does
        not stop every conversation; it stays exposed only if this process then stays cut off
        for ``alive_s`` while the others reach Redis. Having waited longer, it may have been
        ended while this process was cut off, and only Redis can say: running it blind is the
        double answer this guards against, so Redis is asked again until it answers (the run
        stays queued; a cancel or a stop ends it)."""
        status = {**feed.summary(), "status": "running", "started": time.time()}
        running = json.dumps({**status, "process": self.origin})
        while True:
            try:
                # Not ``wait_for``: on 3.11 it returns the result of a call that ended just as
                # the run was cancelled (a stop, a cancel), and the run would begin.
                async with asyncio.timeout(BEGIN_WAIT_S):
                    found = await self.client.eval(
                        BEGIN, 1, self._status(feed.run_id), running, LIVE_TTL_S
                    )
            except Exception as exc:
                if time.monotonic() - feed.queued_at < self.alive_s / 2:
                    return None
                log.warning("bus.begin_not_written", run_id=feed.run_id, error=str(exc))
                await asyncio.sleep(min(0.5, self.alive_s / 3))
                continue
            return None if found is None else failure_of(feed, json.loads(found))

    async def flushed(self) -> None:
        """Return once everything pending is written."""
        while self._writer is not None and not self._writer.done():
            await asyncio.gather(self._writer, return_exceptions=True)

    # Any process.

    async def status(self, run_id: str) -> dict[str, Any] | None:
        """A run's status as its process last wrote it (``RunFeed.summary``), or None.

        A run still queued whose process is gone (killed: it could not say how the run
        ended) never began and never will: it is ended here as failed (``run_cancelled``,
        send the message again), its stream with it, for every reader; it said ``queued``
        until its keys expired, an hour on. Only while it still says queued and its process
        is still silent, checked as it is written: a process that was only out of Redis's
        reach and began the run meanwhile keeps it; one that had not, never begins it."""
        raw = await self.client.get(self._status(run_id))
        found = dict(json.loads(raw)) if raw else None
        if found is None or found.get("status") != "queued" or not await self._gone(found):
            return found
        await self._end_queued(run_id, raw, found)
        return await self._stored(run_id) or found

    async def _end_queued(self, run_id: str, raw: bytes, found: dict[str, Any]) -> None:
        """End queued run ``run_id`` as failed, its process gone, unless its status changed
        since it was read as ``raw`` (it began: ``begin``) or its process spoke meanwhile."""
        thread_id = str(found.get("thread_id", ""))
        ended = RunFailed(thread_id, run_id, "run_cancelled", NEVER_BEGAN)
        try:
            seq = await self._closing_seq(run_id)
            if seq is None:
                return
            fields, status = closing_status(run_id, thread_id, found, seq, None, ended)
            process = self._process(str(found["process"]))
            keys = (self._status(run_id), self._events(run_id), process)
            # Kept as long as its status said queued could be (``LIVE_TTL_S``), not
            # ``retain_s``: a process that still holds the run must find it ended.
            args = (raw, json.dumps(status), LIVE_TTL_S, f"0-{seq}", fields["t"], fields["d"])
            done = await self.client.eval(END_QUEUED, 3, *keys, *args, STREAM_MAXLEN)
        except Exception as exc:  # its readers go on waiting; the next look tries again
            log.warning("bus.end_not_written", run_id=run_id, error=str(exc))
            return
        if done:
            log.info("run.ended_with_its_process", run_id=run_id, thread_id=thread_id)

    async def _stored(self, run_id: str) -> dict[str, Any] | None:
        raw = await self.client.get(self._status(run_id))
        return dict(json.loads(raw)) if raw else None

    async def _gone(self, status: dict[str, Any]) -> bool:
        """Whether the process that wrote ``status`` is gone (said nothing for
        ``alive_s``); unknown (no process named, or this one): no."""
        origin = status.get("process")
        if not origin or origin == self.origin:
            return False
        return not await self.client.exists(self._process(str(origin)))

    async def events(self, run_id: str, after: int = 0) -> AsyncIterator[SharedEvent | None]:
        """The run's events after sequence ``after``, then each as it comes, to the run's end
        (or until its keys expired); None whenever ``POLL_S`` passes without one."""
        key, last = self._events(run_id), after
        while True:
            found = await self.client.xread({key: f"0-{last}"}, count=500, block=int(POLL_S * 1000))
            entries = found[0][1] if found else []
            for entry_id, fields in entries:
                last = int(as_text(entry_id).rsplit("-", 1)[1])
                kind = as_text(fields[b"t"])
                yield SharedEvent(last, kind, as_text(fields[b"d"]))
                if kind in ENDS:
                    return
            if entries:
                continue
            status = await self.status(run_id)
            ended = status is None or status["status"] not in ("queued", "running")
            if ended and (status is None or status["events"] <= last):
                return  # ended (with no closing event: refused before it ran) or expired
            yield None

    async def answer(self, run_id: str) -> AsyncIterator[Token | RunFinished | RunFailed]:
        """The answer's events (tokens, the end) of a run another process runs.

        A run cut off and resumed writes its answer anew from the step it went on from; what
        was sent cannot be taken back, so after the switch only the text past what was sent
        goes out (at the end, from the resumed run's whole answer)."""
        sent, cut = "", False  # cut: text was sent before the run was cut off
        async for kind, data in self.follow(run_id):
            if kind == "reconnect":
                cut = bool(sent)
                continue
            event = answer_event(kind, data)
            if isinstance(event, Token):
                if cut:
                    continue
                sent += event.text
            elif isinstance(event, RunFinished) and cut:
                answer = event.message.text
                if answer.startswith(sent) and len(answer) > len(sent):
                    yield Token(answer[len(sent) :], "")
            if event is not None:
                yield event

    async def follow(self, run_id: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """A run another process runs, from its first event to its end, as (type, data):
        a run cut off and resumed is followed to the run that took it over (its ``reconnect``
        event, then the resumed run's events from its first)."""
        while True:
            onward = None
            async for event in self.events(run_id):
                if event is None:
                    continue
                data = json.loads(event.data)
                yield event.type, data
                if event.type == "reconnect" and data.get("reason") == "resumed":
                    onward = str(data["run_id"])
                    break
            if onward is None:
                return
            run_id = onward

    async def publish(self, op: str, **fields: Any) -> int:
        """Tell every process (this one skips it): ``cancel`` (``run_id``), ``reload``,
        ``orphans`` (``threads``), ``workflow_orphans`` (``runs``). Returns how many processes
        listen."""
        message = json.dumps({"op": op, "origin": self.origin, **fields})
        return int(await self.client.publish(self.channel, message))

    async def listen(self, handlers: dict[str, Handler]) -> None:
        """Subscribe now (a message published once this returns is heard), then hand each
        message to the handler of its ``op`` in the background, until ``aclose``."""
        pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        await pubsub.subscribe(self.channel)
        self._listener = asyncio.create_task(self._dispatch(pubsub, handlers))

    async def _dispatch(self, pubsub: Any, handlers: dict[str, Handler]) -> None:
        try:
            while True:
                try:
                    message = await pubsub.get_message(timeout=POLL_S)
                except Exception as exc:  # Redis went away: try again shortly
                    log.warning("bus.listen_failed", error=str(exc))
                    await asyncio.sleep(POLL_S)
                    with contextlib.suppress(Exception):
                        await pubsub.subscribe(self.channel)
                    continue
                if message is None or message.get("type") != "message":
                    continue
                body = json.loads(message["data"])
                handler = handlers.get(str(body.get("op")))
                if handler is None or body.get("origin") == self.origin:
                    continue
                try:
                    handler(body)
                except Exception:  # one message's trouble must not end listening
                    log.exception("bus.handler_failed", op=body.get("op"))
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    async def aclose(self) -> None:
        """Write what is pending, stop listening, say this process is gone, release the
        connections."""
        await self.flushed()
        for task in (self._listener, self._alive):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self._alive is not None:  # its runs ended (or were handed over) as it stopped
            with contextlib.suppress(Exception):
                await self.client.delete(self._process(self.origin))
        await self.client.aclose()
