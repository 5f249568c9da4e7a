"""An ended run kept for its retention holds its events as one pickled blob: readers see the
same events, the garbage collector walks a handful of objects instead of dozens a run."""

from __future__ import annotations

import gc
import pickle
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from agents.events import (
    NodeFinished,
    NodeStarted,
    RouteDecided,
    RunFailed,
    RunFinished,
    Token,
    ToolCalled,
    ToolReturned,
)
from agents.feed import PackedEvents, RunFeed
from app.api.sse import follow


def tracked(root: Any) -> int:
    """How many objects the garbage collector tracks among those reachable from ``root``
    (classes aside)."""
    seen: set[int] = set()
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or not gc.is_tracked(obj) or isinstance(obj, type):
            continue  # classes (and what they reach) are there anyway
        seen.add(id(obj))
        todo.extend(gc.get_referents(obj))
    return len(seen)


def ended_run() -> RunFeed:
    feed = RunFeed("where is my order?", run_id="r1", thread_id="t1")
    feed.begin()
    feed.put(NodeStarted(node="route"))
    feed.put(RouteDecided(kind="skill", target="orders", by="retrieval", skills=["orders"]))
    feed.put(ToolCalled(tool="orders__lookup", arguments={"order_id": "ORD1"}, call_id="c1"))
    feed.put(ToolReturned(tool="orders__lookup", call_id="c1", ok=True, content="shipped"))
    for text in ("Your ", "order ", "shipped."):
        feed.put(Token(text=text, node="expert"))
    feed.put(NodeFinished(node="expert"))
    answer = AIMessage(content="Your order shipped.", id="m1")
    feed.put(RunFinished("t1", "r1", answer, usage={"total_tokens": 42, "model_calls": 2}))
    feed.close()
    return feed


async def replay(feed: RunFeed, after: int = 0) -> str:
    return "".join([chunk async for chunk in follow(feed, after, keepalive_s=5)])


async def test_a_packed_run_reads_the_same_and_the_collector_walks_few_objects() -> None:
    feed = ended_run()
    before = (list(feed.events), feed.status, feed.summary(), await replay(feed, 3))
    walked_before = tracked(feed.events)
    feed.pack()
    assert isinstance(feed.events, PackedEvents)
    assert (list(feed.events), feed.status, feed.summary(), await replay(feed, 3)) == before
    assert feed.events[-1] == before[0][-1]
    assert feed.events[2:4] == before[0][2:4]
    assert walked_before >= 15
    assert tracked(feed.events) <= 2


def test_only_an_ended_run_is_packed_and_a_late_event_unpacks_it() -> None:
    feed = RunFeed("hi", run_id="r2", thread_id="t2")
    feed.put(Token(text="Hel", node="assistant"))
    feed.pack()  # under way: its readers append-read it
    assert isinstance(feed.events, list)
    feed.close()
    feed.pack()
    feed.put(Token(text="lo", node="assistant"))
    assert [e.text for e in feed.events if isinstance(e, Token)] == ["Hel", "lo"]


async def test_a_packed_run_read_from_its_start_is_unpickled_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    feed = ended_run()
    events = list(feed.events)
    feed.pack()
    loads = pickle.loads
    calls: list[bytes] = []

    def counted(blob: bytes) -> Any:
        calls.append(blob)
        return loads(blob)

    monkeypatch.setattr(pickle, "loads", counted)
    assert [e async for e in feed.read()] == events
    assert len(calls) == 1  # was once an event: a long answer's thousands of tokens


def test_an_event_after_the_pack_is_counted_in_the_status() -> None:
    feed = ended_run()
    feed.pack()
    assert feed.status == "succeeded"
    feed.put(RunFailed("t1", "r1", "internal_error", "it broke"))
    assert feed.status == "failed"


def test_a_run_refused_after_it_was_accepted_shows_why() -> None:
    # QA: bob's run on a thread alice's first run made meanwhile was accepted, then ended
    # "failed" with no error at all.
    from agents.errors import ThreadNotFound

    feed = RunFeed("mine?", run_id="r3", thread_id="t3")
    feed.close(ThreadNotFound("There is no thread 't3'."))
    summary = feed.summary()
    assert summary["status"] == "failed"
    assert summary["error"] == {"code": "thread_not_found", "message": "There is no thread 't3'."}
