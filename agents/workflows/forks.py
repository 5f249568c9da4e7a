"""Forks: a finished run run again from one of its nodes, with its inputs changed.

The fork starts from the last state in the run's own lineage (from its last checkpoint back;
its thread holds its forks' states too) that was about to run the node: the nodes before it
keep their outputs and do not run again. An approval given before it was given for the
original's inputs: with inputs changed, the fork goes back to the first such gate, which asks
again. A fork is a run of its own on the thread of the run it came from.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from agents.errors import RunNotFound, RunStatusConflict
from agents.workflows.definitions import Graph
from agents.workflows.inputs import check_inputs
from agents.workflows.records import thread_of
from agents.workflows.spec import WorkflowSpec

# What a fork does not take from the run it came from: its decisions, who started it (a chat
# turn's run answers in the turn; a fork answers its own request), how a cancel ended it.
_NOT_FORKED = (
    "decision",
    "decided",
    "via",
    "turn_failed",
    "cancel_requested",
    "cancelled_while",
)


async def fork_record(
    graph: Graph,
    spec: WorkflowSpec,
    old: dict[str, Any],
    node: str,
    inputs: dict[str, Any] | None,
) -> tuple[dict[str, Any], Any]:
    """The record of a fork of ``old`` from ``node`` with ``inputs`` changed, RUNNING, and
    the config its graph goes on from (its state there is written with the fork's inputs).

    Raises:
        RunNotFound: the run never reached ``node``.
        BadInputs: the changed inputs are not ones it can take.
    """
    target = None
    async for snapshot in _lineage(graph, old):
        if node in snapshot.next:
            target = snapshot  # newest first: the last time the run was about to run it
            break
    if target is None:
        raise RunNotFound(f"run {old['id']} never reached node {node!r}")
    values = check_inputs(spec, {**target.values.get("inputs", {}), **(inputs or {})})
    if values != target.values.get("inputs"):
        gates = {n.id for n in spec.nodes if n.kind == "approval"}
        target = await _first_to_decide(graph, target, gates & set(target.values["nodes"]))
    config = await graph.aupdate_state(target.config, {"inputs": values})
    kept = set(target.values.get("nodes", {}))
    record = {
        **{k: v for k, v in old.items() if k not in _NOT_FORKED},
        "id": uuid.uuid4().hex,
        "parent": f"{old['id']}@{node}",
        "graph_thread": thread_of(old),
        "checkpoint": config["configurable"]["checkpoint_id"],
        "status": "RUNNING",
        "started": time.time(),
        "ended": None,
        "inputs": values,
        "outputs": {},
        "error": None,
        "nodes": {k: v for k, v in old["nodes"].items() if k in kept},
        "waiting": None,
        "usage": {},
        # The state's usage adds up from the fork point's, which is the original's.
        "usage_before": dict(target.values.get("usage") or {}),
    }
    return record, config


def not_ended(record: dict[str, Any]) -> RunStatusConflict:
    """Why run ``record``, which has not ended, cannot be forked yet: it waits for a decision
    (``run_waiting``, naming the approval) or is under way (``run_running``)."""
    run_id, waiting = record["id"], record.get("waiting") or {}
    if record["status"] == "WAITING":
        approval = waiting.get("approval_id", "?")
        return RunStatusConflict(
            f"workflow run {run_id} is waiting for a decision on approval {approval}; it can "
            "be forked once it has ended: decide the approval, then fork it",
            code="run_waiting",
        )
    return RunStatusConflict(
        f"workflow run {run_id} is under way ({record['status']}); it can be forked once it "
        "has ended"
    )


async def _lineage(graph: Graph, record: dict[str, Any]) -> AsyncIterator[Any]:
    """The states a run went through, newest first: from its last checkpoint back (the
    thread's history holds the states of its forks too); the thread's whole history for a
    record from before the last checkpoint was kept."""
    thread: Any = {"configurable": {"thread_id": thread_of(record)}}
    if not record.get("checkpoint"):
        async for snapshot in graph.aget_state_history(thread):
            yield snapshot
        return
    config: Any = {
        "configurable": {**thread["configurable"], "checkpoint_id": record["checkpoint"]}
    }
    while config is not None:
        snapshot = await graph.aget_state(config)
        yield snapshot
        config = snapshot.parent_config


async def _first_to_decide(graph: Graph, target: Any, gates: set[str]) -> Any:
    """The oldest state before ``target`` that was about to run one of ``gates`` (``target``
    itself when none was)."""
    earliest, snapshot = target, target
    while gates and snapshot.parent_config is not None:
        snapshot = await graph.aget_state(snapshot.parent_config)
        if gates & set(snapshot.next):
            earliest = snapshot
    return earliest
