"""Cancels of workflow runs under way (``RunStops``, ``RunDecisions.stop``): engines on one
store, in memory, the shared ones with a lease table of their own (as processes on one
PostgreSQL database would have)."""

from __future__ import annotations

import asyncio
import functools
import time
from types import SimpleNamespace
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agents.errors import RunNotFound, RunStatusConflict
from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.run import RunContext
from agents.state.documents import MemoryDocuments
from agents.workflows import unattended
from agents.workflows.conversation import WorkflowTurns
from agents.workflows.engine import WorkflowEngine
from agents.workflows.executors import NodeContext, Outcome
from agents.workflows.records import RUN
from agents.workflows.stops import STOP
from app.api.routes.workflows import _run_of
from app.auth.principal import Principal
from tests.workflowkit import Workflows

CHILD = """
name: child
description: A slow node, then another.
nodes:
  - {id: slow, kind: notify, message: slow}
  - {id: after, kind: set, values: {x: 1}}
outputs: {message: done}
"""
PARENT = """
name: parent
description: Runs the child.
nodes:
  - {id: sub, kind: workflow, workflow: child}
  - {id: tail, kind: set, values: {y: 1}}
outputs: {message: p}
"""
FLOW = """
name: flow
description: A quick node, then a slow one.
nodes:
  - {id: a, kind: set, values: {x: 1}}
  - {id: slow, kind: notify, message: slow}
outputs: {message: done}
"""
OUTER = """
name: outer
description: Runs the flow.
nodes:
  - {id: sub, kind: workflow, workflow: flow}
  - {id: tail, kind: set, values: {y: 1}}
outputs: {message: o}
"""
GATED = """
name: gated
description: An approval, then a slow node.
nodes:
  - {id: ask, kind: approval, summary: "ok?"}
  - {id: slow, kind: notify, message: slow}
outputs: {message: done}
"""


class Slow:
    """The ``notify`` nodes: slow, each start and end noted (their side effects)."""

    def __init__(self, seconds: float = 0.3) -> None:
        self.seconds = seconds
        self.effects: list[tuple[str, str]] = []
        self.begun = asyncio.Event()

    async def run(self, ctx: NodeContext) -> Outcome:
        self.effects.append(("start", ctx.run.run_id))
        self.begun.set()
        await asyncio.sleep(self.seconds)
        self.effects.append(("end", ctx.run.run_id))
        return Outcome({"message": "slow"})


class Table:
    """One lease table for the engines of a test (as a PostgreSQL table is)."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[str, float]] = {}

    async def create(self) -> None:
        pass

    async def claim(self, key: str, holder: str, lease_s: float) -> bool:
        now, row = time.monotonic(), self.rows.get(key)
        if row and row[0] != holder and row[1] > now:
            return False
        self.rows[key] = (holder, now + lease_s)
        return True

    async def renew(self, keys: list[str], holder: str, lease_s: float) -> set[str]:
        kept = set()
        for key in keys:
            if self.rows.get(key, ("", 0.0))[0] == holder:
                self.rows[key] = (holder, time.monotonic() + lease_s)
                kept.add(key)
        return kept

    async def release(self, key: str, holder: str) -> None:
        if self.rows.get(key, ("", 0.0))[0] == holder:
            del self.rows[key]

    async def alive(self, keys: list[str]) -> set[str]:
        now = time.monotonic()
        return {k for k in keys if k in self.rows and self.rows[k][1] > now}


def engine(
    *texts: str,
    slow: Slow,
    documents: MemoryDocuments | None = None,
    saver: InMemorySaver | None = None,
    table: Table | None = None,
    lease_s: float = 3,
) -> WorkflowEngine:
    """An engine (a process), sharing ``table`` (and the store) with others when given."""
    made = WorkflowEngine(
        Workflows(*texts),
        saver or InMemorySaver(),
        skills=None,
        gateway=ModelGateway(None),
        prompts=Prompts(),
        documents=documents,
        lease_s=lease_s,
    )
    if table is not None:
        made.leases.pool = object()
        made.leases._table = table  # type: ignore[assignment]
        made.leases._ready = True
    made._executors["notify"] = slow
    return made


async def started(slow: Slow) -> None:
    await asyncio.wait_for(slow.begun.wait(), 10)


async def drained(events: Any) -> None:
    async for _ in events:
        pass


async def left_running(made: WorkflowEngine, slow: Slow, task: asyncio.Task[Any]) -> None:
    """Cut ``task``'s run off in its slow node (as a process stopping does): left RUNNING."""
    await started(slow)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def checkpointed(made: WorkflowEngine, run_id: str, node: str) -> None:
    """Until the last checkpoint of run ``run_id`` holds ``node`` (its next step from there)."""
    for _ in range(1000):
        if node in await made.nodes_so_far(await made.get_run(run_id)):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"run {run_id} never checkpointed node {node!r}")


def ending(record: dict[str, Any]) -> dict[str, Any]:
    """What a cancelled run's record says of how it ended (not of when)."""
    nodes = {k: {**v, "ms": None} for k, v in record["nodes"].items()}
    shown = ("status", "error", "cancelled_while", "cancel_requested", "decision")
    return {"nodes": nodes, **{k: record[k] for k in shown if k in record}}


async def test_a_run_no_process_runs_is_cancelled_as_a_run_stopped_where_it_runs_is() -> None:
    # Found by the review: cancelled without its process (gone), its record showed no node
    # cut off; stopped in its process, it kept `cancel_requested` once ended.
    slow = Slow(5)
    made = engine(FLOW, slow=slow)
    running = asyncio.create_task(made.run("flow", {}, thread_id="t"))
    await started(slow)
    here = next(iter(made.runs.under_way))
    await checkpointed(made, here, "a")
    await made.stop(here, "cancelled by ann")
    await asyncio.gather(running, return_exceptions=True)
    slow.begun.clear()
    await left_running(made, slow, asyncio.create_task(made.run("flow", {}, thread_id="t")))
    [gone] = await made.orphans()

    await made.stop(gone, "cancelled by ann")

    stopped_here = await made.documents.get(RUN, here)
    stopped_gone = await made.documents.get(RUN, gone)
    assert stopped_here is not None
    assert stopped_gone is not None
    assert ending(stopped_gone) == ending(stopped_here)
    assert {n: v["status"] for n, v in stopped_gone["nodes"].items()} == {
        "a": "done",
        "slow": "cancelled",
    }
    assert stopped_gone["nodes"]["slow"]["visits"] == 1
    assert "cancel_requested" not in stopped_gone
    assert stopped_gone["cancelled_while"] == "running"


async def test_a_run_cut_off_as_it_is_stopped_ends_as_a_stop_ends_it() -> None:
    # Its task cancelled (its process stopping, say) as its stop came: it ended cancelled
    # with no node cut off, and its stop still asked.
    slow = Slow(5)
    made = engine(FLOW, slow=slow)
    running = asyncio.create_task(made.run("flow", {}, thread_id="t"))
    await started(slow)
    run_id = next(iter(made.runs.under_way))
    await checkpointed(made, run_id, "a")

    made.stops.here(run_id, "cancelled by ann")
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)

    stored = await made.documents.get(RUN, run_id)
    assert stored is not None
    assert (stored["status"], stored["error"]) == ("CANCELLED", "cancelled by ann")
    assert {n: v["status"] for n, v in stored["nodes"].items()} == {
        "a": "done",
        "slow": "cancelled",
    }
    assert "cancel_requested" not in stored


async def test_a_sub_workflow_run_cancelled_through_its_parent_shows_its_nodes() -> None:
    # QA: the child's record showed `nodes: {}`.
    slow = Slow(5)
    made = engine(FLOW, OUTER, slow=slow)
    running = asyncio.create_task(made.run("outer", {}, thread_id="t"))
    await started(slow)
    runs = {r["workflow"]: r["id"] for r in await made.list_runs()}
    await checkpointed(made, runs["flow"], "a")

    await made.stop(runs["outer"], "cancelled by ann")
    await asyncio.gather(running, return_exceptions=True)

    child = await made.documents.get(RUN, runs["flow"])
    parent = await made.documents.get(RUN, runs["outer"])
    assert child is not None
    assert parent is not None
    assert (child["status"], child["error"]) == ("CANCELLED", "cancelled by ann")
    assert {n: v["status"] for n, v in child["nodes"].items()} == {
        "a": "done",
        "slow": "cancelled",
    }
    assert {n: v["status"] for n, v in parent["nodes"].items()} == {"sub": "cancelled"}
    assert "cancel_requested" not in child
    assert "cancel_requested" not in parent
    assert ("end", runs["flow"]) not in slow.effects


async def test_cancelling_an_orphaned_run_cancels_its_orphaned_sub_workflow_run() -> None:
    slow = Slow()
    made = engine(CHILD, PARENT, slow=slow)
    await left_running(made, slow, asyncio.create_task(made.run("parent", {}, thread_id="t")))
    runs = {r["workflow"]: r for r in await made.list_runs()}
    assert {r["status"] for r in runs.values()} == {"RUNNING"}

    record = await made.stop(runs["parent"]["id"], "cancelled by ann")

    assert record["status"] == "CANCELLED"
    child = await made.get_run(runs["child"]["id"])
    assert (child["status"], child["error"]) == ("CANCELLED", "cancelled by ann")
    assert child["nodes"]["slow"]["status"] == "cancelled"  # where each was cut off
    assert (await made.get_run(record["id"]))["nodes"]["sub"]["status"] == "cancelled"
    assert await made.orphans() == []
    slow.effects.clear()
    assert await made.resume_orphans() == []
    assert slow.effects == []  # nothing ran after the cancel


async def test_a_sub_workflow_run_whose_parent_run_ended_is_not_gone_on_with() -> None:
    slow = Slow()
    made = engine(CHILD, PARENT, slow=slow)
    await left_running(made, slow, asyncio.create_task(made.run("parent", {}, thread_id="t")))
    runs = {r["workflow"]: r for r in await made.list_runs()}
    # The parent ended (cancelled, say, by a version that left its sub-workflows running).
    parent = {**runs["parent"], "status": "CANCELLED", "error": "cancelled by bob"}
    await made.documents.put(RUN, parent["id"], parent, owner="t", status="CANCELLED")
    slow.effects.clear()

    await made.resume_orphans()

    child = await made.get_run(runs["child"]["id"])
    assert (child["status"], child["error"]) == ("CANCELLED", "cancelled by bob")
    assert slow.effects == []  # its node under way did not run again


async def test_a_sub_workflow_run_is_not_cancelled_alone_while_its_parent_run_goes_on() -> None:
    # QA: cancelling a step's run on its own failed the run it was a step of.
    slow = Slow(1)
    made = engine(CHILD, PARENT, slow=slow)
    running = asyncio.create_task(made.run("parent", {}, thread_id="t"))
    await started(slow)
    runs = {r["workflow"]: r for r in await made.list_runs()}
    parent_id, child_id = runs["parent"]["id"], runs["child"]["id"]

    with pytest.raises(RunStatusConflict) as refused:
        await made.stop(child_id, "cancelled by ann")

    assert refused.value.code == "run_is_step"
    assert f"is a step of workflow run {parent_id} (its node 'sub'" in refused.value.message
    assert f"cancel run {parent_id} instead" in refused.value.message
    ended = await running
    assert (ended["status"], ended["outputs"]) == ("SUCCEEDED", {"message": "p"})
    assert (await made.get_run(child_id))["status"] == "SUCCEEDED"


async def test_a_sub_workflow_run_whose_parent_run_ended_is_cancelled_alone() -> None:
    slow = Slow()
    made = engine(CHILD, PARENT, slow=slow)
    await left_running(made, slow, asyncio.create_task(made.run("parent", {}, thread_id="t")))
    runs = {r["workflow"]: r for r in await made.list_runs()}
    parent = {**runs["parent"], "status": "FAILED", "error": "it broke"}
    await made.documents.put(RUN, parent["id"], parent, owner="t", status="FAILED")

    record = await made.stop(runs["child"]["id"], "cancelled by ann")

    assert (record["status"], record["error"]) == ("CANCELLED", "cancelled by ann")


async def test_a_cancel_while_another_process_decides_the_run_stops_it_without_waiting() -> None:
    documents, saver, table, slow = MemoryDocuments(), InMemorySaver(), Table(), Slow(2)
    a = engine(GATED, slow=slow, documents=documents, saver=saver, table=table, lease_s=1.5)
    b = engine(GATED, slow=slow, documents=documents, saver=saver, table=table, lease_s=1.5)
    waiting = await a.run("gated", {})
    of = b.definitions.of

    async def slow_of(record: dict[str, Any]) -> Any:  # B's prologue takes a moment
        await asyncio.sleep(0.3)
        return await of(record)

    b.definitions.of = slow_of  # type: ignore[method-assign]
    approval = waiting["waiting"]["approval_id"]
    deciding = asyncio.create_task(drained(b.decide(approval, approved=True, by="ann")))
    await asyncio.sleep(0.1)  # B holds the run, its record still WAITING
    began = time.monotonic()

    record = await a.stop(waiting["id"], "cancelled by bob")

    assert time.monotonic() - began < 1.5  # within its deadline, not the decided run's end
    assert (record["status"], record["error"]) == ("CANCELLED", "cancelled by bob")
    await deciding
    assert (await a.get_run(waiting["id"]))["status"] == "CANCELLED"
    assert ("end", waiting["id"]) not in slow.effects


async def test_a_run_another_process_ends_as_it_is_stopped_is_not_written_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    documents, saver, slow = MemoryDocuments(), InMemorySaver(), Slow(0.05)
    a = engine(FLOW, slow=slow, documents=documents, saver=saver)  # no leases shared: SQLite
    b = engine(FLOW, slow=slow, documents=documents, saver=saver)
    await left_running(a, slow, asyncio.create_task(a.run("flow", {})))
    run_id = (await a.orphans())[0]
    where_cut = unattended.where_cut

    async def resumed_elsewhere(definitions: Any, record: dict[str, Any]) -> Any:
        # After A read it RUNNING.
        assert (await b.resume(run_id))["status"] == "SUCCEEDED"
        return await where_cut(definitions, record)

    monkeypatch.setattr(unattended, "where_cut", resumed_elsewhere)

    record = await a.stop(run_id, "cancelled by ann")

    assert record["status"] == "SUCCEEDED"
    stored = await b.get_run(run_id)
    assert (stored["status"], stored["error"]) == ("SUCCEEDED", None)


async def test_a_cancel_that_outlasts_its_wait_stays_asked_and_stops_the_run() -> None:
    documents, saver, table, slow = MemoryDocuments(), InMemorySaver(), Table(), Slow(2)
    a = engine(FLOW, slow=slow, documents=documents, saver=saver, table=table, lease_s=0.6)
    b = engine(FLOW, slow=slow, documents=documents, saver=saver, table=table, lease_s=0.6)
    b.leases.on_renew = None  # B never looks between nodes: its node runs to its end
    running = asyncio.create_task(b.run("flow", {}, thread_id="t"))
    await started(slow)
    run_id = next(iter(b.runs.under_way))

    record = await a.stop(run_id, "cancelled by bob")

    assert record["status"] == "RUNNING"
    assert record["cancel_requested"]
    assert await documents.get(STOP, run_id) is not None  # the promised stop is kept
    ended = await running
    assert (ended["status"], ended["error"]) == ("CANCELLED", "cancelled by bob")
    assert await documents.get(STOP, run_id) is None  # its process took it away


async def test_a_cancel_request_cut_off_leaves_its_stop_asked() -> None:
    documents, saver, table, slow = MemoryDocuments(), InMemorySaver(), Table(), Slow(1)
    a = engine(FLOW, slow=slow, documents=documents, saver=saver, table=table, lease_s=3)
    b = engine(FLOW, slow=slow, documents=documents, saver=saver, table=table, lease_s=3)
    b.leases.on_renew = None
    running = asyncio.create_task(b.run("flow", {}, thread_id="t"))
    await started(slow)
    run_id = next(iter(b.runs.under_way))
    stopping = asyncio.create_task(a.stop(run_id, "cancelled by bob"))
    for _ in range(500):  # until its stop is stored
        if await documents.get(STOP, run_id) is not None:
            break
        await asyncio.sleep(0.01)

    stopping.cancel()  # the client went away
    await asyncio.gather(stopping, return_exceptions=True)

    assert await documents.get(STOP, run_id) is not None
    assert (await running)["status"] == "CANCELLED"


async def test_the_stops_of_runs_that_ended_are_swept() -> None:
    documents, table, slow = MemoryDocuments(), Table(), Slow(0)
    made = engine(FLOW, slow=slow, documents=documents, table=table)
    ended = await made.run("flow", {})
    await documents.put(STOP, ended["id"], {"run_id": ended["id"], "reason": "late"})
    await documents.put(STOP, "gone", {"run_id": "gone", "reason": "late"})

    await made.stops.sweep()

    assert await documents.find(STOP, limit=None) == []


async def test_a_slow_look_at_the_stops_does_not_delay_lease_renewals() -> None:
    documents, table, slow = MemoryDocuments(), Table(), Slow(1.2)
    made = engine(FLOW, slow=slow, documents=documents, table=table, lease_s=0.6)
    other = engine(FLOW, slow=slow, documents=documents, table=table, lease_s=0.6)

    async def stalled() -> None:
        await asyncio.sleep(30)

    made.leases.on_renew = stalled
    running = asyncio.create_task(made.run("flow", {}))
    await started(slow)
    run_id = next(iter(made.runs.under_way))
    await asyncio.sleep(0.9)  # past its lease, had a renewal waited for the look

    assert await other.leases.claim(run_id) is False  # still this process's
    assert (await running)["status"] == "SUCCEEDED"


async def test_a_keyed_start_that_follows_a_run_left_running_is_charged() -> None:
    slow = Slow()
    made = engine(FLOW, slow=slow)
    first = asyncio.create_task(made.run("flow", {}, idempotency_key="k", user="ann"))
    await left_running(made, slow, first)
    charged: list[dict[str, int]] = []

    record = await made.run("flow", {}, idempotency_key="k", user="ann", usage_sink=charged.append)

    assert record["status"] == "SUCCEEDED"
    assert len(charged) == 1


async def test_a_run_stopped_before_its_first_step_keeps_the_nodes_it_ran() -> None:
    slow = Slow()
    made = engine(FLOW, slow=slow)
    await left_running(made, slow, asyncio.create_task(made.run("flow", {})))
    run_id = (await made.orphans())[0]
    made.stops.here(run_id, "cancelled by ann")  # seen as it is resumed

    record = await made.resume(run_id)

    assert record["status"] == "CANCELLED"
    assert record["nodes"]["a"]["status"] == "done"


async def test_a_run_that_ends_as_it_is_cancelled_is_not_said_to_be_cancelled() -> None:
    slow = Slow(0)
    made = engine(FLOW, slow=slow)

    async def asked_as_it_ends(ctx: NodeContext) -> Outcome:  # the flag, the stop too late
        made.runs.under_way[ctx.run.run_id]["cancel_requested"] = True
        return Outcome({"message": "slow"})

    slow.run = asked_as_it_ends  # type: ignore[method-assign]
    record = await made.run("flow", {})

    assert record["status"] == "SUCCEEDED"
    assert "cancel_requested" not in await made.get_run(record["id"])


async def test_a_crash_does_not_show_its_exception_text_in_the_run() -> None:
    made = engine(FLOW, slow=Slow(0))

    async def there(thread_id: str) -> bool:  # the store fails under the run
        raise OSError("connection to db.internal:5432 as user admin failed")

    made.watch_threads(there)
    record = await made.run("flow", {}, thread_id="t")

    assert record["status"] == "FAILED"
    assert "OSError" in record["error"]
    assert "db.internal" not in record["error"]


async def test_another_users_run_is_not_looked_at_before_it_is_found_not_theirs() -> None:
    made = engine(FLOW, slow=Slow(0))
    record = await made.run("flow", {}, user="ann")
    looked: list[str] = []

    async def look(run_id: str) -> dict[str, Any]:  # reads the run's checkpoint
        looked.append(run_id)
        return await made.get_run(run_id)

    services = SimpleNamespace(engine=SimpleNamespace(get_run=made.get_run, look=look))
    bob = Principal(user="bob", scopes=frozenset({"chat"}))
    with pytest.raises(RunNotFound):
        await _run_of(services, bob, record["id"], look=True)
    assert looked == []
    ann = Principal(user="ann", scopes=frozenset({"chat"}))
    assert (await _run_of(services, ann, record["id"], look=True))["id"] == record["id"]
    assert looked == [record["id"]]


class Forgotten:
    """A node's recorded replies (``Recorded``): whether they were forgotten."""

    def __init__(self) -> None:
        self.forgotten = False

    async def forget(self) -> None:
        self.forgotten = True


async def test_a_stop_that_coincides_with_another_cancel_forgets_and_charges_as_a_stop_does() -> (
    None
):
    # Found by the review: ended CANCELLED on this path, its run kept its nodes' recorded
    # replies and its starter was not charged for it, as the path of a stop alone does.
    slow, recorded = Slow(5), Forgotten()
    made = engine(FLOW, slow=slow)
    run = slow.run

    async def recording(ctx: NodeContext) -> Outcome:
        ctx.run.recorded.append(recorded)  # type: ignore[arg-type]
        return await run(ctx)

    slow.run = recording  # type: ignore[method-assign]
    charged: list[dict[str, int]] = []
    running = asyncio.create_task(drained(made.stream("flow", {}, usage_sink=charged.append)))
    await started(slow)
    run_id = next(iter(made.runs.under_way))

    made.stops.here(run_id, "cancelled by ann")
    running.cancel()  # the service stopping, say, at that moment
    await asyncio.gather(running, return_exceptions=True)

    stored = await made.get_run(run_id)
    assert (stored["status"], stored["error"]) == ("CANCELLED", "cancelled by ann")
    assert recorded.forgotten
    assert len(charged) == 1


async def test_a_chat_run_cancelled_after_its_turn_was_cut_off_is_told_once_by_that_turn() -> None:
    # Its turn's process died mid-run: the cancel does not tell the thread, the turn that
    # answers the message again (the thread resumed, or the message resent) does.
    slow, posted = Slow(), list[str]()
    made = engine(FLOW, slow=slow)
    turns = WorkflowTurns(made, ModelGateway(None), Prompts())

    async def post(thread_id: str, message: Any, *_: Any) -> None:
        posted.append(str(message.content))

    made.after_decision = functools.partial(turns.resumed, post=post)

    def turn() -> RunContext:
        return RunContext(thread_id="t", turn_id="m1")

    await left_running(
        made, slow, asyncio.create_task(turns.answer("flow", "go", None, turn(), {}))
    )
    [run_id] = await made.orphans()

    record = await turns.cancel(run_id, by="ann", post=post)

    assert (record["status"], record["error"]) == ("CANCELLED", "cancelled by ann")
    assert posted == []
    again = await turns.answer("flow", "go", None, turn(), {})
    assert "cancelled by ann" in again.reply
    assert posted == []


async def failed_turn(made: WorkflowEngine, posted: list[str]) -> tuple[WorkflowTurns, Any]:
    """A chat turn that failed outright, its run left RUNNING (the store failed on its last
    save); the turns and their ``post``, which notes what is posted to a thread."""
    turns = WorkflowTurns(made, ModelGateway(None), Prompts())

    async def post(thread_id: str, message: Any, *_: Any) -> None:
        posted.append(str(message.content))

    made.after_decision = functools.partial(turns.resumed, post=post)
    put = made.documents.put

    async def failing(kind: str, doc_id: str, doc: dict[str, Any], **kw: Any) -> None:
        if kw.get("status") not in (None, "RUNNING"):  # its end is never stored
            raise TimeoutError("the store did not answer")
        await put(kind, doc_id, doc, **kw)

    made.documents.put = failing  # type: ignore[method-assign]
    with pytest.raises(TimeoutError):
        await turns.answer("flow", "go", None, RunContext(thread_id="t", turn_id="m1"), {})
    made.documents.put = put  # type: ignore[method-assign]
    return turns, post


async def test_a_run_whose_chat_turn_failed_is_told_to_its_thread_when_cancelled() -> None:
    # Found by the review: its turn had failed, so nobody answered with its end, and the
    # cancel told nobody either (it left that to the turn).
    posted: list[str] = []
    made = engine(FLOW, slow=Slow(0))
    turns, post = await failed_turn(made, posted)
    [run_id] = await made.orphans()

    record = await turns.cancel(run_id, by="ann", post=post)

    assert (record["status"], record["error"]) == ("CANCELLED", "cancelled by ann")
    assert posted == [turns.reply(record)]  # once: the cancel's answer does not tell it again


async def test_a_run_whose_chat_turn_failed_is_told_to_its_thread_once_resumed() -> None:
    posted: list[str] = []
    made = engine(FLOW, slow=Slow(0))
    turns, _ = await failed_turn(made, posted)
    [run_id] = await made.orphans()

    assert await made.resume_orphans() == [run_id]

    record = await made.get_run(run_id)
    assert record["status"] == "SUCCEEDED"
    assert posted == [turns.reply(record)]
