"""Nodes that need no model and no skill: ``switch``, ``set``, ``join``."""

from __future__ import annotations

from agents.workflows.executors import NodeContext, Outcome, executor
from agents.workflows.templates import condition, render


@executor("switch")
class SwitchExecutor:
    """Goes to the first case whose condition holds, else to ``otherwise`` (or the end)."""

    async def run(self, ctx: NodeContext) -> Outcome:
        for i, case in enumerate(ctx.node.cases):
            if condition(case.when, ctx.values, f"cases.{i}.when"):
                return Outcome({"case": i, "goto": case.goto}, goto=[case.goto])
        target = ctx.node.otherwise
        return Outcome({"case": None, "goto": target}, goto=[target] if target else [])


@executor("set")
class SetExecutor:
    """Its rendered values are its output."""

    async def run(self, ctx: NodeContext) -> Outcome:
        return Outcome(render(ctx.node.values, ctx.values, "values"))


@executor("join")
class JoinExecutor:
    """Runs once every branch into it has: its output maps each branch to its output."""

    async def run(self, ctx: NodeContext) -> Outcome:
        nodes = ctx.values["nodes"]
        incoming = ctx.engine.flow(ctx.run.workflow).incoming.get(ctx.node.id, [])
        return Outcome({name: nodes.get(name, {}).get("output") for name in incoming})
