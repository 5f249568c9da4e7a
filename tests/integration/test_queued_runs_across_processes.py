"""A queued run's fate across processes (``agents.bus``): either its process begins it or
another, taking that process for gone, ends it as failed, never both. A process only cut off
from Redis for a while (its alive key lapsed) must not run what every reader was told had
failed, and a run it began must not be ended under it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from agents.bus import NEVER_BEGAN, RunBus, redis_client
from agents.conversations import Conversations
from agents.events import RunFailed, RunFinished
from agents.feed import RunFeed
from app.services import open_services
from tests.fakellm import FakeLLM, Reply
from tests.pgkit import REDIS

UNREACHABLE = "redis://127.0.0.1:1/0"  # nothing listens: every command fails at once


@dataclass
class Pair:
    """A process running conversations (``here``) and another reading their runs."""

    conversations: Conversations
    here: RunBus
    elsewhere: RunBus

    async def cut_off(self) -> Callable[[], Awaitable[None]]:
        """Redis out of this process's reach (the other still reaches it); returns what
        brings it back."""
        live, self.here.client = self.here.client, redis_client(UNREACHABLE)

        async def back() -> None:
            dead, self.here.client = self.here.client, live
            await dead.aclose()

        return back


async def pair_of(model_settings: Any, alive_s: float) -> AsyncIterator[Pair]:
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    here = RunBus(REDIS, prefix=prefix, retain_s=5, alive_s=alive_s)
    elsewhere = RunBus(REDIS, prefix=prefix, retain_s=5)
    async with open_services(model_settings) as services:
        services.conversations.mirror = here
        try:
            yield Pair(services.conversations, here, elsewhere)
        finally:
            services.conversations.mirror = None
            await here.aclose()
            await elsewhere.aclose()


@pytest.fixture
async def pair(model_settings: Any) -> AsyncIterator[Pair]:
    """This process's alive key lasts a second: cut off from Redis, it lapses soon."""
    async for opened in pair_of(model_settings, alive_s=1.0):
        yield opened


@pytest.fixture
async def steady(model_settings: Any) -> AsyncIterator[Pair]:
    """This process's alive key lasts 30 s (renewed every 10 s): gone only when a test says."""
    async for opened in pair_of(model_settings, alive_s=30.0):
        yield opened


def queue(pair: Pair, thread: str, text: str, key: str | None = None) -> RunFeed:
    return pair.conversations.start(thread, [HumanMessage(text)], idempotency_key=key)


async def until(check: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "it never came"
        await asyncio.sleep(0.1)


async def status_of(bus: RunBus, run_id: str) -> dict[str, Any]:
    found = await bus.status(run_id)
    assert found is not None
    return found


async def test_a_queued_run_ended_elsewhere_while_its_process_was_cut_off_never_runs(
    pair: Pair, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="The second answer."))
    held, release = asyncio.Event(), asyncio.Event()

    async def answering_another() -> None:  # the thread answers another message meanwhile
        async with pair.conversations.hold("q"):
            held.set()
            await release.wait()

    holder = asyncio.create_task(answering_another())
    await held.wait()
    first = queue(pair, "q", "first")
    second = queue(pair, "q", "second")
    await pair.here.flushed()
    back = await pair.cut_off()
    # Its alive key lapses: the other process, reading the run, ends it for every reader.
    await until(lambda: has_status(pair.elsewhere, first.run_id, "failed"))
    release.set()  # the thread's turn comes while Redis is still out of reach:
    await asyncio.sleep(1.0)  # having waited long, the run may have been ended: it waits
    assert (first.status, second.status, fake_llm.views) == ("queued", "queued", [])
    await back()
    await holder

    [told] = [e async for e in first.read()]
    assert isinstance(told, RunFailed)
    assert (told.code, told.message) == ("run_cancelled", NEVER_BEGAN)
    answered = [e async for e in second.read()]  # the thread's next run goes on
    assert isinstance(answered[-1], RunFinished)
    assert answered[-1].message.text == "The second answer."
    assert [view.last_user for view in fake_llm.views] == ["second"]  # the first never ran
    await pair.here.flushed()
    stored = await status_of(pair.elsewhere, first.run_id)
    assert (stored["status"], stored["started"], stored["error"]["message"]) == (
        "failed",
        None,
        NEVER_BEGAN,
    )
    shared = [e async for e in pair.elsewhere.events(first.run_id) if e is not None]
    assert [e.type for e in shared] == ["run_failed"]
    assert (await status_of(pair.elsewhere, second.run_id))["status"] == "succeeded"


async def alive(bus: RunBus, origin: str) -> bool:
    return bool(await bus.client.exists(bus._process(origin)))


async def has_status(bus: RunBus, run_id: str, status: str) -> bool:
    return bool((await status_of(bus, run_id))["status"] == status)


async def test_its_message_sent_again_with_its_key_is_a_new_run_in_either_process(
    pair: Pair, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Answered once."))
    never = lambda _: None  # noqa: E731 - the key's run is not in the other process
    asks = "hello"
    async with pair.conversations.hold("k"):
        key_run, _ = await pair.here.claim_run("k", "key-1", pair.conversations.get_run, asks)
        assert key_run is not None
        first = pair.conversations.start(
            "k", [HumanMessage(asks)], idempotency_key="key-1", run_id=key_run
        )
        await pair.here.flushed()
        back = await pair.cut_off()
        await until(lambda: has_status(pair.elsewhere, first.run_id, "failed"))
        await back()
    assert [type(e) async for e in first.read()] == [RunFailed]
    # Its process is back and alive, and the key still names the run: a retry is a new run
    # all the same, here or there (joining the failed run would fail it again and again).
    await until(lambda: alive(pair.elsewhere, pair.here.origin))
    here, _ = await pair.here.claim_run("k", "key-1", pair.conversations.get_run, asks)
    assert here not in (None, first.run_id)
    again = pair.conversations.start(
        "k", [HumanMessage(asks)], idempotency_key="key-1", run_id=here
    )
    await pair.here.flushed()
    assert await pair.elsewhere.claim_run("k", "key-1", never, asks) == (None, here)
    last = [e async for e in again.read()][-1]
    assert isinstance(last, RunFinished)
    assert last.message.text == "Answered once."


async def test_a_run_its_process_began_is_not_ended_by_another_that_took_it_for_gone(
    steady: Pair, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_llm.script(Reply(content="Begun, and finished.", delay=1.0))  # running while read
    held, release = asyncio.Event(), asyncio.Event()

    async def answering_another() -> None:
        async with steady.conversations.hold("b"):
            held.set()
            await release.wait()

    holder = asyncio.create_task(answering_another())
    await held.wait()
    feed = queue(steady, "b", "hello")
    await steady.here.flushed()
    alive_key = steady.here._process(steady.here.origin)
    await steady.here.client.delete(alive_key)  # lapsed: Redis was out of its reach
    judged = steady.elsewhere._gone

    async def began() -> bool:
        return feed.started is not None

    async def gone_then_begun(status: dict[str, Any]) -> bool:
        """The other process reads the run queued and its process gone; then, before it
        writes the run's end, the thread's turn comes and the run begins."""
        gone = await judged(status)
        release.set()
        await until(began)
        await steady.here.flushed()
        await steady.here.client.delete(alive_key)  # still absent as the end is written
        return gone

    monkeypatch.setattr(steady.elsewhere, "_gone", gone_then_begun)
    seen = await status_of(steady.elsewhere, feed.run_id)
    assert seen["status"] == "running"  # the end it was about to write was refused
    await holder
    last = [e async for e in feed.read()][-1]
    assert isinstance(last, RunFinished)
    await steady.here.flushed()
    assert (await status_of(steady.elsewhere, feed.run_id))["status"] == "succeeded"
    shared = [e async for e in steady.elsewhere.events(feed.run_id) if e is not None]
    assert "run_failed" not in [e.type for e in shared]
    assert shared[-1].type == "run_finished"


async def test_a_run_that_did_not_wait_begins_with_redis_out_of_reach(
    steady: Pair, fake_llm: FakeLLM
) -> None:
    # Nobody can have ended it: that takes its process's alive key absent, and the write
    # that showed it queued set that key for the next 30 s.
    fake_llm.script(Reply(content="Answered without Redis."))
    back = await steady.cut_off()
    try:
        last = [e async for e in queue(steady, "n", "hello").read()][-1]
    finally:
        await back()
    assert isinstance(last, RunFinished)
    assert last.message.text == "Answered without Redis."
