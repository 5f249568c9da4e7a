"""Nodes that ask a model: ``llm`` (a prompt, optionally a structured output) and ``expert``
(a model working with one skill's instructions and tools)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage

from agents.errors import HandlerFailed, ModelError, SkillNotFound
from agents.loop import complete, expert_system, run_tool_loop
from agents.models.structured import checked_call, function_tool
from agents.models.usage import call_usage
from agents.run import RunContext
from agents.skills.arguments import schema_problems
from agents.skills.meta import Scope, SkillTools
from agents.workflows.executors import NodeContext, Outcome, executor
from agents.workflows.templates import render


@executor("llm")
class LlmExecutor:
    """One model call; with ``schema``, a forced function call fills the object, which must
    match the schema: the model is asked again once with what was wrong, then the node fails."""

    async def run(self, ctx: NodeContext) -> Outcome:
        gateway = ctx.engine.gateway
        prompt = str(render(ctx.node.prompt, ctx.values, "prompt"))
        system = str(render(ctx.node.system, ctx.values, "system"))
        profile = ctx.node.model or ctx.run.profile
        schema = ctx.node.output_schema
        if schema is not None:
            tool = function_tool("answer", "The answer, as the schema asks.", schema)

            def check(args: dict[str, Any]) -> str | None:
                return "; ".join(schema_problems(schema, args)) or None

            args, usage, problem = await checked_call(
                gateway, profile, tool, system, prompt, {}, check
            )
            if problem is not None:
                raise ModelError(
                    f"the model's answer for node {ctx.node.id!r} does not match the node's "
                    f"schema, also when asked again: {problem}",
                    profile=profile or "default",
                )
            return Outcome(args, usage=usage)
        messages: list[Any] = [HumanMessage(prompt)]
        if system:
            messages.insert(0, SystemMessage(system))
        reply = await complete(gateway.chat_model(profile), messages, {})
        return Outcome(reply.text, usage=call_usage(reply))


@executor("expert")
class ExpertExecutor:
    """The skill's expert carries out the rendered task with the skill's tools."""

    async def run(self, ctx: NodeContext) -> Outcome:
        engine = ctx.engine
        if engine.skills is None:
            raise HandlerFailed(f"skill {ctx.node.skill!r} is not installed")
        try:
            skill = engine.skills.registry.get(ctx.node.skill)
        except SkillNotFound as exc:
            raise HandlerFailed(str(exc)) from None
        task = str(render(ctx.node.prompt, ctx.values, "prompt"))
        # The run's id in the turn's: another run of the workflow on the thread makes its
        # own side effects (with the node's id alone, the journal answered them with the
        # first run's). A run resumed acts on the replies each try recorded (``again``); a
        # retry asks the model anew (``attempt``). The replies recorded are the run's to
        # forget once its steps are checkpointed (``RunInfo.recorded``).
        loop_ctx = RunContext(
            thread_id=ctx.run.thread_id or "",
            run_id=ctx.run.run_id,
            profile=ctx.node.model or ctx.run.profile,
            turn_id=f"{ctx.run.run_id}:{ctx.node.id}#{ctx.visit}",
            again=True,
            attempt=ctx.attempt,
            recorded=ctx.run.recorded,
        )
        result = await run_tool_loop(
            gateway=engine.gateway,
            prompts=engine.prompts,
            tools=SkillTools(engine.skills, engine.prompts),
            system=expert_system(engine.prompts, [skill], task=task),
            history=[HumanMessage(task)],
            scope=Scope(loaded=[skill.name], loadable={skill.name}),
            ctx=loop_ctx,
            config={},
            max_rounds=engine.max_rounds,
        )
        if result.stopped:
            raise HandlerFailed(str(result.answer.text))
        return Outcome(str(result.answer.text), usage=result.usage)
