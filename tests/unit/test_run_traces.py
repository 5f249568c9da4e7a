"""Run traces stay small: tokens dropped, long values cut, a thread's oldest traces deleted
past its limit."""

from __future__ import annotations

import asyncio
import json

from langchain_core.messages import AIMessage

from agents.events import (
    ApprovalRequired,
    NodeFinished,
    RouteDecided,
    RunFailed,
    RunFinished,
    Token,
    ToolCalled,
    ToolReturned,
)
from agents.state.documents import MemoryDocuments
from agents.state.traces import MAX_BYTES, MAX_TEXT, TRACE, RunTraces, compact


def finished(run_id: str, answer: str = "a") -> RunFinished:
    return RunFinished("t", run_id, AIMessage(content="done", id=answer), {"total_tokens": 3})


def test_a_trace_keeps_the_decisions_not_the_tokens_and_cuts_long_values() -> None:
    events = [
        RouteDecided("skill", "s", "retrieval", [{"name": "s", "score": 0.9}]),
        ToolCalled("get", {"q": "x" * 5000}, "c1"),
        ToolReturned("get", "c1", True, "y" * 5000),
        Token("do", "expert"),
        Token("ne", "expert"),
        NodeFinished("expert", ms=12.5),
        finished("r1"),
    ]
    kept = compact(events)
    assert [e["type"] for e in kept] == [
        "route_decided",
        "tool_called",
        "tool_returned",
        "node_finished",
        "run_finished",
    ]
    assert kept[0]["data"]["candidates"] == [{"name": "s", "score": 0.9}]
    assert len(kept[1]["data"]["arguments"]["q"]) == MAX_TEXT + 1  # cut, with an ellipsis
    assert kept[2]["data"]["content"].endswith("…")
    assert kept[3]["data"]["ms"] == 12.5
    assert "answer" not in kept[4]["data"]
    assert kept[4]["data"]["usage"] == {"total_tokens": 3}


def test_a_thread_keeps_its_last_runs_traces_and_each_is_bounded() -> None:
    documents = MemoryDocuments()
    traces = RunTraces(documents, keep_runs=2)
    huge = [ToolReturned("get", f"c{i}", True, "z" * 3000) for i in range(100)]

    async def go() -> None:
        await traces.save("t", "r1", [finished("r1", "m1")], started=1.0)
        waiting = [ApprovalRequired("ap", "w", "approve", "a refund"), finished("r2", "m2")]
        await traces.save("t", "r2", waiting, started=2.0)
        await traces.save("t", "r3", [*huge, finished("r3", "m3")], started=3.0)
        assert (await traces.runs("t")).answers == {"m2": "r2", "m3": "r3"}
        assert await traces.get("t", "r1") is None  # the oldest went
        assert (await traces.get("t", "r2") or {})["status"] == "interrupted"
        assert await traces.get("other", "r3") is None  # only through its own thread
        big = await traces.get("t", "r3")
        assert big is not None
        assert len(json.dumps(big)) < MAX_BYTES
        await traces.delete_thread("t")
        assert not [key for key in documents.rows if key[0] == TRACE]
        assert (await traces.runs("t")).answers == {}

    asyncio.run(go())


def test_a_failed_run_is_kept_after_the_message_before_it_and_a_fork_takes_its_traces() -> None:
    documents = MemoryDocuments()
    traces = RunTraces(documents)
    failed = RunFailed("t", "r2", "model_error", "The model failed: " + "x" * 500)

    async def go() -> None:
        await traces.save("t", "r1", [finished("r1", "m1")], started=1.0)
        await traces.save(
            "t", "r2", [RouteDecided("direct", None, "rule"), failed], started=2.0, after="u2"
        )
        runs = await traces.runs("t")
        assert runs.answers == {"m1": "r1"}
        assert runs.failed["u2"]["run_id"] == "r2"
        assert runs.failed["u2"]["code"] == "model_error"
        assert runs.failed["u2"]["message"].endswith("…")  # cut short for the thread's view
        assert (await traces.get("t", "r2") or {})["status"] == "failed"

        # A fork that copies m1 and u2 (not m3) takes those traces, under its own run ids.
        await traces.save("t", "r3", [finished("r3", "m3")], started=3.0)
        assert await traces.copy("t", "f", ["m1", "u2"]) == 2
        forked = await traces.runs("f")
        assert set(forked.answers) == {"m1"}
        assert set(forked.failed) == {"u2"}
        copied = await traces.get("f", forked.answers["m1"])
        assert copied is not None
        assert copied["copied_from"] == "r1"
        assert forked.answers["m1"] != "r1"
        # Each thread owns its copies: deleting the original leaves the fork's.
        await traces.delete_thread("t")
        assert await traces.get("f", forked.failed["u2"]["run_id"]) is not None
        assert await traces.get("t", "r1") is None

    asyncio.run(go())
