"""A workflow as a LangGraph graph: a node per node (its executor, retries, timeout and
``on_error``), its edges, branches chosen at run time, and joins that wait for every branch."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

from langgraph.errors import GraphBubbleUp
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import get_runtime

from agents import failpoints
from agents.errors import FailedForGood, SkilldeskError, WorkflowFailed
from agents.run import emit
from agents.state.schema import add_usage
from agents.workflows.executors import Executor, NodeContext, Outcome, RunInfo

if TYPE_CHECKING:
    from agents.workflows.definitions import LoadedWorkflow
    from agents.workflows.engine import WorkflowEngine


def merge(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    """Reducer: keys of the right side replace those of the left."""
    return {**(left or {}), **(right or {})}


class WorkflowState(TypedDict, total=False):
    """A run's state: its inputs, and each node's output under its id."""

    inputs: dict[str, Any]
    nodes: Annotated[dict[str, dict[str, Any]], merge]
    goto: Annotated[dict[str, list[str]], merge]
    usage: Annotated[dict[str, int], add_usage]


@dataclass(frozen=True)
class WorkflowContext:
    """LangGraph runtime context of a workflow run."""

    run: RunInfo


def compile_workflow(
    engine: WorkflowEngine, workflow: LoadedWorkflow
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The LangGraph graph of ``workflow``: a node per node, its edges, joins that wait."""
    spec, flow = workflow.spec, workflow.flow
    graph = StateGraph(WorkflowState, context_schema=WorkflowContext)
    kinds = {n.id: n.kind for n in spec.nodes}
    joins = {n for n, k in kinds.items() if k == "join"}
    for node in spec.nodes:
        graph.add_node(node.id, _node_function(engine, workflow, node))
    graph.add_edge(START, flow.entry)
    for node in spec.nodes:
        after = flow.successors.get(node.id, [])
        if node.kind in ("switch", "approval") or flow.branches.get(node.id):
            targets = [t for t in [*after, *flow.branches.get(node.id, [])] if t not in joins]
            graph.add_conditional_edges(
                node.id, _chooser(node.id, after, joins), [*dict.fromkeys(targets), END]
            )
        else:
            for target in after:
                if target not in joins:
                    graph.add_edge(node.id, target)
            if not after:
                graph.add_edge(node.id, END)
    for join in joins:
        graph.add_edge(flow.incoming.get(join, []), join)
    return graph.compile(checkpointer=engine.checkpointer, name=f"workflow:{workflow.name}")


def _chooser(node_id: str, after: list[str], joins: set[str]) -> Any:
    # A coroutine: LangGraph runs a plain path function in its thread pool (a thread hop).
    async def choose(state: WorkflowState) -> list[str] | str:
        chosen = (state.get("goto") or {}).get(node_id)
        targets = after if chosen is None else chosen
        targets = [t for t in targets if t not in joins]  # a join's own edge waits for it
        return targets or (END if not any(t in joins for t in after) else [])

    return choose


def _node_function(engine: WorkflowEngine, workflow: LoadedWorkflow, node: Any) -> Any:
    executor = engine._executors[node.kind]
    branching = node.kind in ("switch", "approval") or bool(workflow.flow.branches.get(node.id))

    async def run_node(state: WorkflowState) -> dict[str, Any]:
        info = get_runtime(WorkflowContext).context.run
        nodes = dict(state.get("nodes") or {})
        visits = int((nodes.get(node.id) or {}).get("visits", 0))
        if visits >= node.max_visits:
            raise WorkflowFailed(f"node {node.id!r} ran {visits} times, its max_visits")
        values = {
            "inputs": state.get("inputs", {}),
            "nodes": nodes,
            "run": {"id": info.run_id, "workflow": info.workflow, "thread_id": info.thread_id},
        }
        ctx = NodeContext(node, values, info, engine, visits)
        emit("node_started", node=node.id, workflow=info.workflow)
        started = time.perf_counter()
        status, error = "done", None
        try:
            outcome = await _attempts(executor, ctx)
        except GraphBubbleUp:
            raise  # an approval's interrupt: the run waits
        except Exception as exc:
            error = str(exc) if isinstance(exc, SkilldeskError) else f"{type(exc).__name__}: {exc}"
            status = "failed"
            emit("node_finished", node=node.id, workflow=info.workflow, ok=False, error=error)
            if node.on_error == "fail":
                message = f"node {node.id!r} failed: {error}"
                ms = round((time.perf_counter() - started) * 1000, 2)
                raise WorkflowFailed(
                    message, node=node.id, error=error, ms=ms, visits=visits + 1
                ) from None
            goto = None if node.on_error == "continue" else [node.on_error.goto]
            outcome = Outcome(node.default if goto is None else {"error": error}, goto=goto)
        ms = round((time.perf_counter() - started) * 1000, 2)
        if status == "done":
            summary = _summary(outcome.output)
            emit(
                "node_finished",
                node=node.id,
                workflow=info.workflow,
                ok=True,
                ms=ms,
                output=summary,
            )
        entry = {"output": outcome.output, "status": status, "error": error, "ms": ms}
        update: dict[str, Any] = {"nodes": {node.id: {**entry, "visits": visits + 1}}}
        if branching or outcome.goto is not None:
            chosen = outcome.goto
            update["goto"] = {
                node.id: workflow.flow.successors.get(node.id, []) if chosen is None else chosen
            }
        if outcome.usage:
            update["usage"] = outcome.usage
        failpoints.hit("workflow.node_done", node.id)  # its work done, its checkpoint not yet
        return update

    return run_node


async def _attempts(executor: Executor, ctx: NodeContext) -> Outcome:
    """The node's outcome after its retries, each within its timeout."""
    node = ctx.node
    wait = node.retry.backoff_s
    for attempt in range(node.retry.attempts):
        tried = replace(ctx, attempt=attempt)
        try:
            if node.timeout_s is None or node.kind == "approval":
                return await executor.run(tried)
            return await asyncio.wait_for(executor.run(tried), node.timeout_s)
        except (GraphBubbleUp, FailedForGood):
            raise
        except TimeoutError:
            if attempt + 1 == node.retry.attempts:
                raise WorkflowFailed(f"did not finish within {node.timeout_s:g} s") from None
        except Exception:
            if attempt + 1 == node.retry.attempts:
                raise
        await asyncio.sleep(wait)
        wait *= 2
    raise AssertionError("unreachable")


def _summary(output: Any, limit: int = 200) -> str:
    """A node's output as one short line for its ``node_finished`` event."""
    text = output if isinstance(output, str) else json.dumps(output, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
