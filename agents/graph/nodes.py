"""What the graph's nodes share, and the nodes that need no plan: route, general assistant,
the workflow placeholder."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import structlog
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig

from agents.errors import NO_MODEL_HINT, BudgetExceeded, ModelError
from agents.loop import LoopResult, run_tool_loop
from agents.memory.summaries import (
    EmptySummary,
    SummaryOptions,
    cut_point,
    over_threshold,
    summarised_count,
    summary_text,
    write_summary,
)
from agents.models import ModelGateway
from agents.models.config import NodeRole
from agents.prompts import Prompts
from agents.router.router import Route, Router
from agents.run import RunContext, answering, current_context, emit
from agents.skills.meta import Scope, SkillTools, definition_view
from agents.skills.service import SkillService
from agents.state.schema import ThreadState
from agents.state.transcript import Transcript, TranscriptUnavailable
from agents.workflows.conversation import WorkflowTurns

log = structlog.get_logger(__name__)

# A node: async (state, config) -> update. Typed loosely: LangGraph's add_node overloads
# do not accept a Callable alias.
Node = Any


@dataclass(frozen=True)
class AnswerOptions:
    """Knobs of the answering nodes (the service sets them from its settings)."""

    max_rounds: int = 5
    index_budget_tokens: int = 300
    # Several independent requests whose skills' definitions fit in this many tokens are
    # answered by one expert holding them all; 0 always runs an expert per request.
    joint_budget_tokens: int = 4000
    # When the thread's earlier messages are summarised (see agents/memory/summaries.py).
    summary: SummaryOptions = field(default_factory=SummaryOptions)
    # Offer note_skill beside skills with no tools that the model chooses among, so that
    # routing learns from those turns too (off when learning is: it costs prompt tokens).
    note_skills: bool = True


@dataclass(frozen=True)
class Brain:
    """What the nodes share."""

    gateway: ModelGateway
    prompts: Prompts
    skills: SkillService | None
    router: Router
    options: AnswerOptions
    workflows: WorkflowTurns | None = None  # answers turns routed to a workflow
    # Where a summary step keeps the originals of the messages it compresses.
    transcript: Transcript | None = None
    # The skills' tiers as tools (None without a skills folder).
    tools: SkillTools | None = field(init=False)

    def __post_init__(self) -> None:
        tools = None if self.skills is None else SkillTools(self.skills, self.prompts)
        object.__setattr__(self, "tools", tools)

    async def answer(
        self,
        system: str,
        history: list[Any],
        scope: Scope,
        config: RunnableConfig,
        *,
        ctx: RunContext | None = None,
        task_id: str | None = None,
        node: NodeRole = "expert",
    ) -> LoopResult:
        """Run the tool loop with this brain's model (``node``'s profile), prompts and skills."""
        ctx = ctx or current_context()
        return await run_tool_loop(
            gateway=self.gateway,
            prompts=self.prompts,
            tools=self.tools,
            system=system,
            history=history,
            scope=scope,
            ctx=ctx,
            config=config,
            max_rounds=self.options.max_rounds,
            task_id=task_id,
            profile=self.gateway.node_profile(node, ctx.profile),
        )


def tracked(name: str, node: Node) -> Node:
    """Wrap a node so that its start and end are events."""

    async def run(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        emit("node_started", node=name)
        started = time.perf_counter()
        ok = False
        try:
            with answering(name):
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


def last_user_text(state: ThreadState) -> str:
    """Text of the newest user message."""
    for message in reversed(state.get("messages", [])):
        if isinstance(message, HumanMessage):
            return message.text
    return ""


def no_model_reply() -> dict[str, Any]:
    """The update of an answering node when no model is configured: which setting to give."""
    return {"messages": [AIMessage(content=NO_MODEL_HINT, name="skilldesk")]}


def loop_update(result: LoopResult) -> dict[str, Any]:
    """The state update of an answering node's tool loop."""
    update: dict[str, Any] = {"messages": result.messages, "usage": result.usage}
    if result.newly_loaded:
        update["loaded_skills"] = result.newly_loaded
    return update


def needs_summary(brain: Brain) -> Any:
    """The edge from the start: ``summarize`` when the active history passes a threshold (and
    a model can write the summary), else straight to ``route``, with no step in between."""

    def before_route(state: ThreadState) -> str:
        messages = state.get("messages", [])
        if brain.gateway.configured and over_threshold(messages, brain.options.summary):
            return "summarize"
        return "route"

    return before_route


def make_summarize(brain: Brain) -> Node:
    """Replace the oldest messages of the active history by a summary (state ``summary``):
    they leave ``messages`` through RemoveMessage (the checkpoints before keep them); no other
    field is written. A failed summary call leaves the thread as it was, with an ``error``
    event (``summary_failed``), and the turn goes on."""

    async def summarize(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        messages = list(state.get("messages", []))
        cut = cut_point(messages, brain.options.summary.keep)
        compressed = messages[:cut]
        if not compressed or any(not m.id for m in compressed):
            return {}
        emit("node_started", node="summarize")
        started = time.perf_counter()
        ctx = current_context()
        profile = brain.gateway.node_profile("summarizer")
        try:
            ctx.budget.spend_model_call()
            summary, usage = await write_summary(
                brain.gateway,
                brain.prompts,
                profile,
                state.get("summary"),
                compressed,
                config,
                max_entries=brain.options.summary.entries,
            )
            if brain.transcript is not None:  # before they leave the active history
                thread = str(config["configurable"]["thread_id"])
                first = summarised_count(state.get("summary"))
                await brain.transcript.keep(thread, first, compressed)
        except (ModelError, BudgetExceeded, EmptySummary, TranscriptUnavailable) as exc:
            message = f"the earlier messages were not summarised: {exc}"
            log.warning("summary.failed", error=str(exc), messages=len(compressed))
            emit("error", code="summary_failed", message=message)
            ok, update = False, {}
        else:
            log.info("summary.written", messages=len(compressed), kept=len(messages) - cut)
            removed = [RemoveMessage(id=str(m.id)) for m in compressed]
            ok, update = True, {"summary": summary, "messages": removed, "usage": usage}
        ms = round((time.perf_counter() - started) * 1000, 2)
        emit("node_finished", node="summarize", ok=ok, ms=ms)
        return update

    return summarize


def make_route(brain: Brain) -> Node:
    """Decide the route and record it (state ``route``, event ``route``)."""

    async def route(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        # Retrieval needs no language model, so the decision is made (and shown) in no-model
        # mode too; the answering node then says which setting to give.
        ctx = current_context()
        pending = state.get("pending_workflow")
        if pending and not (ctx.target_skill or ctx.target_workflow):
            reason = "answers what the workflow asked for"
            decided = Route(
                kind="workflow", by="pending", target=pending["workflow"], reason=reason
            )
        else:
            decided = await brain.router.decide(
                last_user_text(state), ctx, config, previous=state.get("route")
            )
        decision: dict[str, Any] = decided.as_state()
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
            offered=decision["offered"],
        )
        return {"route": decision, "usage": decided.usage}

    return route


def next_after_route(state: ThreadState) -> str:
    """The node the route leads to."""
    kind = (state.get("route") or {}).get("kind", "general")
    return {"skill": "expert", "candidates": "expert", "multi": "plan", "workflow": "workflow"}.get(
        kind, "assistant"
    )


# Retrieved skills a prompt reaches, in full (offered) or listed for `load_skill`: the general
# assistant's, the top five (at least the next best listed); the candidates expert's, its
# close candidates and the two next best. Deeper entries rarely fit (measured in
# bench/routing_policy.py) and cost every turn their lines.
REACH = 5
NEXT_BEST = 2


def listed_beside(offered: int) -> int:
    """How many hits the general assistant's index lists beside ``offered`` pre-loaded ones:
    the rest of the top five, and at least the next best."""
    return max(1, REACH - offered)


def make_assistant(brain: Brain) -> Node:
    """The general assistant: the definitions of its best hits that fit (the route's
    ``offered``) in its prompt with their tools, a compact index of the next ones, any of
    them via load_skill."""

    async def assistant(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        if not brain.gateway.configured:
            return no_model_reply()
        index_text, listed = "", list[str]()
        offered: list[Any] = []
        if brain.skills is not None and len(brain.skills.registry):
            registry = brain.skills.registry
            names = (state.get("route") or {}).get("offered") or []
            offered = [registry.get(n) for n in names if n in registry]
            index_text, listed = brain.skills.index.compact(
                last_user_text(state),
                budget_tokens=brain.options.index_budget_tokens,
                k=listed_beside(len(offered)),
                exclude={s.name for s in offered},
            )
        loaded = list(state.get("loaded_skills", []))
        preloaded = [s.name for s in offered if s.name not in loaded]
        # load_skill reaches what the prompt listed (and what the thread loaded before): a
        # skill name planted in a tool result cannot open the rest of the catalogue.
        # Pre-loaded definitions live in this prompt only: the loop does not record them as
        # loaded for the thread.
        scope = Scope(loaded=[*loaded, *preloaded], loadable={*listed, *loaded, *preloaded})
        if brain.options.note_skills:
            scope.notable = tuple(s.name for s in offered if s.instruction_only)
        system = brain.prompts.render(
            "assistant",
            skill_index=index_text,
            preloaded=[definition_view(s) for s in offered if s.name in preloaded],
            note=bool(scope.notable),
            summary=summary_text(state.get("summary")),
            attachments=state.get("attachments", []),
        )
        result = await brain.answer(
            system, list(state.get("messages", [])), scope, config, node="assistant"
        )
        return loop_update(result)

    return assistant


def make_workflow(brain: Brain) -> Node:
    """A turn routed to a workflow: its inputs from the message (or asked for), its run, its
    end as the answer; what it still needs stays pending for the thread's next message."""

    async def workflow(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        name = str((state.get("route") or {}).get("target"))
        if brain.workflows is None:
            text = brain.prompts.reply("workflow_unavailable", name=name)
            return {"messages": [AIMessage(content=text)], "pending_workflow": None}
        answer = await brain.workflows.answer(
            name,
            last_user_text(state),
            state.get("pending_workflow"),
            current_context(),
            config,
        )
        return {
            "messages": [AIMessage(content=answer.reply)],
            "pending_workflow": answer.pending,
            "usage": answer.usage,
        }

    return workflow
