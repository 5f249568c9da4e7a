"""``workflow``: another workflow, run to its end; its outputs are this node's output."""

from __future__ import annotations

from agents.errors import FailedForGood, HandlerFailed, RunNotFound
from agents.workflows.engine import keyed_run_id
from agents.workflows.executors import NodeContext, Outcome, executor
from agents.workflows.templates import render


@executor("workflow")
class SubWorkflowExecutor:
    """Runs the named workflow with the rendered inputs, as a run of its own."""

    async def run(self, ctx: NodeContext) -> Outcome:
        inputs = render(ctx.node.inputs, ctx.values, "inputs")
        # The child's id is made from this node's visit: a parent resumed after its process
        # died runs the node again and finds the child it started, not a second one (whose
        # side effects, keyed by its own run, would happen again).
        parent = f"{ctx.run.run_id}:{ctx.node.id}#{ctx.visit}"
        key = await _attempt_key(ctx, parent)
        record = await ctx.engine.run(
            ctx.node.workflow,
            inputs,
            thread_id=ctx.run.thread_id,
            parent=parent,
            user=ctx.run.user,  # its starter's, as the parent is
            idempotency_key=key,
        )
        if record["status"] == "RUNNING":  # cut off with this run: goes on from where it was
            record = await ctx.engine.carry_on(record["id"])
        if record["status"] == "WAITING":
            # The parent cannot wait for its child's approval: the child is cancelled, so a
            # decision taken later makes none of its side effects.
            await ctx.engine.cancel(
                record["id"], f"its parent run {ctx.run.run_id} cannot wait for its approval"
            )
            # Not retried: a new child would run the nodes before its gate again.
            raise FailedForGood(
                f"workflow {ctx.node.workflow!r} did not succeed: it waits for an approval, "
                "which a sub-workflow cannot do; it was cancelled"
            )
        if record["status"] == "CANCELLED":  # this node's run before this one cancelled it
            why = record.get("error") or "it was cancelled"
            raise FailedForGood(f"workflow {ctx.node.workflow!r} did not succeed: {why}")
        if record["status"] != "SUCCEEDED":
            why = record.get("error") or f"it ended {record['status']}"
            raise HandlerFailed(f"workflow {ctx.node.workflow!r} did not succeed: {why}")
        return Outcome(record.get("outputs", {}))


async def _attempt_key(ctx: NodeContext, parent: str) -> str:
    """The key of this node's child: the first attempt's, unless that child failed (a retry
    of the node, or a run resumed after a retry: then the next attempt's). A child that was
    cancelled (it waited for an approval) is the last: the node fails with it again rather
    than start another that repeats what came before its gate."""
    for attempt in range(_ATTEMPTS):
        key = f"sub-workflow:{parent}/{attempt}"
        try:
            earlier = await ctx.engine.get_run(keyed_run_id(ctx.node.workflow, key))
        except RunNotFound:
            return key
        if earlier["status"] != "FAILED":
            return key
    raise HandlerFailed(f"workflow {ctx.node.workflow!r} failed {_ATTEMPTS} times here")


_ATTEMPTS = 100  # children one node's visit may start (its retries)
