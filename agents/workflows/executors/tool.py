"""``tool``: one skill tool, validated, trimmed and idempotent as inside experts."""

from __future__ import annotations

import re

from agents.errors import HandlerFailed
from agents.run import emit
from agents.skills.runner import idempotency_key_of
from agents.workflows.executors import NodeContext, Outcome, executor
from agents.workflows.templates import render


@executor("tool")
class ToolExecutor:
    """Calls the node's tool with its rendered arguments."""

    async def run(self, ctx: NodeContext) -> Outcome:
        skills = ctx.engine.skills
        if skills is None:
            raise HandlerFailed(f"no skills are installed, so {ctx.node.tool} cannot run")
        arguments = render(ctx.node.arguments, ctx.values, "arguments")
        # One key per run, node and visit: a resumed run calls with the same key, and a
        # side-effecting tool's journal answers it without running the handler again.
        key = idempotency_key_of(
            "workflow", ctx.node.tool, {}, ctx.run.run_id, f"{ctx.node.id}#{ctx.visit}"
        )
        call_id = f"{ctx.node.id}#{ctx.visit}"
        emit("tool_called", tool=ctx.node.tool, arguments=arguments, call_id=call_id)
        result = await skills.call(
            ctx.node.tool,
            arguments,
            thread_id=ctx.run.thread_id,
            run_id=ctx.run.run_id,
            idempotency_key=key,
        )
        emit(
            "tool_returned",
            tool=ctx.node.tool,
            call_id=call_id,
            ok=result.ok,
            content=result.content[:2000],
        )
        if not result.ok:  # "node 'x' failed: get_order raised ValueError: ... (tool_failed)"
            said = result.content.removeprefix(f"error ({result.error_code}): ")
            told = failure(ctx.node.tool, said, result.raised)
            raise HandlerFailed(f"{told} ({result.error_code})")
        return Outcome(result.data if result.data is not None else result.content)


def failure(tool: str, said: str, raised: str | None) -> str:
    """A failed call's error, as the runner ``said`` it, for its node's: the tool named once
    ("get_order raised ValueError: no order", not "get_order: get_order failed: ValueError:
    no order"); the node's failure says that it failed. ``raised``: the class of what the
    handler raised (``ToolResult.raised``), which the runner's words name; None when the call
    failed otherwise (its words are not read for a class name)."""
    rest = said.removeprefix(f"{tool} failed: ")
    if rest != said:
        if raised is not None:  # "ValueError: no order", "the handler raised SystemExit(3)"
            return f"{tool} raised {rest.removeprefix('the handler raised ')}"
        return f"{tool}: {rest}"
    named = re.search(rf"(?<![\w-]){re.escape(tool)}(?![\w-])", said)
    return said if named else f"{tool}: {said}"
