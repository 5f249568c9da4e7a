"""How a workflow run's end is recorded and told when something happens to it while a driver
holds it: its chat turn fails elsewhere, a cancel cuts it off before its stream was read."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

from langgraph.checkpoint.memory import InMemorySaver

from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.run import RunContext
from agents.workflows.conversation import WorkflowTurns
from agents.workflows.cutoffs import Reached, end_stopped
from agents.workflows.engine import WorkflowEngine
from agents.workflows.executors import NodeContext, Outcome
from agents.workflows.records import RUN
from tests.workflowkit import Workflows

FLOW = """
name: flow
description: A quick node, then a slow one.
nodes:
  - {id: a, kind: set, values: {x: 1}}
  - {id: slow, kind: notify, message: slow}
outputs: {message: done}
"""


class Slow:
    """The ``notify`` nodes: slow; ``begun`` set once one starts."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.begun = asyncio.Event()

    async def run(self, ctx: NodeContext) -> Outcome:
        self.begun.set()
        await asyncio.sleep(self.seconds)
        return Outcome({"message": "slow"})


def engine(slow: Slow) -> WorkflowEngine:
    made = WorkflowEngine(
        Workflows(FLOW),
        InMemorySaver(),
        skills=None,
        gateway=ModelGateway(None),
        prompts=Prompts(),
    )
    made._executors["notify"] = slow
    return made


async def started(slow: Slow) -> None:
    await asyncio.wait_for(slow.begun.wait(), 10)
    slow.begun.clear()


def telling(made: WorkflowEngine, posted: list[str]) -> WorkflowTurns:
    """The chat turns of ``made``, which tell a thread what is posted to it in ``posted``."""
    turns = WorkflowTurns(made, ModelGateway(None), Prompts())

    async def post(thread_id: str, message: Any, *_: Any) -> None:
        posted.append(str(message.content))

    made.after_decision = functools.partial(turns.resumed, post=post)
    return turns


async def chat_run_left_running(made: WorkflowEngine, turns: WorkflowTurns, slow: Slow) -> str:
    """A chat turn's run cut off in its slow node (its process stopped): left RUNNING."""
    turn = turns.answer("flow", "go", None, RunContext(thread_id="t", turn_id="m1"), {})
    task = asyncio.create_task(turn)
    await started(slow)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    [run_id] = await made.orphans()
    return run_id


async def test_a_chat_turn_that_fails_while_its_run_is_resumed_is_told_at_the_runs_end() -> None:
    # Found by the review: the turn's mark was stored while a restarted process resumed the
    # run; that process's last save wrote over it and, having read the run before the mark,
    # it told nobody: the run ended and its thread heard nothing.
    slow, posted = Slow(0.3), list[str]()
    made = engine(slow)
    turns = telling(made, posted)
    run_id = await chat_run_left_running(made, turns, slow)
    resuming = asyncio.create_task(made.resume_orphans())
    await started(slow)  # its driver holds the run, read without the mark

    await made.turn_failed(run_id)  # the message resent, that turn failed

    assert (await made.documents.get(RUN, run_id) or {}).get("turn_failed")
    assert await resuming == [run_id]
    record = await made.get_run(run_id)
    assert record["status"] == "SUCCEEDED"
    assert record["turn_failed"] is True
    assert posted == [turns.reply(record)]


async def test_a_run_whose_chat_turn_failed_is_told_once_when_stopped_as_it_is_resumed() -> None:
    slow, posted = Slow(5), list[str]()
    made = engine(slow)
    turns = telling(made, posted)
    run_id = await chat_run_left_running(made, turns, slow)
    await made.turn_failed(run_id)
    resuming = asyncio.create_task(made.resume_orphans())
    await started(slow)

    await made.stop(run_id, "cancelled by ann")

    await resuming
    record = await made.get_run(run_id)
    assert (record["status"], record["error"]) == ("CANCELLED", "cancelled by ann")
    assert posted == [turns.reply(record)]


class Lagging:
    """A run's graph whose stream's reader has not read the chunks of node ``a``'s step (its
    update, its state after it, its checkpoint) when a cancel cuts the run off: the graph
    went on past them, its checkpoint saved, as LangGraph's does before they are read."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph

    def __getattr__(self, name: str) -> Any:
        return getattr(self.graph, name)

    async def astream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async for mode, payload in self.graph.astream(*args, **kwargs):
            if mode != "custom" and "a" in _nodes(mode, payload):
                continue
            yield mode, payload


def _nodes(mode: str, payload: Any) -> dict[str, Any]:
    """The nodes a stream chunk's state (or update) holds."""
    if mode == "updates":
        updates = [u.get("nodes") or {} for u in payload.values() if isinstance(u, dict)]
        return {n: s for u in updates for n, s in u.items()}
    state = payload.get("values", payload) if mode == "checkpoints" else payload
    return dict((state or {}).get("nodes") or {})


async def test_a_run_cut_off_ahead_of_its_stream_reader_keeps_the_nodes_its_checkpoint_holds() -> (
    None
):
    # Found by the review: cut off, its record took the cut nodes from its checkpoint but
    # its nodes' states from the last state its reader read, a step behind: `a` was missing.
    slow = Slow(5)
    made = engine(slow)
    graph = made.definitions.graph
    made.definitions.graph = lambda workflow: cast(Any, Lagging(graph(workflow)))  # type: ignore[method-assign]
    running = asyncio.create_task(made.run("flow", {}))
    await started(slow)
    run_id = next(iter(made.runs.under_way))
    assert "a" not in made.runs.under_way[run_id]["nodes"]  # its reader lags

    await made.stop(run_id, "cancelled by ann")

    await asyncio.gather(running, return_exceptions=True)
    record = await made.get_run(run_id)
    assert (record["status"], record["error"]) == ("CANCELLED", "cancelled by ann")
    assert {n: v["status"] for n, v in record["nodes"].items()} == {
        "a": "done",
        "slow": "cancelled",
    }
    assert record["nodes"]["slow"]["visits"] == 1


async def test_a_run_cut_off_keeps_what_was_read_of_it_when_its_checkpoint_read_back_is_older() -> (
    None
):
    # A fork's config names the checkpoint it began at: read back, that state is behind the
    # one its reader read (the checkpoint's is taken only when it is not older).
    done = {"status": "done", "ms": 1, "error": None, "visits": 1, "output": {"x": 1}}
    began = SimpleNamespace(values={"nodes": {"a": done}}, next=("b",))

    class Graph:
        async def aget_state(self, config: Any) -> Any:
            return began

    read = {"nodes": {"a": done, "b": done}, "usage": {"calls": 2}}
    reached = Reached(values=read, noted={"b"}, graph=Graph(), config={})
    record: dict[str, Any] = {"id": "r", "nodes": {"b": done}}

    values = await end_stopped(cast(Any, None), record, "cancelled by ann", reached, cut_off=True)

    assert values == read
    assert {n: v["status"] for n, v in record["nodes"].items()} == {"a": "done", "b": "done"}
