"""One approval decided from two processes at the same instant, on SQLite (no leases
across processes) and PostgreSQL: one decision is taken, the other is refused saying which
was, and the run's next step runs once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import pytest

from agents.errors import AlreadyDecided
from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.state.checkpointers import open_checkpointer
from agents.state.documents import documents_for
from agents.workflows.engine import WorkflowEngine
from tests.fakellm import FakeLLM, Reply
from tests.workflowkit import Workflows

ASK_THEN_WRITE = """
name: ask-then-write
description: An approval, then a model call (the step a decision lets run).
nodes:
  - {id: ok, kind: approval, summary: "Go?", next: write}
  - {id: write, kind: llm, prompt: Say it is done.}
outputs: {message: "{{ nodes.write.output }}"}
"""


@asynccontextmanager
async def process(url: str, gateway: ModelGateway) -> AsyncIterator[WorkflowEngine]:
    """The workflow engine of one process: a connection (and checkpointer) of its own."""
    async with open_checkpointer(url) as saver:
        engine = WorkflowEngine(
            Workflows(ASK_THEN_WRITE),
            saver,
            skills=None,
            gateway=gateway,
            prompts=Prompts(),
            documents=documents_for(saver),
        )
        try:
            yield engine
        finally:
            engine.leases.abandon()


def read_together(engines: list[WorkflowEngine], *, first: int | None = None) -> list[bool]:
    """Each engine, having read the run as stored before it decides (or cancels), waits (at
    most a second: on PostgreSQL the lease keeps the other out) until the other has too;
    with ``first``, the other one then waits until engine ``first`` has written, if that
    one read too (on PostgreSQL it may still wait for the lease). Returns, per read, whether
    the other engine had read by then (on SQLite both must have: else the race was not
    run)."""
    read = [asyncio.Event() for _ in engines]
    together: list[bool] = []
    written = asyncio.Event()
    for n, engine in enumerate(engines):
        stored = engine.runs.stored

        async def stored_then_wait(run_id: str, n: int = n, stored: Any = stored) -> dict[str, Any]:
            record: dict[str, Any] = await stored(run_id)
            read[n].set()
            with suppress(TimeoutError):
                await asyncio.wait_for(read[1 - n].wait(), 1)
            together.append(read[1 - n].is_set())
            if first == 1 - n and read[first].is_set():
                await asyncio.wait_for(written.wait(), 5)
            return record

        engine.runs.stored = stored_then_wait  # type: ignore[method-assign]
    if first is not None:
        documents: Any = engines[first].documents
        for name in ("merge", "put"):  # its first write: a decision, or a cancel
            documents.__dict__[name] = _then_set(getattr(documents, name), written)
    return together


def _then_set(write: Any, written: asyncio.Event) -> Any:
    async def write_then_set(*args: Any, **kwargs: Any) -> Any:
        try:
            return await write(*args, **kwargs)
        finally:
            written.set()

    return write_then_set


async def test_two_processes_deciding_one_approval_at_once_take_one_decision(
    shared_store: str, gateway: ModelGateway, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Done."))
    async with process(shared_store, gateway) as a, process(shared_store, gateway) as b:
        waiting = await a.run("ask-then-write", {})
        approval = waiting["waiting"]["approval_id"]
        together = read_together([a, b])

        async def decide(engine: WorkflowEngine, by: str, approved: bool) -> dict[str, Any]:
            events = [e async for e in engine.decide(approval, approved=approved, by=by)]
            return dict(events[-1]["record"])

        outcomes = await asyncio.gather(
            decide(a, "ann", True), decide(b, "bob", True), return_exceptions=True
        )
        refused = [o for o in outcomes if isinstance(o, BaseException)]
        ended = [o for o in outcomes if not isinstance(o, BaseException)]
        assert [type(e) for e in refused] == [AlreadyDecided], outcomes
        assert "was decided already" in str(refused[0])
        [record] = ended
        assert (record["status"], record["outputs"]) == ("SUCCEEDED", {"message": "Done."})
        winner = "ann" if outcomes[0] is record else "bob"
        stored = await b.get_run(waiting["id"])
        assert stored["status"] == "SUCCEEDED"
        assert stored["decided"] == [approval]
        assert stored["nodes"]["ok"]["output"]["by"] == winner
    assert len(fake_llm.requests) == 1  # the step after the gate ran once, not twice
    if shared_store.startswith("sqlite"):  # both read before either wrote: the race was run
        assert together[:2] == [True, True], together


@pytest.mark.parametrize("first", ["decision", "cancel"])
async def test_a_cancel_and_a_decision_of_one_approval_at_once_in_two_processes_one_wins(
    shared_store: str, gateway: ModelGateway, fake_llm: FakeLLM, first: str
) -> None:
    fake_llm.script(Reply(content="Done."))
    async with process(shared_store, gateway) as a, process(shared_store, gateway) as b:
        waiting = await a.run("ask-then-write", {})
        run_id, approval = waiting["id"], waiting["waiting"]["approval_id"]
        together = read_together([a, b], first=1 if first == "decision" else 0)

        async def decide() -> dict[str, Any]:
            events = [e async for e in b.decide(approval, approved=True, by="bob")]
            return dict(events[-1]["record"])

        cancelled, decided = await asyncio.gather(
            a.cancel(run_id, "withdrawn by ann", approval_id=approval),
            decide(),
            return_exceptions=True,
        )
        stored = await b.get_run(run_id)
    assert not isinstance(cancelled, BaseException), cancelled
    if isinstance(decided, BaseException):  # the cancel won
        assert isinstance(decided, AlreadyDecided), decided
        assert "can no longer be decided" in str(decided)
        assert cancelled["status"] == "CANCELLED"
        assert (stored["status"], stored["error"]) == ("CANCELLED", "withdrawn by ann")
        assert not stored.get("decided")
        assert fake_llm.requests == []  # the step after the gate never ran
        fake_llm.allow_leftovers()
    else:  # the decision won: the run went on, and the cancel left it as it was
        assert cancelled["status"] in ("RUNNING", "SUCCEEDED"), cancelled
        assert (decided["status"], decided["outputs"]) == ("SUCCEEDED", {"message": "Done."})
        assert (stored["status"], stored["decided"]) == ("SUCCEEDED", [approval])
        assert len(fake_llm.requests) == 1
    if shared_store.startswith("sqlite"):  # no lease orders them: the first to write wins
        assert together[:2] == [True, True], together  # both read before either wrote
        assert isinstance(decided, BaseException) == (first == "cancel")
