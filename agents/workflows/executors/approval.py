"""``approval``: the run waits (a LangGraph interrupt, kept across restarts) until a person
decides; a rejection follows the node's ``on_reject`` branch, or ends the run."""

from __future__ import annotations

from typing import Any

from langgraph.types import interrupt

from agents.workflows.executors import NodeContext, Outcome, executor
from agents.workflows.templates import render


@executor("approval")
class ApprovalExecutor:
    """Asks for a decision. The node runs again from its start when the run resumes, so it
    does nothing before the interrupt but render what is to be approved."""

    async def run(self, ctx: NodeContext) -> Outcome:
        request = {
            "approval_id": f"{ctx.run.run_id}-{ctx.node.id}-{ctx.visit}",
            "node": ctx.node.id,
            "summary": str(render(ctx.node.summary, ctx.values, "summary")),
            "data": render(ctx.node.data, ctx.values, "data"),
        }
        decision: Any = interrupt(request)
        decided = dict(decision) if isinstance(decision, dict) else {"approved": bool(decision)}
        output = {**request, **decided}
        if decided.get("approved"):
            return Outcome(output)
        reject = ctx.node.on_reject
        return Outcome(output, goto=[reject] if reject else [])
