"""Graph nodes that answer one message: route, general assistant, single expert."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import get_runtime

from agents.errors import NO_MODEL_HINT
from agents.graph.context import RunContext, emit
from agents.graph.loop import LoopResult, Scope, run_tool_loop
from agents.graph.state import SCHEMA_VERSION, ThreadState
from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.router.router import Router
from agents.skills.service import SkillService

# A node: async (state, config) -> update. Typed loosely: LangGraph's add_node overloads
# do not accept a Callable alias.
Node = Any


@dataclass(frozen=True)
class AnswerOptions:
    """Knobs of the answering nodes."""

    max_rounds: int = 5
    index_budget_tokens: int = 300
    # Several independent requests whose skills' definitions fit in this many tokens are
    # answered by one expert holding them all; 0 always runs an expert per request.
    joint_budget_tokens: int = 4000


@dataclass(frozen=True)
class Brain:
    """What the nodes share."""

    gateway: ModelGateway
    prompts: Prompts
    skills: SkillService | None
    router: Router
    options: AnswerOptions


def tracked(name: str, node: Node) -> Node:
    """Wrap a node so that its start and end are events."""

    async def run(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        emit("node_started", node=name)
        started = time.perf_counter()
        ok = False
        try:
            update: dict[str, Any] = await node(state, config)
            ok = True
            return update
        finally:
            emit(
                "node_finished",
                node=name,
                ok=ok,
                ms=round((time.perf_counter() - started) * 1000, 2),
            )

    return run


def context() -> RunContext:
    """The run's context (a default one when a graph is run without it)."""
    ctx = get_runtime(RunContext).context
    return ctx if isinstance(ctx, RunContext) else RunContext()


def last_user_text(state: ThreadState) -> str:
    """Text of the newest user message."""
    for message in reversed(state.get("messages", [])):
        if isinstance(message, HumanMessage):
            return message.text
    return ""


def make_route(brain: Brain) -> Node:
    """Decide the route and record it (state ``route``, event ``route``)."""

    async def route(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        usage: dict[str, int] = {}
        # Retrieval needs no language model, so the decision is made (and shown) in no-model
        # mode too; the answering node then says which setting to give.
        decided = await brain.router.decide(
            last_user_text(state), context(), config, previous=state.get("route")
        )
        decision: dict[str, Any] = decided.as_state()
        usage = decided.usage
        if not brain.gateway.configured and decision["kind"] == "multi":
            decision.update(kind="general", reason=decision["reason"] + "; no model to plan")
        emit(
            "route",
            kind=decision["kind"],
            target=decision["target"],
            by=decision["by"],
            candidates=decision["candidates"],
            skills=decision["skills"],
            reason=decision["reason"],
        )
        return {"route": decision, "usage": usage, "schema_version": SCHEMA_VERSION}

    return route


def next_after_route(state: ThreadState) -> str:
    """The node the route leads to."""
    kind = (state.get("route") or {}).get("kind", "general")
    return {"skill": "expert", "multi": "plan", "workflow": "workflow"}.get(kind, "assistant")


def _update(result: LoopResult) -> dict[str, Any]:
    update: dict[str, Any] = {
        "messages": result.messages,
        "usage": result.usage,
        "schema_version": SCHEMA_VERSION,
    }
    if result.newly_loaded:
        update["loaded_skills"] = result.newly_loaded
    return update


def make_assistant(brain: Brain) -> Node:
    """The general assistant: compact skill index in the prompt, any skill via load_skill."""

    async def assistant(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        if not brain.gateway.configured:
            return {
                "messages": [AIMessage(content=NO_MODEL_HINT, name="skilldesk")],
                "schema_version": SCHEMA_VERSION,
            }
        index_text, listed = "", list[str]()
        if brain.skills is not None and len(brain.skills.registry):
            index_text, listed = brain.skills.index.compact(
                last_user_text(state), budget_tokens=brain.options.index_budget_tokens
            )
        loaded = list(state.get("loaded_skills", []))
        # load_skill reaches what the prompt listed (and what the thread loaded before): a
        # skill name planted in a tool result cannot open the rest of the catalogue.
        scope = Scope(loaded=loaded, loadable={*listed, *loaded})
        system = brain.prompts.render("assistant", skill_index=index_text, summary=None)
        ctx = context()
        result = await run_tool_loop(
            gateway=brain.gateway,
            skills=brain.skills,
            system=system,
            history=list(state.get("messages", [])),
            scope=scope,
            ctx=ctx,
            config=config,
            max_rounds=brain.options.max_rounds,
        )
        return _update(result)

    return assistant


def expert_prompt(
    brain: Brain,
    skill_names: str | list[str],
    task: str | None = None,
    inputs: dict[str, Any] | None = None,
    requests: list[dict[str, Any]] | None = None,
) -> str:
    """An expert's system prompt, compiled at run time from the template and the skills.

    One skill for an expert, several for a joint expert (``requests`` then lists what the user
    asked of each). ``inputs`` (results of earlier tasks) are rendered as a delimited data
    block, apart from the instruction: text another expert produced must not read as an order.
    """
    assert brain.skills is not None
    names = [skill_names] if isinstance(skill_names, str) else skill_names
    skills = [brain.skills.registry.get(name) for name in names]
    return brain.prompts.render(
        "expert",
        # The one-skill names of earlier versions, for a customised template that uses them.
        skill=skills[0],
        instructions=skills[0].body(),
        references=list(skills[0].references),
        skills=[
            {
                "name": skill.name,
                "description": skill.description,
                "instructions": skill.body(),
                "references": list(skill.references),
            }
            for skill in skills
        ],
        requests=requests or [],
        task=task,
        inputs=inputs or {},
        summary=None,
    )


def make_expert(brain: Brain) -> Node:
    """One expert answers with one skill; its answer goes to the user as it wrote it."""

    async def expert(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        route = state.get("route") or {}
        skill_name = str(route.get("target"))
        ctx = context()
        if brain.skills is None or skill_name not in brain.skills.registry:
            answer = AIMessage(content=f"There is no skill named {skill_name!r} here.")
            return {"messages": [answer], "schema_version": SCHEMA_VERSION}
        if not brain.gateway.configured:
            return {
                "messages": [AIMessage(content=NO_MODEL_HINT, name="skilldesk")],
                "schema_version": SCHEMA_VERSION,
            }
        scope = Scope(loaded=[skill_name], loadable={skill_name})
        result = await run_tool_loop(
            gateway=brain.gateway,
            skills=brain.skills,
            system=expert_prompt(brain, skill_name),
            history=list(state.get("messages", [])),
            scope=scope,
            ctx=ctx,
            config=config,
            max_rounds=brain.options.max_rounds,
        )
        # The definition lived in this expert's system prompt, not in the history, so the skill
        # is not recorded as loaded for later turns of the general assistant.
        update = _update(result)
        update.pop("loaded_skills", None)
        return update

    return expert


def make_workflow_placeholder() -> Node:
    """Stands where the workflow engine plugs in (see agents/router/workflows.py)."""

    async def workflow(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        name = (state.get("route") or {}).get("target")
        return {
            "messages": [
                AIMessage(
                    content=(
                        f"The workflow {name!r} cannot run: no workflow engine is installed yet."
                    )
                )
            ],
            "schema_version": SCHEMA_VERSION,
        }

    return workflow
