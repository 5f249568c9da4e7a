"""The workflow engine on workflows written here: every node kind that needs no model or
skill, branches, joins, approvals, errors and their handling, execution records."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agents import metrics
from agents.errors import AlreadyDecided, BadInputs, FailedForGood, RunNotFound
from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.workflows.engine import WorkflowEngine
from agents.workflows.executors import NodeContext, RunInfo
from agents.workflows.executors.subflow import SubWorkflowExecutor
from tests.workflowkit import Workflows

REFUND = """
name: refund
description: Small refunds at once, large ones approved.
inputs: {amount: {type: number}}
nodes:
  - {id: check, kind: switch, cases: [{when: inputs.amount < 50, goto: auto}], otherwise: ask}
  - {id: auto, kind: set, values: {how: automatic}, next: pay}
  - id: ask
    kind: approval
    summary: "Refund {{ inputs.amount }}?"
    data: {amount: "{{ inputs.amount }}"}
    on_reject: refuse
    next: pay
  - {id: refuse, kind: notify, message: "Refused: {{ nodes.ask.output.comment }}"}
  - {id: pay, kind: notify, message: "Refunded {{ inputs.amount }}"}
outputs:
  message: >-
    {{ nodes.pay.output.message if nodes.pay is defined else nodes.refuse.output.message }}
"""
FAN = """
name: fan
description: Two branches and a join.
nodes:
  - {id: start, kind: set, values: {n: 2}, next: [left, right]}
  - {id: left, kind: set, values: {v: "L{{ nodes.start.output.n }}"}, next: both}
  - {id: right, kind: set, values: {v: R}, next: both}
  - {id: both, kind: join, next: total}
  - id: total
    kind: set
    values: {all: "{{ nodes.both.output.left.v }}{{ nodes.both.output.right.v }}"}
outputs: {message: "{{ nodes.total.output.all }}"}
"""
ERRORS = """
name: errors
description: A failing node, handled three ways.
inputs: {mode: {type: string, enum: [fail, continue, goto]}}
nodes:
  - {id: route, kind: switch, cases: [{when: "inputs.mode == 'fail'", goto: hard},
      {when: "inputs.mode == 'continue'", goto: soft}], otherwise: jump}
  - {id: hard, kind: set, values: {x: "{{ 1 // 0 }}"}}
  - {id: soft, kind: set, values: {x: "{{ 1 // 0 }}"}, on_error: continue,
     default: {x: fallback}, next: end}
  - {id: jump, kind: set, values: {x: "{{ 1 // 0 }}"}, on_error: {goto: end}}
  - {id: end, kind: set, values: {seen: ok}}
outputs: {message: "{{ nodes.soft.output.x if nodes.soft is defined else 'jumped' }}"}
"""
LOOP = """
name: loop
description: Counts to three.
nodes:
  - id: count
    kind: set
    values: {n: "{{ (nodes.count.output.n if nodes.count is defined else 0) + 1 }}"}
    max_visits: 3
    next: again
  - {id: again, kind: switch, cases: [{when: nodes.count.output.n < 5, goto: count}], max_visits: 3}
"""
GATES = """
name: gates
description: Two approvals in a row.
nodes:
  - {id: first, kind: approval, summary: "First?"}
  - {id: second, kind: approval, summary: "Second, after {{ nodes.first.output.by }}?"}
  - {id: done, kind: set, values: {by: "{{ nodes.first.output.by }}+{{ nodes.second.output.by }}"}}
outputs: {message: "{{ nodes.done.output.by }}"}
"""
PARENT = """
name: parent
description: Runs fan inside.
nodes:
  - {id: child, kind: workflow, workflow: fan}
outputs: {message: "child said {{ nodes.child.output.message }}"}
"""


@pytest.fixture
def engine() -> WorkflowEngine:
    workflows = Workflows(REFUND, FAN, ERRORS, LOOP, PARENT, GATES)
    return WorkflowEngine(
        workflows, InMemorySaver(), skills=None, gateway=ModelGateway(None), prompts=Prompts()
    )


async def test_a_switch_takes_the_first_case_that_holds(engine: WorkflowEngine) -> None:
    record = await engine.run("refund", {"amount": "20"})
    assert record["status"] == "SUCCEEDED"
    assert record["outputs"] == {"message": "Refunded 20"}
    assert list(record["nodes"]) == ["check", "auto", "pay"]
    assert all(node["status"] == "done" for node in record["nodes"].values())


async def test_an_approval_waits_and_a_decision_resumes_the_run(engine: WorkflowEngine) -> None:
    record = await engine.run("refund", {"amount": 200}, thread_id="t-1")
    assert record["status"] == "WAITING"
    pending = await engine.approvals()
    assert [(p["summary"], p["data"], p["thread_id"]) for p in pending] == [
        ("Refund 200?", {"amount": 200}, "t-1")
    ]
    events = [e async for e in engine.decide(pending[0]["approval_id"], approved=True, by="ann")]
    ended = events[-1]["record"]
    assert (ended["status"], ended["outputs"]["message"]) == ("SUCCEEDED", "Refunded 200")
    assert ended["nodes"]["ask"]["output"]["by"] == "ann"
    assert await engine.approvals() == []
    with pytest.raises(AlreadyDecided):
        [e async for e in engine.decide(pending[0]["approval_id"], approved=False)]


async def test_a_rejection_follows_the_reject_branch(engine: WorkflowEngine) -> None:
    record = await engine.run("refund", {"amount": 200})
    approval = record["waiting"]["approval_id"]
    events = [e async for e in engine.decide(approval, approved=False, comment="too much")]
    ended = events[-1]["record"]
    assert ended["outputs"]["message"] == "Refused: too much"
    assert "pay" not in ended["nodes"]


async def test_a_rejection_with_no_reject_branch_ends_the_run_cancelled_not_succeeded(
    engine: WorkflowEngine,
) -> None:
    # It ended SUCCEEDED with outputs rendered from nodes that never ran ("" here): a client
    # could not tell a rejection from a success (QA).
    record = await engine.run("gates", {})
    approval = record["waiting"]["approval_id"]
    decided = [e async for e in engine.decide(approval, approved=False, by="ann", comment="no")]
    ended = decided[-1]["record"]
    assert ended["status"] == "CANCELLED"
    assert ended["error"] == "rejected at approval 'first' by ann: no"
    assert not ended.get("outputs")
    assert "second" not in ended["nodes"]
    assert ended["nodes"]["first"]["output"]["approved"] is False


async def test_parallel_branches_meet_at_the_join(engine: WorkflowEngine) -> None:
    record = await engine.run("fan", {})
    assert (record["status"], record["outputs"]) == ("SUCCEEDED", {"message": "L2R"})
    assert record["nodes"]["both"]["visits"] == 1


async def test_a_failing_node_fails_the_run_continues_or_jumps_as_it_says(
    engine: WorkflowEngine,
) -> None:
    failed = await engine.run("errors", {"mode": "fail"})
    assert failed["status"] == "FAILED"
    assert "hard" in failed["error"]
    assert "ZeroDivisionError" in failed["error"]
    continued = await engine.run("errors", {"mode": "continue"})
    assert continued["outputs"] == {"message": "fallback"}
    assert continued["nodes"]["soft"]["status"] == "failed"
    jumped = await engine.run("errors", {"mode": "goto"})
    assert jumped["status"] == "SUCCEEDED"
    assert "end" in jumped["nodes"]


async def test_a_loop_stops_at_its_bound(engine: WorkflowEngine) -> None:
    record = await engine.run("loop", {})
    assert record["status"] == "FAILED"
    assert "max_visits" in record["error"]
    assert record["nodes"]["count"]["visits"] == 3


async def test_a_sub_workflow_runs_to_its_end_as_its_starters_run(engine: WorkflowEngine) -> None:
    record = await engine.run("parent", {}, user="ada")
    assert record["outputs"] == {"message": "child said L2R"}
    child = [r for r in await engine.list_runs(workflow="fan")]
    assert child[0]["parent"].startswith(record["id"])
    assert child[0]["user"] == "ada"  # hers to see, as the parent (was: nobody's)


async def test_inputs_are_checked_before_a_run_starts(engine: WorkflowEngine) -> None:
    with pytest.raises(BadInputs, match="'amount' is required"):
        await engine.run("refund", {})
    with pytest.raises(BadInputs, match="'colour' is not an input"):
        await engine.run("refund", {"amount": 1, "colour": "red"})
    with pytest.raises(BadInputs, match="must be one of"):
        await engine.run("errors", {"mode": "sideways"})
    with pytest.raises(RunNotFound):
        await engine.get_run("nope")


async def test_two_gates_in_a_row_each_take_their_own_decision(engine: WorkflowEngine) -> None:
    record = await engine.run("gates", {})
    first = record["waiting"]["approval_id"]
    events = [e async for e in engine.decide(first, approved=True, by="ann")]
    waiting = events[-1]["record"]
    assert waiting["status"] == "WAITING"
    assert waiting["waiting"]["summary"] == "Second, after ann?"
    second = waiting["waiting"]["approval_id"]
    assert second != first
    events = [e async for e in engine.decide(second, approved=True, by="bo")]
    ended = events[-1]["record"]
    assert (ended["status"], ended["outputs"]) == ("SUCCEEDED", {"message": "ann+bo"})
    assert [ended["nodes"][n]["visits"] for n in ("first", "second", "done")] == [1, 1, 1]


async def test_a_finished_run_forks_at_a_node_with_new_inputs(engine: WorkflowEngine) -> None:
    first = await engine.run("refund", {"amount": 20})
    assert first["outputs"] == {"message": "Refunded 20"}
    events = [e async for e in engine.fork(first["id"], "check", {"amount": 300})]
    forked = events[-1]["record"]
    assert forked["id"] != first["id"]
    assert forked["parent"] == f"{first['id']}@check"
    assert forked["status"] == "WAITING"  # 300 needs an approval
    assert forked["waiting"]["summary"] == "Refund 300?"
    events = [e async for e in engine.decide(forked["waiting"]["approval_id"], approved=True)]
    assert events[-1]["record"]["outputs"] == {"message": "Refunded 300"}
    # The run it came from is unchanged.
    assert (await engine.get_run(first["id"]))["outputs"] == {"message": "Refunded 20"}


async def test_a_fork_keeps_the_nodes_before_it_and_runs_the_rest(engine: WorkflowEngine) -> None:
    first = await engine.run("fan", {})
    events = [e async for e in engine.fork(first["id"], "total")]
    forked = events[-1]["record"]
    assert forked["status"] == "SUCCEEDED"
    assert forked["outputs"] == {"message": "L2R"}
    ran = [e["node"] for e in events if e.get("type") == "node_started"]
    assert ran == ["total"]
    with pytest.raises(RunNotFound, match="never reached"):
        [e async for e in engine.fork(first["id"], "nowhere")]


async def test_a_failed_node_is_in_the_record_with_its_error(engine: WorkflowEngine) -> None:
    record = await engine.run("errors", {"mode": "fail"})
    assert record["status"] == "FAILED"
    assert record["nodes"]["hard"]["status"] == "failed"
    assert "ZeroDivisionError" in record["nodes"]["hard"]["error"]
    assert record["nodes"]["hard"]["visits"] == 1  # both were null (QA)
    assert record["nodes"]["hard"]["ms"] >= 0


async def test_orphans_found_at_start_up_are_resumed_and_a_new_run_is_not(
    engine: WorkflowEngine,
) -> None:
    waiting = await engine.run("refund", {"amount": 500})
    # A run left RUNNING by a stopped process (its checkpoint waits at the approval).
    orphan = {**waiting, "status": "RUNNING", "waiting": None}
    await engine.documents.put("workflow_run", orphan["id"], orphan, status="RUNNING")
    found = await engine.orphans()
    assert found == [orphan["id"]]
    # A run that starts after start-up is RUNNING too, but under way: never resumed.
    engine.runs.under_way["new-run"] = {"id": "new-run"}
    assert await engine.resume_orphans([*found, "new-run"]) == [orphan["id"]]
    assert (await engine.get_run(orphan["id"]))["status"] == "WAITING"


async def test_every_run_a_stopped_process_left_running_is_found_not_the_newest_hundred(
    engine: WorkflowEngine,
) -> None:
    left = [f"run-{n:03d}" for n in range(150)]
    for n, run_id in enumerate(left):
        body = {"id": run_id, "status": "RUNNING"}
        await engine.documents.put("workflow_run", run_id, body, status="RUNNING", updated=n + 1)
    assert sorted(await engine.orphans()) == left


async def test_runs_are_listed_by_workflow_and_by_who_sees_them_past_the_newest_page(
    engine: WorkflowEngine,
) -> None:
    # Three runs of `fan` under 450 newer runs of `refund`, ten saved at each instant: the
    # filters reach past the newest runs of all (they kept what the newest hundred held:
    # none of these), and pages neither skip nor repeat runs saved at the same time.
    for n in range(453):
        name, user = ("fan", "ann") if n < 3 else ("refund", "bob")
        body = {"id": f"run-{n:03d}", "workflow": name, "user": user}
        await engine.documents.put(
            "workflow_run", body["id"], body, status="DONE", updated=1 + n // 10
        )

    fan = await engine.list_runs(workflow="fan")
    assert [r["id"] for r in fan] == ["run-002", "run-001", "run-000"]
    every = await engine.list_runs(limit=1_000)
    assert len({r["id"] for r in every}) == len(every) == 453

    async def anns(record: dict[str, Any]) -> bool:
        return record["user"] == "ann"

    runs, cursor = await engine.runs_page(where=anns, limit=2)
    assert [r["id"] for r in runs] == ["run-002", "run-001"]
    runs, cursor = await engine.runs_page(where=anns, limit=2, after=cursor)
    assert ([r["id"] for r in runs], cursor) == (["run-000"], None)

    # One request reads at most `scan` runs: a short page, and where to go on from.
    runs, cursor = await engine.runs_page(where=anns, scan=300)
    assert (runs, cursor is not None) == ([], True)
    runs, cursor = await engine.runs_page(where=anns, scan=300, after=cursor)
    assert ([r["id"] for r in runs], cursor) == (["run-002", "run-001", "run-000"], None)
    with pytest.raises(ValueError, match="not a page cursor"):
        await engine.runs_page(after="nonsense")


async def test_the_inbox_shows_the_newest_and_counts_every_approval_that_waits(
    engine: WorkflowEngine,
) -> None:
    for n in range(520):
        body = {"id": f"run-{n:03d}", "workflow": "refund", "thread_id": None}
        body["waiting"] = {"approval_id": f"a-{n}", "summary": f"refund {n}"}
        await engine.documents.put(
            "workflow_run", body["id"], body, status="WAITING", updated=n + 1
        )
    inbox = await engine.approvals()
    assert len(inbox) == 500
    assert inbox[0]["run_id"] == "run-519"
    assert await engine.waiting() == 520
    assert metrics.APPROVALS_WAITING._value.get() == 520
    first, cursor = await engine.approvals_page(500)
    older, last = await engine.approvals_page(500, cursor)
    assert [a["run_id"] for a in older] == [f"run-{n:03d}" for n in range(19, -1, -1)]
    assert last is None
    assert len({a["run_id"] for a in first + older}) == 520
    await engine.documents.put(
        "workflow_run",
        "run-t",
        {"id": "run-t", "workflow": "refund", "thread_id": "t-9", "waiting": {"summary": "x"}},
        owner="t-9",
        status="WAITING",
        updated=0.5,  # the oldest: far past the first page
    )
    mine, _ = await engine.approvals_page(1, thread_id="t-9")
    assert [a["run_id"] for a in mine] == ["run-t"]


async def test_a_sub_workflow_node_run_again_goes_on_with_its_child_not_a_second_one(
    engine: WorkflowEngine,
) -> None:
    # A parent resumed after its process died runs its unfinished `workflow` node again: it
    # started a second child, whose side effects (keyed by its own run) happened again.
    node = next(n for n in engine.workflows.get("parent").spec.nodes if n.id == "child")
    ctx = NodeContext(node, {"inputs": {}, "nodes": {}}, RunInfo("p-1", "parent"), engine)
    first = await SubWorkflowExecutor().run(ctx)
    [child] = await engine.list_runs(workflow="fan")
    # The child cut off with its parent: left RUNNING (its checkpoint is where it stopped).
    await engine.documents.put("workflow_run", child["id"], {**child, "status": "RUNNING"})
    again = await SubWorkflowExecutor().run(ctx)
    assert again.output == first.output == {"message": "L2R"}
    assert [r["id"] for r in await engine.list_runs(workflow="fan")] == [child["id"]]
    assert (await engine.get_run(child["id"]))["status"] == "SUCCEEDED"
    # Another visit of the node is another child.
    await SubWorkflowExecutor().run(NodeContext(node, ctx.values, ctx.run, engine, visit=1))
    assert len(await engine.list_runs(workflow="fan")) == 2


async def test_a_sub_workflow_node_retried_after_its_child_failed_starts_a_new_child(
    engine: WorkflowEngine,
) -> None:
    node = next(n for n in engine.workflows.get("parent").spec.nodes if n.id == "child")
    ctx = NodeContext(node, {"inputs": {}, "nodes": {}}, RunInfo("p-2", "parent"), engine)
    await SubWorkflowExecutor().run(ctx)
    [child] = await engine.list_runs(workflow="fan")
    await engine.documents.put("workflow_run", child["id"], {**child, "status": "FAILED"})
    again = await SubWorkflowExecutor().run(ctx)  # the node's retry
    assert again.output == {"message": "L2R"}
    assert len(await engine.list_runs(workflow="fan")) == 2


async def test_a_run_whose_stream_was_closed_mid_way_is_left_to_be_resumed(
    engine: WorkflowEngine,
) -> None:
    events = engine.stream("fan", {})
    await anext(events)  # its first node has started
    await events.aclose()  # the request that drove it went away
    [cut] = await engine.list_runs(workflow="fan")
    assert (await engine.get_run(cut["id"])) == cut  # the store's, RUNNING
    assert cut["status"] == "RUNNING"
    assert await engine.orphans() == [cut["id"]]
    assert await engine.resume_orphans() == [cut["id"]]
    done = await engine.get_run(cut["id"])
    assert (done["status"], done["outputs"]) == ("SUCCEEDED", {"message": "L2R"})


async def test_a_run_whose_last_save_failed_is_left_to_be_resumed(
    engine: WorkflowEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    put = engine.documents.put

    async def failing(kind: str, key: str, body: dict[str, Any], **kw: Any) -> None:
        if kw.get("status") not in (None, "RUNNING"):
            raise OSError("disk full")
        await put(kind, key, body, **kw)

    monkeypatch.setattr(engine.documents, "put", failing)
    with pytest.raises(OSError, match="disk full"):
        await engine.run("fan", {})
    monkeypatch.undo()
    [cut] = await engine.list_runs(workflow="fan")
    assert (await engine.get_run(cut["id"]))["status"] == "RUNNING"
    assert await engine.orphans() == [cut["id"]]


GATED_CHILD = """
name: kid
description: A side effect, then a gate.
nodes:
  - {id: effect, kind: set, values: {x: 1}, next: gate}
  - {id: gate, kind: approval, summary: "ok?"}
"""
TWO_STEP_CHILD = """
name: kid
description: A side effect, then another step.
nodes:
  - {id: effect, kind: set, values: {x: 1}, next: later}
  - {id: later, kind: set, values: {y: 2}}
outputs: {message: "{{ nodes.effect.output.x }}{{ nodes.later.output.y }}"}
"""
RETRIED_PARENT = """
name: parent
description: Runs kid inside, retried.
nodes:
  - {id: child, kind: workflow, workflow: kid, retry: {attempts: 3, backoff_s: 0}}
"""


def counting(
    engine: WorkflowEngine, block: str | None = None
) -> tuple[dict[str, int], asyncio.Event]:
    """How often each `set` node ran; ``block``'s first run never ends (cut off there), the
    event says it began."""
    counts: dict[str, int] = {}
    blocked = asyncio.Event()
    plain = engine._executors["set"]

    class Counting:
        async def run(self, ctx: NodeContext) -> Any:
            counts[ctx.node.id] = counts.get(ctx.node.id, 0) + 1
            if ctx.node.id == block and counts[block] == 1:
                blocked.set()
                await asyncio.Event().wait()
            return await plain.run(ctx)

    engine._executors["set"] = Counting()
    return counts, blocked


def child_node(engine: WorkflowEngine, parent_id: str) -> NodeContext:
    node = engine.workflows.get("parent").spec.nodes[0]
    return NodeContext(node, {"inputs": {}, "nodes": {}}, RunInfo(parent_id, "parent"), engine)


async def test_a_sub_workflow_that_waits_for_an_approval_is_not_started_again() -> None:
    engine = WorkflowEngine(
        Workflows(RETRIED_PARENT, GATED_CHILD),
        InMemorySaver(),
        skills=None,
        gateway=ModelGateway(None),
        prompts=Prompts(),
    )
    counts, _ = counting(engine)
    parent = await engine.run("parent", {})
    assert parent["status"] == "FAILED"
    assert "waits for an approval" in parent["error"]
    assert counts == {"effect": 1}  # not once per retry
    [child] = await engine.list_runs(workflow="kid")
    # The parent resumed (its process died before its failure was stored) runs the node
    # again: it fails with the child it cancelled, and starts none.
    with pytest.raises(FailedForGood, match="cannot wait for its approval"):
        await SubWorkflowExecutor().run(child_node(engine, parent["id"]))
    assert [r["id"] for r in await engine.list_runs(workflow="kid")] == [child["id"]]
    assert counts == {"effect": 1}


async def test_a_sub_workflow_cut_off_mid_way_goes_on_with_only_what_it_had_left() -> None:
    engine = WorkflowEngine(
        Workflows(PARENT.replace("fan", "kid"), TWO_STEP_CHILD),
        InMemorySaver(),
        skills=None,
        gateway=ModelGateway(None),
        prompts=Prompts(),
    )
    counts, blocked = counting(engine, block="later")
    cut = asyncio.create_task(SubWorkflowExecutor().run(child_node(engine, "p-9")))
    await blocked.wait()
    cut.cancel()  # the parent's process stops with the child half done
    await asyncio.gather(cut, return_exceptions=True)
    [child] = await engine.list_runs(workflow="kid")
    assert child["status"] == "RUNNING"
    again = await SubWorkflowExecutor().run(child_node(engine, "p-9"))
    assert again.output == {"message": "12"}
    assert counts == {"effect": 1, "later": 2}  # the cut-off step again, the one before not
    assert [r["id"] for r in await engine.list_runs(workflow="kid")] == [child["id"]]


async def test_the_periodic_look_does_not_wait_for_the_runs_it_resumes() -> None:
    engine = WorkflowEngine(
        Workflows(TWO_STEP_CHILD),
        InMemorySaver(),
        skills=None,
        gateway=ModelGateway(None),
        prompts=Prompts(),
    )
    _, blocked = counting(engine, block="later")
    events = engine.stream("kid", {})
    await anext(events)
    await events.aclose()  # left RUNNING: the look resumes it, and it runs on and on
    looking = asyncio.create_task(engine.keep_resuming(0.01))
    await asyncio.wait_for(blocked.wait(), 5)
    # Found by a later look: a run whose workflow's definition is gone for good.
    gone = {"id": "r-gone", "workflow": "gone", "status": "RUNNING", "nodes": {}}
    gone |= {"thread_id": None, "error": None, "waiting": None}
    await engine.documents.put("workflow_run", "r-gone", gone, status="RUNNING")
    for _ in range(500):
        if (await engine.get_run("r-gone"))["status"] != "RUNNING":
            break
        await asyncio.sleep(0.01)
    failed = await engine.get_run("r-gone")
    assert failed["status"] == "FAILED"
    assert "its definition cannot be found" in failed["error"]
    assert await engine.orphans() == []
    looking.cancel()  # the service stops: the run it resumes is cut off with it
    await asyncio.gather(looking, return_exceptions=True)
    assert engine._orphans.resuming == {}


async def test_a_decision_its_process_died_before_the_run_took_is_given_again(
    engine: WorkflowEngine,
) -> None:
    waiting = await engine.run("refund", {"amount": 200}, thread_id="t-d")
    approval = waiting["waiting"]["approval_id"]
    going = engine.decide(approval, approved=True, by="sam")
    merge = engine.documents.merge

    async def died(kind: str, doc_id: str, changes: Any, **index: Any) -> None:
        await merge(kind, doc_id, changes, **index)  # the decision stored, then the end
        raise asyncio.CancelledError

    engine.documents.merge = died  # type: ignore[method-assign]
    with pytest.raises(asyncio.CancelledError):
        await anext(going)
    engine.documents.merge = merge  # type: ignore[method-assign]
    await engine.leases.release(waiting["id"])  # let go with the dying process
    stored = await engine.documents.get("workflow_run", waiting["id"])
    assert stored is not None
    assert stored["status"] == "RUNNING"
    assert await engine.resume_orphans() == [stored["id"]]
    done = await engine.get_run(stored["id"])
    assert done["status"] == "SUCCEEDED", done
    assert done["outputs"] == {"message": "Refunded 200"}
    late = engine.decide(approval, approved=False)
    with pytest.raises(AlreadyDecided):
        await anext(late)


async def test_a_decision_on_a_fork_goes_on_from_that_forks_state_not_anothers(
    engine: WorkflowEngine,
) -> None:
    # Forks share their original's graph thread: a decision went on from the thread's newest
    # checkpoint, another fork's (it came back waiting with the other fork's amount).
    first = await engine.run("refund", {"amount": 200})
    async for _ in engine.decide(first["waiting"]["approval_id"], approved=True):
        pass
    forks = []
    for amount in (300, 400):
        async for event in engine.fork(first["id"], "check", {"amount": amount}):
            last = event
        forks.append(last["record"])
    assert [f["status"] for f in forks] == ["WAITING", "WAITING"]
    assert [f["waiting"]["summary"] for f in forks] == ["Refund 300?", "Refund 400?"]
    for fork, amount in zip(forks, (300, 400), strict=True):
        async for event in engine.decide(fork["waiting"]["approval_id"], approved=True):
            last = event
        done = last["record"]
        assert done["status"] == "SUCCEEDED", done
        assert done["outputs"] == {"message": f"Refunded {amount}"}


async def test_a_cancel_for_one_approval_leaves_a_run_that_waits_at_another(
    engine: WorkflowEngine,
) -> None:
    # A cancel asked while the run waited at one gate, taken after a decision moved it on to
    # another, would have cancelled that one, which nobody had seen.
    waiting = await engine.run("refund", {"amount": 200})
    other = f"{waiting['id']}-elsewhere-0"
    kept = await engine.cancel(waiting["id"], "cancelled by sam", approval_id=other)
    assert (kept["status"], kept["waiting"]) == ("WAITING", waiting["waiting"])
    seen = waiting["waiting"]["approval_id"]
    cancelled = await engine.cancel(waiting["id"], "cancelled by sam", approval_id=seen)
    assert cancelled["status"] == "CANCELLED"
