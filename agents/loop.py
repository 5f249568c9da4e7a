"""What an expert runs: its system prompt, and the tool-calling loop every answering node
runs (model → tools → model, bounded), in the conversation graph and in workflow nodes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from functools import partial
from typing import Any

import structlog
from langchain_core.callbacks import BaseCallbackManager
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.ai import add_ai_message_chunks
from langchain_core.runnables import RunnableBinding, RunnableConfig
from langsmith.utils import tracing_is_enabled

from agents import failpoints
from agents.errors import BudgetExceeded, ModelError, SkillNotFound
from agents.models import ModelGateway
from agents.models.chat_model import GatewayChatModel, finish_stream
from agents.models.errors import logged
from agents.models.usage import call_usage
from agents.prompts import Prompts
from agents.replies import Replies
from agents.run import RunContext, answering_node, emit
from agents.skills.loader import Skill
from agents.skills.meta import NOTE_SKILL, Outcome, Scope, SkillTools, definition_view
from agents.text import mend

log = structlog.get_logger(__name__)


@dataclass
class LoopResult:
    """What one loop produced."""

    messages: list[BaseMessage]
    answer: AIMessage
    newly_loaded: list[str]
    usage: dict[str, int]
    # "max_rounds" or "budget" when the loop was cut short; "empty" when, after tools ran, the
    # model's last reply said nothing
    stopped: str | None = None


EMPTY_ANSWER = "The model sent an empty answer; your message is kept: send it again."
EMPTY_DETAIL = (
    "No text and no tool call. If it recurs, check the model: a reasoning model may have "
    "spent its max_tokens thinking, or the provider filtered the answer."
)


async def run_tool_loop(
    *,
    gateway: ModelGateway,
    prompts: Prompts,
    tools: SkillTools | None,
    system: str,
    history: list[BaseMessage],
    scope: Scope,
    ctx: RunContext,
    config: RunnableConfig,
    max_rounds: int,
    task_id: str | None = None,
    profile: str | None = None,
) -> LoopResult:
    """Run the model with the scope's tools until it answers without tools (or a limit);
    ``profile`` (else the run's) names the model."""
    new: list[BaseMessage] = []
    before = list(scope.loaded)
    usage = {"model_calls": 0, "input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    rounds = 0
    replies = Replies(tools, scope, ctx, task_id, system)
    while True:
        reply = await replies.recorded(rounds)
        if reply is None:
            try:
                ctx.budget.spend_model_call()
            except BudgetExceeded as exc:
                text = prompts.reply("budget_exhausted", reason=str(exc))
                return _stopped(new, scope, before, usage, "budget", text)
            model: Any = gateway.chat_model(profile or ctx.profile)
            offered = tools.definitions(scope) if tools is not None else []
            if offered:
                model = model.bind_tools(offered)
            reply = await complete(model, [SystemMessage(content=system), *history, *new], config)
            for name, value in call_usage(reply).items():
                usage[name] = usage.get(name, 0) + value
            if reply.tool_calls or reply.invalid_tool_calls:
                await replies.record(rounds, reply)
        else:  # acted on already by a run cut off: the same calls again, not a new reply
            log.info("loop.reply_replayed", round=rounds, calls=len(reply.tool_calls))
            node = answering_node()
            if node is not None and reply.text:
                _token(node, reply.text)
        if not (reply.tool_calls or reply.invalid_tool_calls):
            if reply.text.strip():
                new.append(reply)
                return LoopResult(new, reply, _newly(scope, before), usage)
            if new:  # tools ran: what they did is kept, and said, though the model said nothing
                return _stopped(new, scope, before, usage, "empty", prompts.reply("empty_answer"))
            # Nothing to tell the user, nor to keep in the thread but the user's message.
            raise logged(
                ModelError(
                    EMPTY_ANSWER,
                    profile=profile or ctx.profile or "default",
                    code="model_bad_reply",
                    detail=EMPTY_DETAIL,
                )
            )
        new.append(reply)
        rounds += 1
        new.extend(await execute_tools(reply, tools, scope, ctx, task_id))
        if _noted_answer(reply):  # an answer that only notes the skill it followed: done
            return LoopResult(new, reply, _newly(scope, before), usage)
        if rounds >= max_rounds:
            text = prompts.reply("max_rounds", rounds=rounds)
            return _stopped(new, scope, before, usage, "max_rounds", text)


def _noted_answer(reply: AIMessage) -> bool:
    """Whether ``reply`` is an answer whose only tool calls note the skill it followed."""
    calls = reply.tool_calls
    only_notes = bool(calls) and all(c["name"] == NOTE_SKILL for c in calls)
    return only_notes and not reply.invalid_tool_calls and bool(reply.text.strip())


async def complete(model: Any, messages: list[BaseMessage], config: RunnableConfig) -> AIMessage:
    """One model call, streamed (an answering node's tokens reach the event stream as they
    come), finished strictly."""
    node = answering_node()
    direct = _direct(model, config)
    if direct is not None:  # the gateway's own model, no callback handler listening
        chat, kwargs = direct
        on_text = None if node is None else partial(_token, node)
        return await chat.stream_reply(messages, on_text, **kwargs)
    chunks: list[AIMessageChunk] = []
    async for chunk in model.astream(messages, config):
        chunks.append(chunk)
        if node is not None and isinstance(chunk.content, str) and chunk.content:
            emit("token", text=mend(chunk.content), node=node)
    if not chunks:
        return AIMessage(content="")
    # One merge at the end: adding chunk by chunk rebuilds the message (and re-parses its
    # partial tool-call arguments) at every chunk.
    return finish_stream(add_ai_message_chunks(chunks[0], *chunks[1:]))


def _token(node: str, text: str) -> None:
    emit("token", text=mend(text), node=node)


def _direct(model: Any, config: RunnableConfig) -> tuple[GatewayChatModel, dict[str, Any]] | None:
    """The gateway's chat model and its bound request fields, when the call can skip
    LangChain's streaming machinery: nothing would observe it (no callback handler in
    ``config``, no LangSmith tracing). Any other chat model streams through LangChain."""
    bound, kwargs = model, {}
    if isinstance(model, RunnableBinding):
        bound, kwargs = model.bound, dict(model.kwargs)
    if not isinstance(bound, GatewayChatModel) or tracing_is_enabled():
        return None
    callbacks = config.get("callbacks")
    handlers = callbacks.handlers if isinstance(callbacks, BaseCallbackManager) else callbacks
    return None if handlers else (bound, kwargs)


async def execute_tools(
    reply: AIMessage,
    tools: SkillTools | None,
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
            outcome: Outcome | Awaitable[Outcome] = (
                f"error (budget_exhausted): {exc}; answer with what you have",
                False,
            )
        else:
            outcome = _outcome(tools, scope, name, args, ctx, call_id)
        runs.append(_finish(outcome, name, call_id, task_id))
    if _any_side_effects(tools, reply):
        out.extend([await run for run in runs])
    else:
        out.extend(await asyncio.gather(*runs))
    for message in out:  # the tools ran; the node's checkpoint is not written yet
        failpoints.hit("tool.done", str(message.name))
    return out


def _any_side_effects(tools: SkillTools | None, reply: AIMessage) -> bool:
    if tools is None:
        return False
    for call in reply.tool_calls:
        try:
            _, spec = tools.skills.registry.tool(call["name"])
        except SkillNotFound:
            continue
        if spec.side_effects:
            return True
    return False


async def _finish(
    outcome: Outcome | Awaitable[Outcome],
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


def _outcome(
    tools: SkillTools | None,
    scope: Scope,
    name: str,
    args: dict[str, Any],
    ctx: RunContext,
    call_id: str,
) -> Outcome | Awaitable[Outcome]:
    if tools is None:
        return f"error (unknown_tool): no tool named {name!r}", False
    return tools.call(
        scope,
        name,
        args,
        thread_id=ctx.thread_id or None,
        run_id=ctx.run_id or None,
        call_id=call_id,
        turn_id=ctx.turn_id or None,
        occurrence=ctx.occurrence(name, args),
    )


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


def expert_system(
    prompts: Prompts,
    skills: list[Skill],
    task: str | None = None,
    inputs: dict[str, Any] | None = None,
    requests: list[Any] | None = None,
    summary: str | None = None,
    choose: bool = False,
    skill_index: str = "",
    attachments: list[Any] | None = None,
    note: bool = False,
) -> str:
    """An expert's system prompt, compiled at run time from the template and the skills.

    One skill for an expert, several for a joint expert (``requests`` then lists what the user
    asked of each) or, with ``choose``, close candidates of which the model uses the one that
    fits, or none (``skill_index`` lists the next best skills, to load should none fit).
    ``inputs`` (results of earlier tasks) are rendered as a delimited data
    block, apart from the instruction: text another expert produced must not read as an order.
    ``summary`` is the thread's summary of its earlier messages; ``attachments`` its files,
    by reference (name, type, size, caption). ``note``: the model is offered ``note_skill``.
    """
    return prompts.render(
        "expert",
        note=note,
        # The one-skill names of earlier versions, for a customised template that uses them.
        skill=skills[0],
        instructions=skills[0].body(),
        references=list(skills[0].references),
        skills=[definition_view(skill) for skill in skills],
        requests=requests or [],
        choose=choose,
        skill_index=skill_index,
        task=task,
        inputs=inputs or {},
        summary=summary,
        attachments=attachments or [],
    )
