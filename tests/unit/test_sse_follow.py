"""A run's events as Server-Sent Events: those that came together go out in one chunk; a
streamed workflow run's wait ends at the grace period's end once the process stops."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from agents.events import RunFinished, Token
from agents.feed import RunFeed
from app.api.routes import workflows
from app.api.sse import CutOff, Cutoffs, follow
from tests.contract import sse_events


async def test_events_that_came_together_go_out_in_one_chunk_in_order() -> None:
    # A model's tokens arrive in bursts: one write per burst, not one per token.
    feed = RunFeed("hello", run_id="r1", thread_id="t1")
    for text in ("Your ", "order ", "shipped"):
        feed.put(Token(text=text, node="expert"))
    stream = follow(feed, 0, keepalive_s=5)
    first = sse_events(await anext(stream))
    assert [e["id"] for e in first] == ["1", "2", "3"]
    assert [json.loads(e["data"])["text"] for e in first] == ["Your ", "order ", "shipped"]
    feed.put(Token(text=".", node="expert"))
    feed.put(RunFinished("t1", "r1", AIMessage(content="Your order shipped.")))
    feed.close()
    rest = [sse_events(chunk) async for chunk in stream]
    assert len(rest) == 1
    assert [(e["event"], e["id"]) for e in rest[0]] == [("token", "4"), ("run_finished", "5")]


async def test_a_reader_that_reconnects_gets_the_events_after_its_last_id_in_one_chunk() -> None:
    feed = RunFeed("hello", run_id="r1", thread_id="t1")
    for text in ("a", "b", "c", "d"):
        feed.put(Token(text=text, node="expert"))
    feed.close()
    chunks = [sse_events(chunk) async for chunk in follow(feed, 2, keepalive_s=5)]
    assert [[e["id"] for e in chunk] for chunk in chunks] == [["3", "4"]]


def test_the_answers_events_read_back_from_another_process_are_the_ones_written() -> None:
    # A run elsewhere reaches a retried chat request as (type, data) through Redis.
    from agents.events import RunFailed, answer_event, event_data, event_name

    written = [
        Token(text="Ship", node="expert"),
        RunFinished("t1", "r1", AIMessage(content="Shipped."), {"total_tokens": 9}),
        RunFailed("t1", "r2", "model_unavailable", "The model is down.", {"profile": "main"}),
    ]
    read = [answer_event(event_name(e), json.loads(json.dumps(event_data(e)))) for e in written]
    assert read[0] == written[0]
    assert isinstance(read[1], RunFinished)
    assert (read[1].run_id, read[1].message.text, read[1].usage) == (
        "r1",
        "Shipped.",
        {"total_tokens": 9},
    )
    assert read[2] == written[2]
    assert answer_event("node_started", {"node": "route"}) is None


async def test_a_retried_chat_across_a_hand_over_gets_only_the_text_past_what_it_was_sent() -> None:
    # The run elsewhere streamed "Your order", was cut off, and the run that resumed it wrote
    # the answer anew; the client, which cannot take text back, gets the rest.
    from agents.bus import RunBus

    shared = [
        ("token", {"text": "Your ", "node": "expert"}),
        ("token", {"text": "order", "node": "expert"}),
        ("reconnect", {"run_id": "r2", "reason": "resumed"}),
        ("node_started", {"node": "expert"}),
        ("token", {"text": "Your order has shipped.", "node": "expert"}),
        ("run_finished", {"thread_id": "t", "run_id": "r2", "answer": "Your order has shipped."}),
    ]

    class Replayed(RunBus):  # the shared stream as Redis would give it
        async def follow(self, run_id: str) -> Any:
            for item in shared:
                yield item

    bus = Replayed("redis://127.0.0.1:6379/0")  # never connects: follow is replayed
    got = [e async for e in bus.answer("r1")]
    text = "".join(e.text for e in got if isinstance(e, Token))
    assert text == "Your order has shipped."
    assert [type(e).__name__ for e in got][-1] == "RunFinished"


async def waited(cutoffs: Cutoffs, seconds: float) -> bool:
    """Whether a wait of ``seconds`` bounded by ``cutoffs`` ran to its end."""
    try:
        async with cutoffs.wait():
            await asyncio.sleep(seconds)
    except TimeoutError:
        return False
    return True


async def test_a_cutoff_wait_ends_only_at_the_end_of_the_grace_period_after_a_stop() -> None:
    cutoffs = Cutoffs(grace_s=0.2)
    assert await waited(cutoffs, 0.05)  # not stopping: no deadline
    loop = asyncio.get_running_loop()
    began = loop.time()
    loop.call_later(0.05, cutoffs.stop)  # told to stop while waiting
    assert not await waited(cutoffs, 5)
    assert 0.2 <= loop.time() - began < 1.0
    assert not await waited(cutoffs, 5)  # after the stop: by the same deadline, passed
    assert loop.time() - began < 1.0


async def test_a_streamed_workflow_run_ends_with_handed_over_only_when_cut_off() -> None:
    async def stuck() -> AsyncIterator[dict[str, Any]]:
        await asyncio.sleep(30)  # a step under way
        yield {"type": "never"}

    async def store_times_out() -> AsyncIterator[dict[str, Any]]:
        raise TimeoutError("the store did not answer")
        yield {}

    first = {"type": "node_started", "node": "lookup"}
    cutoffs = Cutoffs(grace_s=0.05)
    cut = workflows._sse(first, cutoffs.detached_events(stuck()), ["run-1"])
    assert "node_started" in await anext(cut)
    asyncio.get_running_loop().call_later(0.05, cutoffs.stop)
    last = await anext(cut)
    assert last.startswith("event: handed_over\n")
    assert json.loads(last.split("data: ", 1)[1])["url"] == "/v1/workflow-runs/run-1"
    failing = workflows._sse(
        first, Cutoffs(grace_s=5).detached_events(store_times_out()), ["run-2"]
    )
    await anext(failing)
    told = await anext(failing)  # the run's own error, not a cut-off: said as an error
    assert told.startswith("event: error\n"), told
    assert json.loads(told.split("data: ", 1)[1])["run_id"] == "run-2"
    with pytest.raises(StopAsyncIteration):
        await anext(failing)


async def test_detached_work_goes_on_when_its_reader_goes_away() -> None:
    # A workflow run was driven by the request reading it: a client that went away stopped
    # it where it was, RUNNING until the service's next start.
    done: list[str] = []

    async def run() -> AsyncIterator[dict[str, Any]]:
        for step in ("lookup", "answer", "end"):
            await asyncio.sleep(0.05)
            done.append(step)
            yield {"type": "node_finished", "node": step}

    cutoffs = Cutoffs(grace_s=5)
    reader = cutoffs.detached_events(run())
    assert (await anext(reader))["node"] == "lookup"
    await reader.aclose()  # the client went away
    waiting = asyncio.create_task(cutoffs.detached(_after(0.2, done, "decided")))
    await asyncio.sleep(0.05)
    waiting.cancel()  # its request too
    await asyncio.sleep(0.4)
    assert done == ["lookup", "answer", "end", "decided"]


async def _after(delay: float, done: list[str], step: str) -> str:
    await asyncio.sleep(delay)
    done.append(step)
    return step


async def test_detached_work_is_cut_off_by_a_stop_and_by_closing() -> None:
    cutoffs = Cutoffs(grace_s=0.05)
    cutoffs.stop()
    with pytest.raises(CutOff):
        await cutoffs.detached(asyncio.sleep(30))
    closing = Cutoffs(grace_s=5)
    left = asyncio.create_task(closing.detached(asyncio.sleep(30)))
    await asyncio.sleep(0.05)
    await closing.aclose()  # the app closes: what was left is cancelled, waited for
    with pytest.raises(asyncio.CancelledError):
        await left
    assert await Cutoffs(grace_s=5).detached(_after(0, [], "answered")) == "answered"


async def test_closing_gives_detached_work_what_is_left_of_the_grace_period() -> None:
    # Its client gone, uvicorn does not wait for it: the app's close cancelled it at once.
    cutoffs = Cutoffs(grace_s=1.0)
    done: list[str] = []
    waiting = asyncio.create_task(cutoffs.detached(_after(0.2, done, "ended")))
    await asyncio.sleep(0.05)
    cutoffs.stop()
    await cutoffs.aclose()
    assert done == ["ended"]
    assert await waiting == "ended"
