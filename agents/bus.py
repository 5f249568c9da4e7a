"""What every service process must see of the others, through Redis: run events, run status,
cancels, reloads and runs handed over.

The process running a run appends each of its events to a Redis Stream of the run's own,
with the event's sequence number as the entry id (``0-<seq>``), so a reader reconnecting with
``Last-Event-ID: n`` reads from ``0-n`` on (``XREAD BLOCK``); the run's status sits in a key
beside it. Both are written in batches off the run's path (a run never waits for Redis) and
expire ``retain_s`` after the run ends (``LIVE_TTL_S`` while it runs: a killed process's keys
go too); the stream keeps at most ``STREAM_MAXLEN`` events. A process says it is alive in a
key of its own, renewed while it lives and expiring ``alive_s`` (the run lease's time) after
it dies; the status of a run still queued (never begun) whose process is gone is ended, by the
first process that reads it, as failed: its message was never kept. A pub/sub channel carries what
every process must hear: cancel a run wherever it runs, reload skills and workflows, resume
the runs a stopping process handed over. Without Redis none of this exists: one process keeps
its runs' events in memory (``RunFeed``).
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
# A key's run (KEYS[1]) replaced by another if it still is the one named (ARGV[1]) and that
# run's process (its alive key, KEYS[2]) is still gone: the key's value after.
TAKE_OVER = """
local found = redis.call('GET', KEYS[1])
if found and string.sub(found, 1, string.len(ARGV[1]) + 1) ~= ARGV[1] .. ' ' then
  return found
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return ARGV[1] .. ' '
end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
return ARGV[2]
"""
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
        key = self._events(run_id)
        try:
            last = await self.client.xrevrange(key, count=1)
            if last and _text(last[0][1].get(b"t", b"")) in ENDS:
                return  # told already (another process resumed it, or it ended)
            seq = int(_text(last[0][0]).rsplit("-", 1)[1]) + 1 if last else 1
            now = time.time()
            status = await self._stored(run_id) or {
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
            ttl = max(1, int(self.retain_s))
            async with self.client.pipeline(transaction=False) as pipe:
                fields = {"t": kind, "d": json.dumps(data, ensure_ascii=False)}
                pipe.xadd(key, fields, id=f"0-{seq}", maxlen=STREAM_MAXLEN, approximate=True)
                pipe.set(self._status(run_id), json.dumps(status), ex=ttl)
                pipe.expire(key, ttl)
                await pipe.execute()
        except Exception as exc:  # its readers wait for the keys to expire; the run goes on
            log.warning("bus.resumed_not_written", run_id=run_id, error=str(exc))

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
        until its keys expired, an hour on."""
        found = await self._stored(run_id)
        if found is None or found.get("status") != "queued" or not await self._gone(found):
            return found
        thread_id = str(found.get("thread_id", ""))
        log.info("run.ended_with_its_process", run_id=run_id, thread_id=thread_id)
        ended = RunFailed(thread_id, run_id, "run_cancelled", NEVER_BEGAN)
        await self.resumed(run_id, thread_id, None, ended)
        return await self._stored(run_id) or found

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
                # Its process died with it queued and its message was not kept: the retry
                # the failure asks for is a new run (unless another retry's came first).
                process = str(status["process"])
                was = owner
                owner, digest = await self._take_over(thread_id, key, was, process, mine, asks)
                if owner == mine:
                    return mine, None
                if owner == was:  # its process is back after all: the run is its
                    return None, owner
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
        self, thread_id: str, key: str, was: str, process: str, run_id: str, asks: str
    ) -> tuple[str, str]:
        """The key's run is ``run_id`` if it still is ``was`` and ``was``'s process is still
        gone (one of two retries at once wins; a process that only lost Redis for a while
        keeps its run); returns the key's run and its request's digest after."""
        mine = f"{run_id} {_digest(asks)}"
        keys = (self._key_name(thread_id, key), self._process(process))
        found = await self.client.eval(TAKE_OVER, 2, *keys, was, mine, LIVE_TTL_S)
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
