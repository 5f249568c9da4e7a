"""``workflow``: another workflow, run to its end; its outputs are this node's output."""

from __future__ import annotations

from agents.errors import HandlerFailed
from agents.workflows.executors import NodeContext, Outcome, executor
from agents.workflows.templates import render


@executor("workflow")
class SubWorkflowExecutor:
    """Runs the named workflow with the rendered inputs, as a run of its own."""

    async def run(self, ctx: NodeContext) -> Outcome:
        inputs = render(ctx.node.inputs, ctx.values, "inputs")
        record = await ctx.engine.run(
            ctx.node.workflow,
            inputs,
            thread_id=ctx.run.thread_id,
            parent=f"{ctx.run.run_id}:{ctx.node.id}#{ctx.visit}",
        )
        if record["status"] == "WAITING":
            # The parent cannot wait for its child's approval: the child is cancelled, so a
            # decision taken later makes none of its side effects.
            await ctx.engine.cancel(
                record["id"], f"its parent run {ctx.run.run_id} cannot wait for its approval"
            )
            raise HandlerFailed(
                f"workflow {ctx.node.workflow!r} did not succeed: it waits for an approval, "
                "which a sub-workflow cannot do; it was cancelled"
            )
        if record["status"] != "SUCCEEDED":
            why = record.get("error") or f"it ended {record['status']}"
            raise HandlerFailed(f"workflow {ctx.node.workflow!r} did not succeed: {why}")
        return Outcome(record.get("outputs", {}))
