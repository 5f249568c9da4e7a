"""Approval gates over a run's life: a waiting run goes on under the definition it started
with, a decision that cannot be applied changes nothing, a fork with new inputs asks again."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agents.errors import (
    AlreadyDecided,
    ApprovalNotFound,
    RunNotFound,
    RunStatusConflict,
    WorkflowNotFound,
)
from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.state.documents import MemoryDocuments
from agents.state.documents.common import changed
from agents.workflows.engine import WorkflowEngine
from agents.workflows.records import pending_approval
from tests.workflowkit import Workflows

PAY = """
name: pay
version: 1
description: Pays after an approval.
inputs: {amount: {type: number}}
nodes:
  - {id: approve, kind: approval, summary: "Pay {{ inputs.amount }}?", next: pay}
  - {id: pay, kind: set, values: {paid: "{{ inputs.amount }}"}, next: done}
  - {id: done, kind: set, values: {by: "{{ nodes.approve.output.by }}"}}
outputs: {message: "paid {{ nodes.pay.output.paid }} for {{ nodes.done.output.by }}"}
"""
RENAMED = """
name: pay
version: 2
description: Pays after an approval, its nodes renamed.
inputs: {amount: {type: number}}
nodes:
  - {id: gate, kind: approval, summary: "Pay {{ inputs.amount }}?", next: pay_it}
  - {id: pay_it, kind: set, values: {paid: "{{ inputs.amount }}"}, next: done}
  - {id: done, kind: set, values: {by: v2}}
outputs: {message: "v2 paid {{ nodes.pay_it.output.paid }}"}
"""


def engine_of(
    workflows: Workflows, saver: InMemorySaver, documents: MemoryDocuments
) -> WorkflowEngine:
    return WorkflowEngine(
        workflows,
        saver,
        skills=None,
        gateway=ModelGateway(None),
        prompts=Prompts(),
        documents=documents,
    )


@pytest.fixture
def workflows() -> Workflows:
    return Workflows(PAY)


@pytest.fixture
def engine(workflows: Workflows) -> WorkflowEngine:
    return engine_of(workflows, InMemorySaver(), MemoryDocuments())


async def decide(engine: WorkflowEngine, approval_id: str) -> dict[str, Any]:
    events = [e async for e in engine.decide(approval_id, approved=True, by="ann")]
    return dict(events[-1]["record"])


async def test_a_waiting_run_goes_on_under_the_definition_it_started_with_after_an_edit(
    workflows: Workflows, engine: WorkflowEngine
) -> None:
    waiting = await engine.run("pay", {"amount": 12.5})
    assert waiting["waiting"]["node"] == "approve"
    workflows.edit(RENAMED, fingerprint="v2")  # the file renamed its nodes meanwhile
    # A restart, too: the new process knows the run's definition from the store alone.
    restarted = engine_of(workflows, engine.checkpointer, engine.documents)
    ended = await decide(restarted, waiting["waiting"]["approval_id"])
    assert ended["status"] == "SUCCEEDED"
    assert ended["outputs"] == {"message": "paid 12.5 for ann"}
    assert list(ended["nodes"]) == ["approve", "pay", "done"]
    assert ended["version"] == 1
    # A run started now runs the new version.
    fresh = await restarted.run("pay", {"amount": 3})
    assert (fresh["version"], fresh["waiting"]["node"]) == (2, "gate")


async def test_a_decision_applies_while_the_workflow_is_withdrawn(
    workflows: Workflows, engine: WorkflowEngine
) -> None:
    waiting = await engine.run("pay", {"amount": 12.5})
    workflows.withdraw("pay", "tool 'refund' is not installed")
    ended = await decide(engine, waiting["waiting"]["approval_id"])
    assert (ended["status"], ended["outputs"]) == ("SUCCEEDED", {"message": "paid 12.5 for ann"})


async def test_a_decision_that_cannot_be_applied_leaves_the_approval_pending(
    workflows: Workflows, engine: WorkflowEngine
) -> None:
    waiting = await engine.run("pay", {"amount": 12.5})
    # A run from before definitions were kept, its workflow withdrawn since.
    await engine.documents.delete("workflow_definition", f"pay@{waiting['fingerprint']}")
    workflows.withdraw("pay", "tool 'refund' is not installed")
    restarted = engine_of(workflows, engine.checkpointer, engine.documents)
    with pytest.raises(WorkflowNotFound, match="not installed"):
        await decide(restarted, waiting["waiting"]["approval_id"])
    assert await restarted.get_run(waiting["id"]) == waiting
    assert [a["approval_id"] for a in await restarted.approvals()] == [
        waiting["waiting"]["approval_id"]
    ]


REFUND = """
name: refund
description: Refunds after an approval.
nodes:
  - {id: approve, kind: approval, summary: "Refund?", next: refund}
  - {id: refund, kind: tool, tool: make_refund}
"""


async def test_a_decision_whose_run_would_fail_for_a_tool_taken_away_leaves_it_pending() -> None:
    # QA: a withdrawn workflow's approval was spent, then its run failed past the gate.
    workflows = Workflows(REFUND)
    engine = engine_of(workflows, InMemorySaver(), MemoryDocuments())
    waiting = await engine.run("refund", {})
    approval = waiting["waiting"]["approval_id"]
    workflows.uninstalled.add("make_refund")  # its skill removed; the workflow withdrawn
    with pytest.raises(RunStatusConflict, match="node 'refund': tool: 'make_refund'") as raised:
        await decide(engine, approval)
    assert raised.value.code == "not_installed"
    assert "stays pending" in str(raised.value)
    assert await engine.get_run(waiting["id"]) == waiting
    assert [a["approval_id"] for a in await engine.approvals()] == [approval]
    workflows.uninstalled.clear()  # installed again: the decision goes through
    ended = await decide(engine, approval)
    assert ended["status"] != "WAITING"
    assert await engine.approvals() == []
    # A rejection that ends the run needs nothing installed: never refused.
    refused = await engine.run("refund", {})
    workflows.uninstalled.add("make_refund")
    events = [
        e async for e in engine.decide(refused["waiting"]["approval_id"], approved=False, by="bo")
    ]
    assert events[-1]["record"]["status"] != "WAITING"


PARENT = """
name: parent
description: Runs pay inside.
nodes:
  - {id: child, kind: workflow, workflow: pay, inputs: {amount: 5}}
"""


async def test_a_child_that_waits_for_an_approval_is_cancelled_with_its_failed_parent() -> None:
    engine = engine_of(Workflows(PAY, PARENT), InMemorySaver(), MemoryDocuments())
    parent = await engine.run("parent", {})
    assert parent["status"] == "FAILED"
    assert "waits for an approval, which a sub-workflow cannot do" in parent["error"]
    [child] = [r for r in await engine.list_runs(workflow="pay")]
    assert (child["status"], child["waiting"]) == ("CANCELLED", None)
    assert await engine.approvals() == []
    with pytest.raises(AlreadyDecided):  # a decision taken later pays nothing
        await decide(engine, f"{child['id']}-approve-0")
    assert "pay" not in (await engine.get_run(child["id"]))["nodes"]


async def test_a_fork_with_new_inputs_asks_its_approval_again(engine: WorkflowEngine) -> None:
    waiting = await engine.run("pay", {"amount": 12.5})
    paid = await decide(engine, waiting["waiting"]["approval_id"])
    assert paid["outputs"] == {"message": "paid 12.5 for ann"}

    events = [e async for e in engine.fork(paid["id"], "pay", {"amount": 77})]
    forked = events[-1]["record"]
    assert (forked["status"], forked["waiting"]["summary"]) == ("WAITING", "Pay 77?")
    assert "pay" not in forked["nodes"]
    events = [
        e async for e in engine.decide(forked["waiting"]["approval_id"], approved=True, by="bo")
    ]
    assert events[-1]["record"]["outputs"] == {"message": "paid 77 for bo"}

    # Without changed inputs, the approval given stands.
    for same in (None, {"amount": 12.5}):
        events = [e async for e in engine.fork(paid["id"], "pay", same)]
        kept = events[-1]["record"]
        assert (kept["status"], kept["outputs"]) == ("SUCCEEDED", {"message": "paid 12.5 for ann"})
        assert [e["node"] for e in events if e.get("type") == "node_started"] == ["pay", "done"]


TWO_GATES = """
name: two
description: Two gates in a row.
nodes:
  - {id: first, kind: approval, summary: "First?", next: second}
  - {id: second, kind: approval, summary: "Second?", next: done}
  - {id: done, kind: set, values: {by: "{{ nodes.first.output.by }}+{{ nodes.second.output.by }}"}}
outputs: {message: "{{ nodes.done.output.by }}"}
"""
THREE = """
name: three
description: A step, a gate, a step.
nodes:
  - {id: a, kind: set, values: {x: 1}, next: gate}
  - {id: gate, kind: approval, summary: "ok?", next: b}
  - {id: b, kind: set, values: {x: 2}}
outputs: {message: "{{ nodes.b.output.x }}"}
"""


def two_processes(*texts: str) -> tuple[WorkflowEngine, WorkflowEngine]:
    """Two engines on one store, as two processes would be."""
    workflows, saver, documents = Workflows(*texts), InMemorySaver(), MemoryDocuments()
    return engine_of(workflows, saver, documents), engine_of(workflows, saver, documents)


def seen_before(engine: WorkflowEngine, record: dict[str, Any]) -> None:
    """``engine`` looks at ``record`` as it was (its look came before another's change)."""

    async def stale(run_id: str) -> dict[str, Any]:
        return dict(record)

    engine.get_run = stale  # type: ignore[method-assign]


async def test_a_late_decision_of_a_decided_gate_from_another_process_is_refused() -> None:
    a, b = two_processes(TWO_GATES)
    waiting = await a.run("two", {})
    first = waiting["waiting"]["approval_id"]
    seen_before(b, waiting)
    at_second = [e async for e in a.decide(first, approved=True, by="ann")][-1]["record"]
    assert at_second["waiting"]["node"] == "second"
    with pytest.raises(AlreadyDecided):
        [e async for e in b.decide(first, approved=True, by="bob")]
    stored = await a.get_run(waiting["id"])
    assert (stored["status"], stored["waiting"]["node"]) == ("WAITING", "second")
    done = await decide(a, stored["waiting"]["approval_id"])
    assert done["outputs"] == {"message": "ann+ann"}


async def test_a_stale_decision_is_refused_and_resumes_only_the_gate_it_was_taken_for() -> None:
    a, b = two_processes(TWO_GATES)
    waiting = await a.run("two", {})
    first = waiting["waiting"]["approval_id"]
    await decide(a, first)
    seen_before(b, waiting)
    b.runs.stored = b.get_run  # type: ignore[method-assign]
    # Its looks stale, B takes the decision from the run as stored when it writes: refused.
    with pytest.raises(AlreadyDecided, match="was decided already"):
        [e async for e in b.decide(first, approved=True, by="bob")]

    # Even were the store's own read stale too, B's decision is addressed to the first
    # gate's interrupt, not to whatever gate the run waits at.
    async def stale_merge(kind: str, doc_id: str, changes: Any, **index: Any) -> dict[str, Any]:
        body = changed(copy.deepcopy(waiting), changes)
        await a.documents.put(kind, doc_id, body, **index)
        return body

    b.documents.merge = stale_merge  # type: ignore[method-assign]
    late = [e async for e in b.decide(first, approved=True, by="bob")][-1]["record"]
    assert (late["status"], late["waiting"]["node"]) == ("WAITING", "second")
    assert "second" not in late["nodes"]


async def test_a_cancel_from_another_process_leaves_a_run_decided_meanwhile_as_it_is() -> None:
    a, b = two_processes(PAY)
    waiting = await a.run("pay", {"amount": 5})
    seen_before(b, waiting)
    await decide(a, waiting["waiting"]["approval_id"])
    kept = await b.cancel(waiting["id"], "no longer needed")
    assert (kept["status"], kept["error"]) == ("SUCCEEDED", None)
    assert (await a.get_run(waiting["id"]))["status"] == "SUCCEEDED"


async def test_a_keyed_start_whose_look_came_first_elsewhere_replays_the_stored_run() -> None:
    a, b = two_processes(THREE)
    started = await a.run("three", {}, idempotency_key="k1", user="u")
    done = await decide(a, started["waiting"]["approval_id"])

    async def not_yet(run_id: str) -> dict[str, Any]:
        raise RunNotFound(run_id)

    b.get_run = not_yet  # type: ignore[method-assign]
    again = await b.run("three", {}, idempotency_key="k1", user="u")
    assert (again["id"], again["status"]) == (started["id"], "SUCCEEDED")
    assert await a.documents.get("workflow_run", started["id"]) == done


async def test_a_decision_while_the_decided_run_goes_on_elsewhere_is_already_decided() -> None:
    # The stored record of a run going on after its decision (RUNNING, no gate waiting, the
    # gate's node not yet stored) read as "never asked": a 404 to a late decision.
    a, _ = two_processes(PAY)
    waiting = await a.run("pay", {"amount": 5})
    approval = waiting["waiting"]["approval_id"]
    saved: list[dict[str, Any]] = []
    save, merge = a.runs.save, a.documents.merge

    async def keep(record: dict[str, Any]) -> None:
        saved.append(copy.deepcopy(record))  # as stored then
        await save(record)

    async def keep_merged(kind: str, doc_id: str, changes: Any, **index: Any) -> Any:
        merged = await merge(kind, doc_id, changes, **index)
        saved.append(copy.deepcopy(merged))  # the decision, as stored
        return merged

    a.runs.save = keep  # type: ignore[method-assign]
    a.documents.merge = keep_merged  # type: ignore[method-assign]
    await decide(a, approval)
    going_on = next(r for r in saved if r["status"] == "RUNNING")
    with pytest.raises(AlreadyDecided):
        pending_approval(going_on, approval)


async def test_an_ended_run_refuses_its_own_approval_and_knows_none_of_the_others(
    workflows: Workflows, engine: WorkflowEngine
) -> None:
    waiting = await engine.run("pay", {"amount": 5})
    asked, run_id = waiting["waiting"]["approval_id"], waiting["id"]
    await engine.cancel(run_id, "no longer needed")
    with pytest.raises(AlreadyDecided, match="can no longer be decided"):
        await decide(engine, asked)
    # Ids it never asked for: a node that is no approval, no node at all, no visit.
    for never in (f"{run_id}-pay-0", f"{run_id}-nowhere-0", f"{run_id}-approve"):
        with pytest.raises(ApprovalNotFound, match=f"there is no approval '{never}'"):
            await decide(engine, never)
    # A run cancelled before records kept what it waited at (``withdrawn``), its definition
    # gone (from before definitions were kept, its workflow withdrawn): its record alone
    # cannot tell, and its word stands.
    stored = await engine.runs.stored(run_id)
    assert stored["withdrawn"]["approval_id"] == asked
    del stored["withdrawn"]
    await engine.documents.put(
        "workflow_run", run_id, stored, owner=stored.get("thread_id"), status=stored["status"]
    )
    await engine.documents.delete("workflow_definition", f"pay@{waiting['fingerprint']}")
    workflows.withdraw("pay", "tool 'refund' is not installed")
    restarted = engine_of(workflows, engine.checkpointer, engine.documents)
    with pytest.raises(AlreadyDecided, match="can no longer be decided"):
        await decide(restarted, f"{run_id}-pay-0")


async def test_a_decided_approval_of_an_ended_run_says_it_was_decided(
    engine: WorkflowEngine,
) -> None:
    waiting = await engine.run("pay", {"amount": 5})
    approval = waiting["waiting"]["approval_id"]
    await decide(engine, approval)
    with pytest.raises(AlreadyDecided, match="was decided already"):
        await decide(engine, approval)
    with pytest.raises(ApprovalNotFound):
        await decide(engine, f"{waiting['id']}-done-0")
