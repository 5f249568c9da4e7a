"""What every service process must see of the others, through Redis: run events, run status,
cancels, reloads and runs handed over.

The process running a run appends each of its events to a Redis Stream of the run's own, with
the event's sequence number as the entry id (``0-<seq>``), so a reader reconnecting with
``Last-Event-ID: n`` reads from ``0-n`` on (``XREAD BLOCK``); the run's status sits in a key
beside it. Both are written in batches off the run's path (a run never waits for Redis, but one
that waited long for its thread asks it once as it begins: ``RunBus.begin``) and expire
``retain_s`` after the run ends (``LIVE_TTL_S`` while it runs: a killed process's keys go too);
the stream keeps at most ``STREAM_MAXLEN`` events. A process says it is alive in a key of its
own, renewed while it lives and expiring ``alive_s`` (the run lease's time) after it dies; the
status of a run still queued (never begun) whose process is gone is ended, by the first process
that reads it, as failed: its message was never kept. A process that was only out of Redis's
reach for that long may still hold the run: it begins a queued run only if its status still
says queued, and the other ends it only if it still says queued with the alive key still
absent, each in one script, so exactly one of the two happens (such an end is kept
``LIVE_TTL_S``, as long as the run could still wait there). A pub/sub channel carries what
every process must hear: cancel a run wherever it runs, reload skills and workflows, resume the
runs a stopping process handed over. Without Redis none of this exists: one process keeps its
runs' events in memory (``RunFeed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from agents.errors import ConfigError, KeyReused
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

STREAM_MAXLEN = 10_000  # events kept per run (approximately: Redis trims whole nodes)
LIVE_TTL_S = 3600  # a running run's keys, renewed at every write
POLL_S = 1.0  # a shared reader's longest block: it looks whether its process is stopping
ENDS = frozenset({"run_finished", "run_failed", "reconnect"})  # a stream's last event
# A key's run (KEYS[1]) replaced by another (ARGV[2], for ARGV[3] s) if it still is the one
# named (ARGV[1]): the key's value after. Its process being back does not matter: a run that
# never began never will (``BEGIN``).
TAKE_OVER = """
local found = redis.call('GET', KEYS[1])
if found and string.sub(found, 1, string.len(ARGV[1]) + 1) ~= ARGV[1] .. ' ' then
  return found
end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
return ARGV[2]
"""
# A queued run begins: its status (KEYS[1]) says so (ARGV[1], for ARGV[2] s) unless another
# process ended it meanwhile (``END_QUEUED``): nil, else the status that says how it ended.
# 'running' is its own earlier try, one that timed out here but reached Redis; no status yet:
# its first write has not landed (nobody can have ended it), or it expired an hour on.
BEGIN = """
local found = redis.call('GET', KEYS[1])
if found then
  local status = cjson.decode(found)['status']
  if status ~= 'queued' and status ~= 'running' then
    return found
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return false
"""
# A queued run whose process is gone ended: its status (KEYS[1]) set to ARGV[2] and its stream
# (KEYS[2]) closed with the event ARGV[5], ARGV[6] (id ARGV[4]), for ARGV[3] s, only if the
# status still is the queued one read (ARGV[1]) and the process's alive key (KEYS[3]) is still
# absent: 1 if ended, 0 if it began or its process spoke meanwhile. The XADD comes first: an id
# taken fails the script before anything is written.
END_QUEUED = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('EXISTS', KEYS[3]) == 1 then
  return 0
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[7], ARGV[4], 't', ARGV[5], 'd', ARGV[6])
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return 1
"""
BEGIN_WAIT_S = 2.0  # a run's start waits this long for Redis's word, then goes by its own
NEVER_BEGAN = (
    "The service process this run waited in stopped before the run began; its message was "
    "not kept: send it again."
)

Handler = Callable[[dict[str, Any]], object]  # quick: long work goes into a task of its own


REDIS_CONNECTIONS = 1000  # a process's connections to Redis at most (readers block on one)
REDIS_WAIT_S = 10.0  # a command waits this long for a free one, then fails as Redis down


def redis_client(url: str) -> Any:
    """A client of the Redis at ``url`` whose commands wait for a free connection (up to
    ``REDIS_WAIT_S``) rather than fail. redis-py's default pool fails the 101st command at
    once ("Too many connections"), and every reader of a run another process runs holds a
    connection while it waits for the next event: at load, 200 chats alternating between
    two processes, claims of Idempotency-Keys and run events went unwritten."""
    import redis.asyncio as redis

    pool = redis.BlockingConnectionPool.from_url(
        url, max_connections=REDIS_CONNECTIONS, timeout=REDIS_WAIT_S
    )
    return redis.Redis.from_pool(pool)  # the client closes its pool with it


def reconnect_data(thread_id: str, run_id: str, last_event_id: int, reason: str) -> dict[str, Any]:
    """What a ``reconnect`` event says: read run ``run_id`` on at its stream's URL, after
    ``last_event_id``. ``reason``: ``shutting_down`` (this process stops; the run goes on
    elsewhere) or ``resumed`` (the run was cut off and goes on as this other run)."""
    return {
        "thread_id": thread_id,
        "run_id": run_id,
        "url": f"/v1/threads/{thread_id}/runs/{run_id}/stream",
        "last_event_id": str(last_event_id),
        "reason": reason,
    }


async def check_redis(url: str) -> None:
    """Reach Redis at ``url`` once (a PING, in its database), at start.

    Raises:
        ConfigError: naming ``SKILLDESK_REDIS_URL``, when Redis cannot be reached or refuses
            (a wrong host or port, a database number it does not have, a password).
    """
    import redis.asyncio as redis

    shown = redact(url)
    try:
        client: Any = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
    except ValueError as exc:
        raise ConfigError(
            f"Redis URL {shown} (SKILLDESK_REDIS_URL) is not valid: {exc}",
            fix="use redis://host:6379/0, or leave SKILLDESK_REDIS_URL unset for one process",
        ) from None
    try:
        await client.ping()
    except Exception as exc:
        raise ConfigError(
            f"cannot reach Redis at {shown} (SKILLDESK_REDIS_URL): {exc}",
            fix="check that Redis is running and that SKILLDESK_REDIS_URL names its host, "
            "port and database number (redis://host:6379/0)",
        ) from None
    finally:
        with contextlib.suppress(Exception):
            await client.aclose()


def redact(url: str) -> str:
    """``url`` without its password."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}{':***' if ':' in creds else ''}@{host}"


@dataclass(frozen=True)
class SharedEvent:
    """A run's event as another process wrote it: its sequence id, type and JSON data."""

    seq: int
    type: str
    data: str


class RunBus:
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
            fields, status = _ending(run_id, thread_id, stored, seq, to, ended)
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
        if last and _text(last[0][1].get(b"t", b"")) in ENDS:
            return None
        return int(_text(last[0][0]).rsplit("-", 1)[1]) + 1 if last else 1

    async def begin(self, feed: RunFeed) -> RunFailed | None:
        """Say that queued run ``feed`` begins: its status says ``running`` for every process
        from now on (``status`` no longer ends it). None when it may begin; else how another
        process ended it meanwhile, having taken this one for gone (its alive key lapsed
        while Redis was out of its reach): it must not run, its readers having been told
        that it failed and its client to send the message again.

        A run that waited less than half ``alive_s`` (nearly every run: most never wait)
        begins without asking, as nobody can have ended it yet: that takes this process's
        alive key absent, and the write that stored its status ``queued`` set the key for
        ``alive_s`` (a process frozen that long has waited that long on the monotonic clock
        too). Having waited longer, it may have been ended while this process was cut off
        from Redis, and only Redis can say: running it blind is the double answer this
        guards against, so with Redis unreachable it is asked again until it answers (the
        run stays queued; a cancel or a stop ends it)."""
        if time.monotonic() - feed.queued_at < self.alive_s / 2:
            return None
        status = {**feed.summary(), "status": "running", "started": time.time()}
        running = json.dumps({**status, "process": self.origin})
        while True:
            try:
                found = await asyncio.wait_for(
                    self.client.eval(BEGIN, 1, self._status(feed.run_id), running, LIVE_TTL_S),
                    BEGIN_WAIT_S,
                )
            except Exception as exc:
                log.warning("bus.begin_not_written", run_id=feed.run_id, error=str(exc))
                await asyncio.sleep(min(0.5, self.alive_s / 3))
                continue
            return None if found is None else _failure(feed, json.loads(found))

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
            fields, status = _ending(run_id, thread_id, found, seq, None, ended)
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
                last = int(_text(entry_id).rsplit("-", 1)[1])
                kind = _text(fields[b"t"])
                yield SharedEvent(last, kind, _text(fields[b"d"]))
                if kind in ENDS:
                    return
            if entries:
                continue
            status = await self.status(run_id)
            ended = status is None or status["status"] not in ("queued", "running")
            if ended and (status is None or status["events"] <= last):
                return  # ended (with no closing event: refused before it ran) or expired
            yield None

    async def claim(self, thread_id: str, key: str, run_id: str, asks: str = "") -> tuple[str, str]:
        """The run that answers the client's ``key`` on the thread, in whichever process, and
        what its request asked (a digest of ``asks``, its fingerprint): ``run_id`` when no
        request brought the key before (it is claimed for ``retain_s``), else the run that
        request started. Redis unreachable: ``run_id`` (this process still joins the key's
        runs it has itself)."""
        name = self._key_name(thread_id, key)
        mine = f"{run_id} {_digest(asks)}"
        try:
            # Kept while its run may still go on; the run's status expiring says it ended long ago.
            if await self.client.set(name, mine, nx=True, ex=LIVE_TTL_S):
                return run_id, _digest(asks)
            found = await self.client.get(name)
        except Exception as exc:
            log.warning("bus.key_not_claimed", thread_id=thread_id, error=str(exc))
            return run_id, _digest(asks)
        owner, _, digest = _text(found or mine).partition(" ")
        return owner, digest

    async def claim_run(
        self, thread_id: str, key: str, here: Callable[[str], object], asks: str = ""
    ) -> tuple[str | None, str | None]:
        """Where a request with the client's ``key`` is answered: ``(run_id, None)``, the id
        of the run it starts (the key is claimed for it), or ``(None, run_id)``, the run a
        request with the same key started in another process (a client's retry sent
        elsewhere by the load balancer: one run, whatever process each try reached);
        ``(None, None)`` when ``here(run_id)`` finds the key's run in this process (which
        joins it by the key). A key whose run never started (its request was refused) or
        ended long ago is claimed again for the new run.

        Raises:
            KeyReused: the key's first request asked something else than ``asks`` (the
                turn's fingerprint).
        """
        mine = str(uuid.uuid4())
        owner, digest = await self.claim(thread_id, key, mine, asks)
        if owner == mine:
            return mine, None
        if here(owner):  # this process joins it by the key (or refuses another message)
            return None, None
        # The run's status is written just after its claim: a retry close behind waits for it.
        # Its status kept (while it runs, and ``retain_s`` after) is how long the key holds.
        for _ in range(20):
            status = await self.status(owner)
            if status is not None:
                if status.get("thread_id") != thread_id:
                    return mine, None
                if digest and digest != _digest(asks):
                    raise KeyReused.for_message(key, thread_id, owner)
                if not _never_began(status):
                    return None, owner
                # Its process died (or was taken for dead) with it queued and its message was
                # not kept: it never runs (``begin``), and the retry the failure asks for is a
                # new run (unless another retry's came first).
                owner, digest = await self._take_over(thread_id, key, owner, mine, asks)
                if owner == mine:
                    return mine, None
                continue  # another retry's run took the key: this one joins it
            await asyncio.sleep(0.05)
        await self.reclaim(thread_id, key, mine, asks)  # its run never started, or is gone
        return mine, None

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

    async def reclaim(self, thread_id: str, key: str, run_id: str, asks: str = "") -> None:
        """The key's run is ``run_id`` after all (the run it named never started)."""
        with contextlib.suppress(Exception):
            name = self._key_name(thread_id, key)
            await self.client.set(name, f"{run_id} {_digest(asks)}", ex=LIVE_TTL_S)

    async def _take_over(
        self, thread_id: str, key: str, was: str, run_id: str, asks: str
    ) -> tuple[str, str]:
        """The key's run is ``run_id`` if it still is ``was`` (one of two retries at once
        wins); returns the key's run and its request's digest after."""
        mine = f"{run_id} {_digest(asks)}"
        name = self._key_name(thread_id, key)
        found = await self.client.eval(TAKE_OVER, 1, name, was, mine, LIVE_TTL_S)
        owner, _, digest = _text(found).partition(" ")
        return owner, digest

    def _key_name(self, thread_id: str, key: str) -> str:
        digest = hashlib.sha256(json.dumps([thread_id, key]).encode()).hexdigest()
        return f"{self.prefix}:key:{digest}"  # a thread id and a key may both hold ':'

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


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _digest(asks: str) -> str:
    """A request's fingerprint, short ("" for none: a resume asks nothing)."""
    return hashlib.sha256(asks.encode()).hexdigest()[:16] if asks else ""


def _ending(
    run_id: str,
    thread_id: str,
    stored: dict[str, Any] | None,
    seq: int,
    to: RunFeed | None,
    ended: RunFinished | RunFailed | None,
) -> tuple[dict[str, str], dict[str, Any]]:
    """The closing event (its stream fields) and the status of a run that ``resumed`` or
    ``status`` ends: ``stored``, its status so far (None: expired, a whole one is made)."""
    now = time.time()
    status = stored or {
        "id": run_id,
        "thread_id": thread_id,
        "created": now,
        "started": None,
        "answer": None,
        "cancel_requested": False,
    }
    message = "The service stopped during the run; the conversation so far is kept."
    if to is not None:
        kind = "reconnect"
        data = reconnect_data(thread_id, to.run_id, 0, "resumed")
        message += f" It went on from its last step as run {to.run_id}."
    else:
        ended = ended or RunFailed(thread_id, run_id, "run_cancelled", message)
        kind, data = event_name(ended), event_data(ended)
    if isinstance(ended, RunFinished) and to is None:
        status.update(status="succeeded", answer=ended.message.text, error=None)
    else:
        failure = ended if isinstance(ended, RunFailed) and to is None else None
        error = {"code": "run_cancelled", "message": message}
        if failure is not None:
            error = {"code": failure.code, "message": failure.message}
        status.update(status="failed", error=error)
    status.update(events=seq, ended=now, resumed_as=to.run_id if to is not None else None)
    return {"t": kind, "d": json.dumps(data, ensure_ascii=False)}, status


def _failure(feed: RunFeed, status: dict[str, Any]) -> RunFailed:
    """How run ``feed`` ended, as its ``status`` (written by another process) says."""
    error = status.get("error") or {}
    code = str(error.get("code") or "run_cancelled")
    return RunFailed(feed.thread_id, feed.run_id, code, str(error.get("message") or NEVER_BEGAN))


def _never_began(status: dict[str, Any]) -> bool:
    """Whether a run's status says it ended before it began because its process went away
    (its message was not kept: sending it again is a new run)."""
    error = status.get("error") or {}
    return (
        status.get("status") == "failed"
        and status.get("started") is None
        and status.get("resumed_as") is None  # else it goes on as another run
        and bool(status.get("process"))
        and error.get("code") == "run_cancelled"
    )
