"""The tool-calling loop every answering node runs: model → tools → model, bounded."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.ai import add_ai_message_chunks
from langchain_core.runnables import RunnableConfig

from agents.graph.context import BudgetExceeded, RunContext, emit
from agents.models import ModelGateway
from agents.models.chat_model import finish_stream
from agents.models.usage import call_usage
from agents.skills.definitions import (
    LOAD_SKILL,
    READ_REFERENCE,
    SkillReferenceError,
    meta_tool_definitions,
    openai_tool,
    read_reference,
    render_definition,
)
from agents.skills.registry import SkillNotFound
from agents.skills.service import SkillService


@dataclass
class Scope:
    """What a loop may reach: loaded skills' tools, and which skills ``load_skill`` may add.

    Attributes:
        loaded: Skills whose tools are bound (grows when ``load_skill`` succeeds).
        loadable: Skills ``load_skill`` may add; ``None`` means any installed skill.
    """

    loaded: list[str] = field(default_factory=list)
    loadable: set[str] | None = None

    def may_load(self, name: str) -> bool:
        """Whether ``load_skill(name)`` is within this scope."""
        return self.loadable is None or name in self.loadable


@dataclass
class LoopResult:
    """What one loop produced."""

    messages: list[BaseMessage]
    answer: AIMessage
    newly_loaded: list[str]
    usage: dict[str, int]
    stopped: str | None = None  # "max_rounds" or "budget" when the loop was cut short


async def run_tool_loop(
    *,
    gateway: ModelGateway,
    skills: SkillService | None,
    system: str,
    history: list[BaseMessage],
    scope: Scope,
    ctx: RunContext,
    config: RunnableConfig,
    max_rounds: int,
    task_id: str | None = None,
) -> LoopResult:
    """Run the model with the scope's tools until it answers without tools (or a limit)."""
    new: list[BaseMessage] = []
    before = list(scope.loaded)
    usage = {"model_calls": 0, "input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    rounds = 0
    while True:
        try:
            ctx.budget.spend_model_call()
        except BudgetExceeded as exc:
            return _stopped(
                new,
                scope,
                before,
                usage,
                "budget",
                f"I had to stop: {exc}. Here is what I have so far.",
            )
        model: Any = gateway.chat_model(ctx.profile)
        tools = _tools(skills, scope)
        if tools:
            model = model.bind_tools(tools)
        reply = await complete(model, [SystemMessage(content=system), *history, *new], config)
        for key, value in call_usage(reply).items():
            usage[key] += value
        new.append(reply)
        if not (reply.tool_calls or reply.invalid_tool_calls):
            return LoopResult(new, reply, _newly(scope, before), usage)
        rounds += 1
        new.extend(await execute_tools(reply, skills, scope, ctx, task_id))
        if rounds >= max_rounds:
            return _stopped(
                new,
                scope,
                before,
                usage,
                "max_rounds",
                (
                    f"I stopped after {rounds} rounds of tool calls without reaching an answer. "
                    "Please rephrase or narrow the request and I will try again."
                ),
            )


async def complete(model: Any, messages: list[BaseMessage], config: RunnableConfig) -> AIMessage:
    """One model call, streamed (tokens reach the event stream), finished strictly."""
    chunks: list[AIMessageChunk] = [chunk async for chunk in model.astream(messages, config)]
    if not chunks:
        return AIMessage(content="")
    # One merge at the end: adding chunk by chunk rebuilds the message (and re-parses its
    # partial tool-call arguments) at every chunk.
    return finish_stream(add_ai_message_chunks(chunks[0], *chunks[1:]))


async def execute_tools(
    reply: AIMessage,
    skills: SkillService | None,
    scope: Scope,
    ctx: RunContext,
    task_id: str | None = None,
) -> list[ToolMessage]:
    """Run every tool call of ``reply``; each gets exactly one ToolMessage, whatever happens.

    Scope checks and meta-tools run in the order of the calls (``load_skill`` then a tool of
    that skill, in one reply, works). The skills' handlers then run concurrently, so a reply
    asking for two lookups waits for the slower one, not for both in turn; when any call of
    the reply has side effects ("create, then list"), they run one at a time, in call order.
    Every ``tool_called`` event comes before the handlers run; ``tool_returned`` events come
    as handlers finish (pair them by ``call_id``).
    """
    out: list[ToolMessage] = []
    for bad in reply.invalid_tool_calls:
        emit(
            "tool_called",
            tool=bad.get("name") or "",
            arguments={"_unparsed": bad.get("args")},  # the text the model sent
            call_id=bad.get("id") or "",
            task_id=task_id,
        )
        content = (
            f"error (invalid_arguments): the arguments of {bad.get('name')} are not "
            f"valid JSON ({bad.get('error') or 'unparsable'}); call it again with a "
            "JSON object"
        )
        out.append(_returned(bad.get("name") or "", bad.get("id") or "", content, False, task_id))
    runs: list[Awaitable[ToolMessage]] = []
    for call in reply.tool_calls:
        name, args, call_id = call["name"], call["args"], call.get("id") or ""
        emit("tool_called", tool=name, arguments=args, call_id=call_id, task_id=task_id)
        try:
            ctx.budget.spend_tool_call()
        except BudgetExceeded as exc:
            outcome: tuple[str, bool] | Awaitable[tuple[str, bool]] = (
                f"error (budget_exhausted): {exc}; answer with what you have",
                False,
            )
        else:
            outcome = _admit(skills, scope, name, args, ctx, call_id)
        runs.append(_finish(outcome, name, call_id, task_id))
    if _any_side_effects(skills, reply):
        out.extend([await run for run in runs])
    else:
        out.extend(await asyncio.gather(*runs))
    return out


def _any_side_effects(skills: SkillService | None, reply: AIMessage) -> bool:
    if skills is None:
        return False
    for call in reply.tool_calls:
        try:
            _, spec = skills.registry.tool(call["name"])
        except SkillNotFound:
            continue
        if spec.side_effects:
            return True
    return False


async def _finish(
    outcome: tuple[str, bool] | Awaitable[tuple[str, bool]],
    name: str,
    call_id: str,
    task_id: str | None,
) -> ToolMessage:
    if isinstance(outcome, tuple):
        content, ok = outcome
    else:
        try:
            content, ok = await outcome
        except Exception as exc:  # a fault outside the runner's own guards: still one result
            content, ok = f"error (tool_failed): {name} failed: {type(exc).__name__}: {exc}", False
    return _returned(name, call_id, content, ok, task_id)


def _returned(name: str, call_id: str, content: str, ok: bool, task_id: str | None) -> ToolMessage:
    emit(
        "tool_returned", tool=name, call_id=call_id, ok=ok, content=content[:2000], task_id=task_id
    )
    return ToolMessage(
        content=content,
        tool_call_id=call_id,
        name=name,
        status="success" if ok else "error",
    )


def _admit(
    skills: SkillService | None,
    scope: Scope,
    name: str,
    args: dict[str, Any],
    ctx: RunContext,
    call_id: str,
) -> tuple[str, bool] | Awaitable[tuple[str, bool]]:
    """A call's result when it is decided here (meta-tools, refusals), else the handler run."""
    if skills is None:
        return f"error (unknown_tool): no tool named {name!r}", False
    if name == LOAD_SKILL:
        skill_name = str(args.get("name", "")).strip()
        if skill_name in scope.loaded:
            return (
                f"Skill {skill_name!r} is already loaded in this conversation; its "
                "instructions are above and its tools are available."
            ), True
        if not scope.may_load(skill_name):
            return (
                f"error (out_of_scope): skill {skill_name!r} is not part of this task; "
                "work with the tools you have"
            ), False
        try:
            skill = skills.registry.get(skill_name)
        except SkillNotFound as exc:
            return f"error (unknown_skill): {exc}", False
        scope.loaded.append(skill_name)
        return render_definition(skill), True
    if name == READ_REFERENCE:
        skill_name, path = str(args.get("name", "")), str(args.get("path", ""))
        if skill_name not in scope.loaded:
            return (
                f"error (skill_not_loaded): load skill {skill_name!r} with load_skill first"
            ), False
        try:
            return read_reference(skills.registry.get(skill_name), path), True
        except (SkillNotFound, SkillReferenceError) as exc:
            return f"error (bad_reference): {exc}", False
    try:
        owner, _ = skills.registry.tool(name)
    except SkillNotFound as exc:
        return f"error (unknown_tool): {exc}", False
    if owner.name not in scope.loaded:
        # Only tools of skills this conversation (or task) loaded are callable: a tool name
        # planted in some text cannot widen what the model may do.
        if not scope.may_load(owner.name):
            return (f"error (out_of_scope): {name} is not available for this task"), False
        return (
            f"error (skill_not_loaded): {name} belongs to skill {owner.name!r}; call "
            f"load_skill with name {owner.name!r} first"
        ), False
    return _run_handler(skills, name, args, ctx, call_id)


async def _run_handler(
    skills: SkillService, name: str, args: dict[str, Any], ctx: RunContext, call_id: str
) -> tuple[str, bool]:
    result = await skills.call(
        name, args, thread_id=ctx.thread_id or None, run_id=ctx.run_id or None, call_id=call_id
    )
    return result.content, result.ok


def _tools(skills: SkillService | None, scope: Scope) -> list[dict[str, Any]]:
    if skills is None or not len(skills.registry):
        return []
    tools = meta_tool_definitions()
    for name in scope.loaded:
        if name in skills.registry:
            tools.extend(openai_tool(t) for t in skills.registry.get(name).tools)
    return tools


def _newly(scope: Scope, before: list[str]) -> list[str]:
    return [n for n in scope.loaded if n not in before]


def _stopped(
    new: list[BaseMessage],
    scope: Scope,
    before: list[str],
    usage: dict[str, int],
    why: str,
    text: str,
) -> LoopResult:
    answer = AIMessage(content=text)
    return LoopResult([*new, answer], answer, _newly(scope, before), usage, stopped=why)
