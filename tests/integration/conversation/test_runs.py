"""A run as its caller sees it: failures that end it, turns at once on one thread,
callbacks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage

from agents import conversations as conversations_module
from agents import kept_runs
from agents.bus import RunBus
from agents.events import RunFailed
from agents.feed import PackedEvents, RunFeed
from agents.state import leases
from app.services import Services, open_services
from tests.fakellm import FakeLLM, Reply
from tests.integration.conversation.kit import final, turn
from tests.pgkit import REDIS

ROOT = Path(__file__).resolve().parents[3]


async def test_a_model_failure_keeps_the_thread_usable(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(*[Reply(status=500)] * 3, Reply(content="Back."))
    failed = await turn(services, "where is my order ORD1001?", "flaky")
    assert isinstance(failed[-1], RunFailed)
    assert "language model failed" in failed[-1].message
    events = await turn(services, "are you there?", "flaky")
    assert final(events).message.content == "Back."
    history = await services.conversations.history("flaky")
    assert [m.text for m in history if isinstance(m, HumanMessage)] == [
        "where is my order ORD1001?",
        "are you there?",
    ]


async def test_two_turns_at_once_on_one_thread_both_keep_their_messages(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(content="first answer", delay=0.3), Reply(content="second answer", delay=0.3)
    )
    await asyncio.gather(
        turn(services, "hi there, good morning", "both"),
        turn(services, "and good evening too", "both"),
    )
    history = await services.conversations.history("both")
    assert sorted(m.text for m in history if isinstance(m, HumanMessage)) == [
        "and good evening too",
        "hi there, good morning",
    ]
    assert sorted(m.text for m in history if isinstance(m, AIMessage)) == [
        "first answer",
        "second answer",
    ]


async def test_a_thread_store_failure_ends_the_run_with_run_failed(
    services: Services, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def unreadable(config: Any) -> Any:
        raise OSError("disk I/O error")

    monkeypatch.setattr(services.conversations.graph, "aget_state", unreadable)
    events = await turn(services, "where is my order ORD1234", "store-down")
    assert isinstance(events[-1], RunFailed)
    assert events[-1].code == "internal_error"
    assert fake_llm.requests == []
    monkeypatch.undo()  # the store is back: the thread works
    fake_llm.script(Reply(content="ORD1234 shipped."))
    assert final(await turn(services, "where is my order ORD1234", "store-down")).message.text


async def test_callbacks_passed_to_a_run_see_its_model_calls(
    services: Services, fake_llm: FakeLLM
) -> None:
    class Seen(AsyncCallbackHandler):
        def __init__(self) -> None:
            self.model_calls = 0

        async def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
            self.model_calls += 1

    seen = Seen()
    fake_llm.script(Reply(content="Hello."))
    events = [
        e
        async for e in services.conversations.stream(
            "callbacks", [HumanMessage("hello there")], callbacks=[seen]
        )
    ]
    assert final(events).message.text == "Hello."
    assert seen.model_calls == len(fake_llm.requests) == 1


async def test_an_ended_run_is_found_by_its_id_for_its_retention_then_not(
    services: Services, fake_llm: FakeLLM
) -> None:
    conversations = services.conversations
    conversations.retain_s = 0.3
    fake_llm.script(Reply(content="Done."))
    run_id = final(await turn(services, "hello", "kept")).run_id
    assert conversations.get_run(run_id) is not None
    await asyncio.sleep(0.4)
    assert conversations.get_run(run_id) is None  # at once, whenever the runs are walked


async def test_starting_runs_does_not_walk_every_run_kept(
    services: Services, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At 50 turns a second ten minutes of ended runs are 30,000 feeds: walked once a
    # second, not on every turn.
    conversations = services.conversations
    for n in range(2000):
        old = RunFeed("earlier", run_id=f"old-{n}", thread_id=f"t{n}")
        old.close()
        conversations.kept.by_id[old.run_id] = old
    walked: list[RunFeed] = []
    expired = kept_runs._expired

    def counted(feed: RunFeed, retain_s: float) -> bool:
        walked.append(feed)
        return expired(feed, retain_s)

    monkeypatch.setattr(kept_runs, "_expired", counted)
    fake_llm.script(*[Reply(content="Hi.")] * 5)
    for n in range(5):
        await turn(services, f"hello {n}", f"busy-{n}")
    assert len(walked) <= 2000 + 20  # one walk at most in this second, and a few lookups
    assert conversations.get_run("old-7") is not None  # still within its retention


async def test_an_ended_run_is_packed_for_the_rest_of_its_retention_and_reads_the_same(
    services: Services, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ten minutes of ended runs, each dozens of objects, were walked by every collection of
    # the garbage collector: full collections of a second and more under load.
    conversations = services.conversations
    monkeypatch.setattr(kept_runs, "PACK_AFTER_S", 0.0)
    fake_llm.script(Reply(content="Done, and well."))
    run_id = final(await turn(services, "hello", "packed")).run_id
    feed = conversations.get_run(run_id)
    assert feed is not None
    before = (list(feed.events), feed.status, feed.summary())
    await asyncio.sleep(kept_runs.PRUNE_S + 0.1)
    assert conversations.get_run(run_id) is feed  # the walk packs it
    assert isinstance(feed.events, PackedEvents)
    assert (list(feed.events), feed.status, feed.summary()) == before
    assert final(list(feed.events)).message.content == "Done, and well."


@pytest.mark.parametrize("fails", ["letting go", "taking"])
async def test_a_store_failing_around_the_threads_lease_still_ends_the_run_for_its_readers(
    services: Services, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch, fails: str
) -> None:
    # The lease is released before the end is told; a store that fails then (a pool timeout,
    # a restart) must not leave readers waiting for an end that never comes.
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def failing_lock(*_: Any) -> Any:
        if fails == "taking":
            raise RuntimeError("connection pool timed out")
        yield
        raise RuntimeError("connection pool timed out")

    monkeypatch.setattr(leases, "thread_lock", failing_lock)
    if fails == "letting go":
        fake_llm.script(Reply(content="Answered."))
    events = await asyncio.wait_for(turn(services, "hello", "leased"), timeout=20)
    if fails == "letting go":
        assert final(events).message.content == "Answered."  # written, and told
    else:
        assert isinstance(events[-1], RunFailed)
        assert events[-1].code == "internal_error"  # logged; the user is told it failed


async def test_a_cancel_stops_a_model_call_under_way_and_the_thread_goes_on(
    services: Services, fake_llm: FakeLLM
) -> None:
    # Stop means stop: a reply that takes long (or never ends) is not waited out.
    fake_llm.script(Reply(content="a very long story", delay=20), Reply(content="Short one."))
    conversations = services.conversations
    feed = conversations.start("halt", [HumanMessage("tell me a long story")])
    events = feed.read()
    await anext(events)  # the run has begun
    await asyncio.sleep(0.3)  # in the model call
    conversations.cancel(feed.run_id)
    ended = await asyncio.wait_for(_last(events), timeout=3)
    assert isinstance(ended, RunFailed)
    assert ended.code == "run_cancelled_by_request"
    assert feed.status == "cancelled"
    assert (await services.threads.get("halt"))["status"] == "idle"
    again = await turn(services, "a short one then", "halt")
    assert final(again).message.content == "Short one."
    history = await services.conversations.history("halt")
    assert [m.text for m in history if isinstance(m, AIMessage)] == ["Short one."]


async def test_a_second_cancel_does_not_cut_the_first_ones_bookkeeping_short(
    services: Services, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A double click: the second cancel interrupted the first's recording that the thread
    # is idle, and a restarted service then resumed the run the user had stopped.
    fake_llm.script(Reply(content="a very long story", delay=20))
    conversations = services.conversations
    settle = conversations.books.settle_cancelled

    async def slowly(ctx: Any) -> None:
        await asyncio.sleep(0.3)  # a store that takes its time
        await settle(ctx)

    monkeypatch.setattr(conversations.books, "settle_cancelled", slowly)
    feed = conversations.start("twice", [HumanMessage("tell me a long story")])
    events = feed.read()
    await anext(events)
    await asyncio.sleep(0.3)
    conversations.cancel(feed.run_id)
    await asyncio.sleep(0.1)  # the first cancel's bookkeeping is under way
    conversations.cancel(feed.run_id)
    ended = await asyncio.wait_for(_last(events), timeout=5)
    assert isinstance(ended, RunFailed)
    assert ended.code == "run_cancelled_by_request"
    assert (await services.threads.get("twice"))["status"] == "idle"
    assert await services.threads.orphans.found() == {}


async def _last(events: Any) -> Any:
    return [e async for e in events][-1]


async def test_a_run_cancelled_then_cut_by_a_stop_is_not_handed_over(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="too late", delay=5))
    conversations = services.conversations
    feed = conversations.start("cut", [HumanMessage("tell me a long story")])
    events = feed.read()
    await anext(events)  # the run has begun
    await asyncio.sleep(0.3)  # in the model call
    conversations.cancel(feed.run_id)
    assert await conversations.aclose() == []  # the stop comes first: nothing to hand over
    ended = [e async for e in events][-1]
    assert isinstance(ended, RunFailed)
    assert ended.code == "run_cancelled_by_request"
    assert "resumed" not in ended.message  # it was asked to stop: nobody goes on with it
    assert await services.threads.orphans.found() == {}
    record = await services.threads.get("cut")
    assert record["status"] == "idle"
    assert conversations.traces is not None  # its trace is kept, as any ended run's is
    trace = await conversations.traces.get("cut", feed.run_id)
    assert trace is not None, "the cancelled run's trace was not saved"
    assert trace["status"] == "failed"
    assert trace["events"][-1]["type"] == "run_failed"
    assert trace["events"][-1]["data"]["code"] == "run_cancelled_by_request"


async def test_readers_of_a_run_that_had_ended_when_its_process_died_get_its_answer(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hello there."))
    bus = RunBus(REDIS, prefix=f"test-{uuid.uuid4().hex[:12]}", retain_s=5)
    try:
        events = await turn(services, "hi there, good morning", "ended")
        answered = final(events).run_id
        # Its process died after the answer's checkpoint, before telling the end (its stream
        # in Redis has no ending: here, none at all): the record still says running, and
        # nothing is left to run.
        services.conversations.mirror = bus
        records = services.threads.records
        await records.update("ended", status="running", run_id=answered)
        never = str(uuid.uuid4())  # and one that died before its message was kept
        await records.create("lost", title="lost")
        await records.update("lost", status="running", run_id=never)
        assert await services.threads.orphans.resume() == []
        told = [e async for e in bus.events(answered) if e is not None][-1]
        assert told.type == "run_finished"
        assert json.loads(told.data)["answer"] == "Hello there."
        assert (await bus.status(answered) or {})["status"] == "succeeded"
        lost = [e async for e in bus.events(never) if e is not None][-1]
        assert lost.type == "run_failed"
        assert "send it again" in json.loads(lost.data)["message"]
    finally:
        services.conversations.mirror = None
        await bus.aclose()


async def test_a_misspelt_run_option_is_refused_naming_it(services: Services) -> None:
    with pytest.raises(TypeError, match=r"unknown run option\(s\) \['ifbusy'\]"):
        services.conversations.start("typo", [HumanMessage("hi")], ifbusy="reject")  # type: ignore[call-arg]
    assert not services.conversations.busy("typo")  # nothing started


async def test_every_thread_a_stopped_process_left_running_is_found(services: Services) -> None:
    # Not the newest thousand: a busy process that dies can leave more.
    records = services.threads.records.documents
    for n in range(1_200):
        body = {"thread_id": f"left-{n}", "status": "running", "run_id": f"run-{n}", "updated": n}
        await records.put("thread", f"left-{n}", body, status="running", updated=n + 1)
    found = await services.threads.orphans.found()
    assert len(found) == 1_200
    assert found["left-0"] == "run-0"


@pytest.fixture
async def bundled(model_settings: Any) -> AsyncIterator[Services]:
    """Services over the bundled skills and workflows."""
    settings = model_settings.model_copy(
        update={"skills_dir": ROOT / "skills", "workflows_dir": ROOT / "workflows"}
    )
    async with open_services(settings) as opened:
        yield opened


async def test_a_cancel_stops_the_workflow_its_run_was_running(
    bundled: Services, fake_llm: FakeLLM
) -> None:
    # The workflow was let go as if its process had stopped: resumed by the next look for
    # orphans, it made its model call again and went on to its side effects.
    services = bundled
    fake_llm.script(Reply(content="Returnable within 30 days.", delay=20))
    conversations = services.conversations
    feed = conversations.start(
        "halt-flow",
        [HumanMessage("Give me an overview of order ORD1001")],
        workflow="order-overview",
    )
    events = feed.read()
    await anext(events)
    for _ in range(100):  # in the expert's model call
        if fake_llm.requests:
            break
        await asyncio.sleep(0.05)
    conversations.cancel(feed.run_id)
    ended = await asyncio.wait_for(_last(events), timeout=3)
    assert ended.code == "run_cancelled_by_request"
    [run] = await services.engine.list_runs(workflow="order-overview")
    assert run["status"] == "CANCELLED"
    assert await services.engine.resume_orphans() == []
    assert len(fake_llm.requests) == 1


async def test_a_stop_ends_a_run_that_dropped_its_cancel(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Python 3.11's asyncio.wait_for (psycopg's pool waits with it) drops a cancel that lands
    # as its result comes: the stop cancelled each run once and waited for it without end.
    monkeypatch.setattr(conversations_module, "CUT_WAIT_S", 0.2)
    conversations = services.conversations
    started = asyncio.Event()

    async def dropping_the_cancel(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        started.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(30)
        await asyncio.sleep(30)
        yield  # never reached

    monkeypatch.setattr(conversations._turns, "run", dropping_the_cancel)
    feed = conversations.start("stubborn", [HumanMessage("tell me a long story")])
    await asyncio.wait_for(started.wait(), 5)
    assert await asyncio.wait_for(conversations.aclose(), 5) == ["stubborn"]
    ended = [e async for e in feed.read()][-1]
    assert isinstance(ended, RunFailed)
    assert ended.code == "run_cancelled"


async def _left_running(model_settings: Any, fake_llm: FakeLLM, then: str) -> Any:
    """A run of thread "left" cut off in its model call by a stop with no grace, left for
    the next start to take up; its model call cut off once more (``then``), then answered.
    Returns the settings (no grace)."""
    settings = model_settings.model_copy(update={"shutdown_grace_s": 0.0})
    fake_llm.script(
        Reply(content="cut off by the stop", delay=30),
        Reply(content=then, delay=30),
        Reply(content="The whole story."),
    )
    async with open_services(settings) as services:
        services.conversations.start("left", [HumanMessage("tell me a long story")])
        await _model_called(fake_llm, 1)
    return settings


async def _model_called(fake_llm: FakeLLM, times: int) -> None:
    for _ in range(100):
        if len(fake_llm.requests) >= times:
            return
        await asyncio.sleep(0.05)


async def _answered(services: Services, thread_id: str) -> list[str]:
    for _ in range(100):
        if (await services.threads.get(thread_id))["status"] == "idle":
            break
        await asyncio.sleep(0.05)
    history = await services.conversations.history(thread_id)
    return [m.text for m in history if isinstance(m, AIMessage)]


def _runs_going() -> list[asyncio.Task[Any]]:
    drive = conversations_module.Conversations._drive.__qualname__
    return [t for t in asyncio.all_tasks() if getattr(t.get_coro(), "__qualname__", "") == drive]


async def test_a_start_up_that_fails_stops_the_runs_it_took_up(
    model_settings: Any, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Runs a stopped process left are taken up before Redis's listener starts; a listener
    # refused then failed the start-up with the taken-up run still going, its store closed.
    settings = await _left_running(model_settings, fake_llm, "cut off by the failed start")

    async def refused(self: RunBus, handlers: Any) -> None:
        await _model_called(fake_llm, 2)  # the run taken up is in its model call again
        raise ConnectionError("the listener was refused")

    monkeypatch.setattr(RunBus, "listen", refused)
    shared = {"redis_url": REDIS, "redis_prefix": f"test-{uuid.uuid4().hex[:12]}"}
    with pytest.raises(ConnectionError, match="refused"):
        async with open_services(settings.model_copy(update=shared)):
            pass
    assert len(fake_llm.requests) == 2  # taken up, then stopped with the start
    assert _runs_going() == [], "a run taken up outlived the start-up that failed"
    monkeypatch.undo()
    async with open_services(settings) as services:  # the next start takes it up again
        assert await _answered(services, "left") == ["The whole story."]


async def test_a_cut_off_run_resumed_for_a_holder_stops_with_its_holder(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    # A run that takes a thread after the process of its last run died resumes that run
    # first, holding the thread through it; stopped (it lost the thread, say), it left the
    # resumed run going on a thread it no longer held.
    settings = await _left_running(model_settings, fake_llm, "cut off with its holder")
    async with open_services(settings, background=False) as services:  # none taken up
        cut = (await services.threads.get("left"))["run_id"]
        holder = asyncio.create_task(services.threads.orphans.resume_held("left", cut))
        await _model_called(fake_llm, 2)
        assert len(_runs_going()) == 1
        holder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await holder
        for _ in range(40):
            if not _runs_going():
                break
            await asyncio.sleep(0.05)
        assert _runs_going() == [], "the resumed run outlived the holder it ran for"
        assert (await services.threads.get("left"))["status"] == "running"  # left to take up
        await services.threads.orphans.resume()
        assert await _answered(services, "left") == ["The whole story."]
