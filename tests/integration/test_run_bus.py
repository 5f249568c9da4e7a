"""A run's events and status in the machine's Redis (``agents.bus``), bounded: a reader in
another process reads them to the end, the stream keeps a bounded number of events, and the
keys expire ``retain_s`` after the run ends (an hour after the last write while it runs)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from agents.bus import LIVE_TTL_S, NEVER_BEGAN, STREAM_MAXLEN, RunBus
from agents.errors import KeyReused
from agents.events import RunFinished, Token
from agents.feed import RunFeed
from tests.pgkit import REDIS


@pytest.fixture
async def bus() -> AsyncIterator[RunBus]:
    opened = RunBus(REDIS, prefix=f"test-{uuid.uuid4().hex[:12]}", retain_s=5)
    yield opened
    await opened.aclose()


async def test_a_reader_elsewhere_reads_the_run_to_its_end_and_the_keys_then_expire(
    bus: RunBus,
) -> None:
    run_id = str(uuid.uuid4())
    feed = RunFeed("hi", run_id=run_id, thread_id="t", mirror=bus)
    feed.begin()
    feed.put(Token("Hel", "expert"))
    await bus.flushed()
    status = await bus.status(run_id)
    assert status is not None
    assert (status["status"], status["events"], status["thread_id"]) == ("running", 1, "t")
    running_ttl = await bus.client.ttl(f"{bus.prefix}:run:{run_id}:events")
    assert LIVE_TTL_S - 60 < running_ttl <= LIVE_TTL_S
    feed.put(Token("lo", "expert"))
    feed.put(RunFinished("t", run_id, AIMessage("Hello"), {"total_tokens": 3}))
    feed.close()
    await bus.flushed()

    elsewhere = RunBus(REDIS, prefix=bus.prefix)
    try:
        read = [e async for e in elsewhere.events(run_id, after=1) if e is not None]
        ended = await elsewhere.status(run_id)
    finally:
        await elsewhere.aclose()
    assert [(e.seq, e.type) for e in read] == [(2, "token"), (3, "run_finished")]
    assert ended is not None
    assert (ended["status"], ended["answer"], ended["events"]) == ("succeeded", "Hello", 3)
    for key in (f"{bus.prefix}:run:{run_id}", f"{bus.prefix}:run:{run_id}:events"):
        assert 0 < await bus.client.ttl(key) <= 5  # retain_s after the end


async def test_a_run_stream_keeps_a_bounded_number_of_events(bus: RunBus) -> None:
    run_id = str(uuid.uuid4())
    feed = RunFeed("hi", run_id=run_id, thread_id="t", mirror=bus)
    feed.begin()
    for _ in range(STREAM_MAXLEN + 500):
        feed.put(Token("x", "expert"))
    await bus.flushed()
    key = f"{bus.prefix}:run:{run_id}:events"
    kept = await bus.client.xlen(key)
    assert STREAM_MAXLEN <= kept < STREAM_MAXLEN + 200  # trimmed a node at a time
    newest = await bus.client.xrevrange(key, count=1)
    assert newest[0][0] == f"0-{STREAM_MAXLEN + 500}".encode()
    feed.close()


async def test_a_key_belongs_to_its_thread_and_its_first_run(bus: RunBus) -> None:
    # Thread ids and keys may both hold ':' - ("proj:7", "abc") and ("proj", "7:abc") are two.
    assert (await bus.claim("proj:7", "abc", "run-1", "hi"))[0] == "run-1"
    # A retry: the first run, and what its request asked.
    assert await bus.claim("proj:7", "abc", "run-2", "hi") == await bus.claim("proj:7", "abc", "x")
    assert (await bus.claim("proj:7", "abc", "run-2"))[0] == "run-1"
    assert (await bus.claim("proj", "7:abc", "run-3"))[0] == "run-3"
    await bus.reclaim("proj", "7:abc", "run-4")  # run-3 never started
    assert (await bus.claim("proj", "7:abc", "run-5"))[0] == "run-4"


async def test_a_key_sent_again_with_another_message_is_refused_while_its_run_is_kept(
    bus: RunBus,
) -> None:
    never = lambda run_id: None  # noqa: E731 - the key's run is not in this process
    first, _ = await bus.claim_run("t-1", "k", never, "where is ORD1?")
    assert first is not None
    feed = RunFeed("where is ORD1?", run_id=first, thread_id="t-1", mirror=bus)
    feed.begin()  # its status, as the process running it writes it
    await bus.flushed()
    with pytest.raises(KeyReused, match="another message"):
        await bus.claim_run("t-1", "k", never, "where is ORD2?")
    assert await bus.claim_run("t-1", "k", never, "where is ORD1?") == (None, first)  # a retry
    # Its status gone (the run ended over retain_s ago): the key starts a new run.
    await bus.client.delete(f"{bus.prefix}:run:{first}")
    again, elsewhere = await bus.claim_run("t-1", "k", never, "where is ORD2?")
    assert (again is not None, again != first, elsewhere) == (True, True, None)
    feed.close()


async def test_a_cut_off_run_is_told_once_where_it_went_on_with_a_whole_status(
    bus: RunBus,
) -> None:
    run_id, onward = str(uuid.uuid4()), RunFeed("hi", run_id=str(uuid.uuid4()), thread_id="t")
    await bus.resumed(run_id, "t", onward)  # its status had expired: a whole one is written
    await bus.resumed(run_id, "t", None)  # a second resumer, too late: nothing more
    events = [e async for e in bus.events(run_id) if e is not None]
    assert [e.type for e in events] == ["reconnect"]
    status = await bus.status(run_id)
    assert status is not None
    assert (status["status"], status["resumed_as"], status["cancel_requested"]) == (
        "failed",
        onward.run_id,
        False,
    )
    from app.api.schemas.runs import ChatRunPublic

    ChatRunPublic.model_validate(status)  # GET .../runs/{id} can show it


def never_began(run_id: str, thread_id: str, process: str) -> str:
    """The status of a run that waited in ``process``, which went away before it began."""
    error = {"code": "run_cancelled", "message": "send it again"}
    return json.dumps(
        {"id": run_id, "thread_id": thread_id, "status": "failed", "started": None}
        | {"error": error, "process": process, "resumed_as": None}
    )


async def test_retries_of_a_run_that_never_began_start_one_run(
    bus: RunBus, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, _ = await bus.claim_run("t-retry", "k1", lambda _: False, asks="hello")
    assert first is not None
    await bus.client.set(bus._status(first), never_began(first, "t-retry", "gone-process"))
    # Every retry reads that the run never began before any takes the key over: a race.
    read, everyone = bus.status, asyncio.Event()
    readers: list[str] = []

    async def status_once_all_read(run_id: str) -> Any:
        found = await read(run_id)
        if run_id == first:
            readers.append(run_id)
            if len(readers) >= 5:
                everyone.set()
            await everyone.wait()
        return found

    monkeypatch.setattr(bus, "status", status_once_all_read)

    async def retry() -> str | None:
        mine, joined = await bus.claim_run("t-retry", "k1", lambda _: False, asks="hello")
        if mine is not None:  # it starts: its status is written at once, as a run's is
            queued = {"id": mine, "thread_id": "t-retry", "status": "queued", "started": None}
            await bus.client.set(bus._status(mine), json.dumps(queued | {"process": bus.origin}))
        return mine or joined

    runs = await asyncio.gather(*(retry() for _ in range(5)))
    assert len(set(runs)) == 1  # five retries at once: one new run, the others join it
    assert runs[0] != first


async def test_a_retry_of_a_run_that_never_began_is_a_new_run_even_with_its_process_back(
    bus: RunBus,
) -> None:
    # Its process only lost Redis for longer than its alive key lasts: it finds the run
    # ended when its turn comes and never runs it (``RunBus.begin``), so the retry the
    # failure asked for is a new run; joining the failed one would fail it again and again.
    back, _ = await bus.claim_run("t-back", "k2", lambda _: False, asks="hello")
    assert back is not None
    await bus.client.set(bus._status(back), never_began(back, "t-back", "back-process"))
    await bus.client.set(bus._process("back-process"), "1", ex=30)
    again, joined = await bus.claim_run("t-back", "k2", lambda _: False, asks="hello")
    assert (again is not None, again != back, joined) == (True, True, None)


async def test_a_retry_joins_a_run_that_went_on_elsewhere(bus: RunBus) -> None:
    # A run that went on as another (resumed) is not one that never began.
    went_on, _ = await bus.claim_run("t-on", "k3", lambda _: False, asks="hello")
    assert went_on is not None
    resumed = json.loads(never_began(went_on, "t-on", "gone-process")) | {"resumed_as": "r2"}
    await bus.client.set(bus._status(went_on), json.dumps(resumed))
    assert await bus.claim_run("t-on", "k3", lambda _: False, asks="hello") == (None, went_on)


async def test_a_queued_run_ended_as_its_process_seemed_gone_is_not_begun_after(
    bus: RunBus,
) -> None:
    elsewhere = RunBus(REDIS, prefix=bus.prefix)
    try:
        ended = RunFeed("hi", run_id=str(uuid.uuid4()), thread_id="t", mirror=bus)
        waits = RunFeed("hi", run_id=str(uuid.uuid4()), thread_id="t", mirror=bus)
        await bus.flushed()
        await bus.client.delete(bus._process(bus.origin))  # lapsed: Redis was out of reach
        for feed in (ended, waits):  # meanwhile they waited for their thread that long
            feed.queued_at -= bus.alive_s
        told = await elsewhere.status(ended.run_id)
        assert told is not None
        assert told["status"] == "failed"
        refused = await bus.begin(ended)
        assert refused is not None
        assert (refused.run_id, refused.code, refused.message) == (
            ended.run_id,
            "run_cancelled",
            NEVER_BEGAN,
        )
        assert await bus._stored(ended.run_id) == told  # not written over
        assert await bus.begin(waits) is None  # no one ended this one: it begins
        began = await elsewhere.status(waits.run_id)  # its process still silent: kept
        assert began is not None
        assert began["status"] == "running"
    finally:
        await elsewhere.aclose()


async def test_a_run_that_began_says_so_at_once_so_its_end_elsewhere_is_refused(
    bus: RunBus,
) -> None:
    # Its 'running' written by the batched writer later, a process cut off from Redis just
    # after it began left 'queued' stored: once its alive key lapsed, another process ended
    # a run that was running (the client told to send it again, the run going on).
    elsewhere = RunBus(REDIS, prefix=bus.prefix)
    try:
        feed = RunFeed("hi", run_id=str(uuid.uuid4()), thread_id="t", mirror=bus)
        await bus.flushed()  # stored as queued
        assert await bus.begin(feed) is None  # it begins; the writer writes nothing more
        await bus.client.delete(bus._process(bus.origin))  # then cut off that long
        seen = await elsewhere.status(feed.run_id)
        assert seen is not None
        assert seen["status"] == "running"
        assert seen["process"] == bus.origin
    finally:
        await elsewhere.aclose()


async def test_readers_waiting_for_events_do_not_starve_the_writes(bus: RunBus) -> None:
    # Each reader of a run another process runs waits for its next event on a connection
    # of its own; redis-py's default pool failed the 101st command ("Too many connections"):
    # at load, Idempotency-Keys went unclaimed and run events unwritten.
    run_id = str(uuid.uuid4())
    readers = [
        asyncio.create_task(bus.client.xread({bus._events(run_id): "0-0"}, block=1500))
        for _ in range(150)
    ]
    await asyncio.sleep(0.3)  # every reader waits on its connection now
    claimed, _ = await bus.claim("t-many", "k-many", "run-many", "hi")
    assert claimed == "run-many"
    assert await bus.client.get(bus._key_name("t-many", "k-many")) is not None
    assert await asyncio.gather(*readers) == [[]] * 150  # each waited its time out, unfailed
