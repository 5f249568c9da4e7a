"""The general assistant node: the conversation, a compact skill index and ``load_skill``."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig

from agents.errors import NO_MODEL_HINT
from agents.graph.state import SCHEMA_VERSION, ThreadState
from agents.models import ModelGateway
from agents.models.chat_model import finish_stream
from agents.prompts import Prompts
from agents.skills.definitions import (
    LOAD_SKILL,
    meta_tool_definitions,
    openai_tool,
    render_definition,
)
from agents.skills.service import SkillService


@dataclass(frozen=True)
class AssistantOptions:
    """Knobs of the assistant loop."""

    max_iterations: int = 5
    index_budget_tokens: int = 300
    inject_threshold: float = 0.45
    inject_margin: float = 0.04


def make_assistant_node(
    gateway: ModelGateway,
    prompts: Prompts,
    skills: SkillService | None = None,
    options: AssistantOptions | None = None,
) -> Any:
    """Build the node; the run config's ``model_profile`` picks the profile for one run."""
    opts = options or AssistantOptions()

    async def assistant(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        if not gateway.configured:
            return {
                "messages": [AIMessage(content=NO_MODEL_HINT, name="skilldesk")],
                "schema_version": SCHEMA_VERSION,
            }
        messages = list(state.get("messages", []))
        rounds = _tool_rounds(messages)
        if rounds >= opts.max_iterations:
            return {
                "messages": [
                    AIMessage(
                        content=(
                            f"I stopped after {rounds} rounds of tool calls without reaching "
                            "an answer. Please rephrase or narrow the request and I will try again."
                        )
                    )
                ],
                "schema_version": SCHEMA_VERSION,
            }
        loaded = list(state.get("loaded_skills", []))
        update: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
        injected: list[BaseMessage] = []
        index_text = ""
        query = _last_user_text(messages)
        if skills is not None and len(skills.registry):
            index_text, _ = skills.index.compact(query, budget_tokens=opts.index_budget_tokens)
            if rounds == 0 and isinstance(messages[-1], HumanMessage):
                route, injected = _route(skills, query, loaded, opts)
                update["route"] = route
                if injected:
                    update["loaded_skills"] = [route["skill"]]
                    loaded.append(route["skill"])
        tools = meta_tool_definitions() if skills is not None and len(skills.registry) else []
        for name in loaded:
            if skills is not None and name in skills.registry:
                tools.extend(openai_tool(t) for t in skills.registry.get(name).tools)
        profile = (config.get("configurable") or {}).get("model_profile")
        model: Any = gateway.chat_model(profile)
        if tools:
            model = model.bind_tools(tools)
        system = SystemMessage(
            content=prompts.render("assistant", skill_index=index_text, summary=None)
        )
        reply = await _complete(model, [system, *messages, *injected], config)
        usage: dict[str, int] = {"model_calls": 1}
        if isinstance(reply, AIMessage) and reply.usage_metadata:
            usage.update(
                input_tokens=reply.usage_metadata["input_tokens"],
                output_tokens=reply.usage_metadata["output_tokens"],
                total_tokens=reply.usage_metadata["total_tokens"],
            )
        update.update(messages=[*injected, reply], usage=usage)
        return update

    return assistant


async def _complete(model: Any, messages: list[BaseMessage], config: RunnableConfig) -> AIMessage:
    # Streamed, so tokens reach the event stream; finished strictly (malformed tool-call JSON
    # must stay malformed, not be completed into a plausible call).
    final: AIMessageChunk | None = None
    async for chunk in model.astream(messages, config):
        final = chunk if final is None else final + chunk
    return finish_stream(final) if final is not None else AIMessage(content="")


def needs_tools(state: ThreadState) -> bool:
    """Whether the last AI message asked for tools (valid or malformed)."""
    last = state["messages"][-1] if state.get("messages") else None
    return isinstance(last, AIMessage) and bool(last.tool_calls or last.invalid_tool_calls)


def _route(
    skills: SkillService, query: str, loaded: list[str], opts: AssistantOptions
) -> tuple[dict[str, Any], list[BaseMessage]]:
    hits = skills.search(query, k=5)
    candidates = [
        {"name": h.name, "score": h.score, "dense": h.dense, "keyword": h.keyword} for h in hits
    ]
    route: dict[str, Any] = {"kind": "general", "candidates": candidates}
    if not hits:
        return route, []
    margin = hits[0].score - (hits[1].score if len(hits) > 1 else 0.0)
    confident = hits[0].score >= opts.inject_threshold and margin >= opts.inject_margin
    if not confident or hits[0].name in loaded:
        return route, []
    # A confident route injects the definition as if the model had called load_skill:
    # one model call saved, and the history stays valid for strict providers.
    skill = skills.registry.get(hits[0].name)
    call_id = f"inject_{uuid.uuid4().hex[:12]}"
    call = AIMessage(
        content="",
        tool_calls=[
            {"name": LOAD_SKILL, "args": {"name": skill.name}, "id": call_id, "type": "tool_call"}
        ],
        name="skilldesk-router",
    )
    result = ToolMessage(content=render_definition(skill), tool_call_id=call_id, name=LOAD_SKILL)
    route.update(kind="skill", skill=skill.name, injected=True, margin=round(margin, 4))
    return route, [call, result]


def _tool_rounds(messages: list[Any]) -> int:
    rounds = 0
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            break
        is_call = isinstance(message, AIMessage) and bool(
            message.tool_calls or message.invalid_tool_calls
        )
        if is_call and message.name != "skilldesk-router":
            rounds += 1
    return rounds


def _last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return message.text
    return ""
