"""Compile the conversation graph with the thread's checkpointer.

```
START ─┬─ summarize (the history passed a threshold) ─┐
       └──────────────────────────────────────────────┴─► route
route ─┬─ assistant (general: compact index + load_skill) ─────────────┐
       ├─ expert (one skill, its tools only) ──────────────────────────┤
       ├─ plan ─┬─ joint_expert (independent requests, small skills) ──┤
       │        └─ dispatch ⇄ task ×N (parallel, Send) → aggregate ────┤→ END
       └─ workflow (the engine's entry point) ─────────────────────────┘
```

When the router's requests make the plan on their own (each names its own skill, none refers
to another), the route step writes it and goes straight to the experts: no plan step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agents.graph.aggregate import dispatch, join, make_aggregate, make_task
from agents.graph.experts import make_expert, make_joint
from agents.graph.nodes import (
    AnswerOptions,
    Brain,
    make_assistant,
    make_route,
    make_summarize,
    make_workflow,
    needs_summary,
    tracked,
)
from agents.graph.planner import after_route, make_plan, with_quick_plan
from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.router.router import Router, RouterOptions
from agents.run import RunContext
from agents.skills.service import SkillService
from agents.state.schema import ThreadState
from agents.state.transcript import Transcript
from agents.workflows.conversation import WorkflowTurns
from agents.workflows.matcher import WorkflowMatcher


def on_loop(step: Callable[[ThreadState], Any]) -> Any:
    """``step`` as a coroutine. LangGraph runs a plain function (a node, an edge's path) in
    the default thread pool when the graph runs asynchronously: a hop to a worker thread and
    back, and a tussle for the GIL, for microseconds of work (twice a turn, measured)."""

    @functools.wraps(step)
    async def run(state: ThreadState) -> Any:
        return step(state)

    return run


def build_graph(
    gateway: ModelGateway,
    checkpointer: BaseCheckpointSaver[Any] | None,
    prompts: Prompts | None = None,
    skills: SkillService | None = None,
    options: AnswerOptions | None = None,
    router_options: RouterOptions | None = None,
    workflows: WorkflowMatcher | None = None,
    router: Router | None = None,
    workflow_turns: WorkflowTurns | None = None,
    transcript: Transcript | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The conversation graph (see the module docstring); ``router`` replaces the one made
    from ``router_options`` and ``workflows`` (the service shares its router with
    Conversations); ``transcript`` keeps the messages summaries compress."""
    prompts = prompts or Prompts()
    brain = Brain(
        gateway,
        prompts,
        skills,
        router or Router(skills, gateway, prompts, workflows, router_options),
        options or AnswerOptions(),
        workflow_turns,
        transcript,
    )
    graph = StateGraph(ThreadState, context_schema=RunContext)
    graph.add_node("summarize", make_summarize(brain))
    graph.add_node("route", tracked("route", with_quick_plan(brain, make_route(brain))))
    graph.add_node("assistant", tracked("assistant", make_assistant(brain)))
    graph.add_node("expert", tracked("expert", make_expert(brain)))
    graph.add_node("workflow", tracked("workflow", make_workflow(brain)))
    graph.add_node("plan", tracked("plan", make_plan(brain)))
    graph.add_node("task", make_task(brain))
    graph.add_node("join", on_loop(join))
    graph.add_node("aggregate", tracked("aggregate", make_aggregate(brain)))
    graph.add_node("joint_expert", tracked("joint_expert", make_joint(brain)))
    graph.add_conditional_edges(START, on_loop(needs_summary(brain)), ["summarize", "route"])
    graph.add_edge("summarize", "route")
    graph.add_conditional_edges(
        "route",
        on_loop(after_route),
        ["assistant", "expert", "plan", "workflow", "task", "aggregate", "joint_expert"],
    )
    graph.add_conditional_edges("plan", on_loop(dispatch), ["task", "aggregate", "joint_expert"])
    graph.add_edge("task", "join")
    graph.add_conditional_edges("join", on_loop(dispatch), ["task", "aggregate"])
    for node in ("assistant", "expert", "workflow", "aggregate", "joint_expert"):
        graph.add_edge(node, END)
    return graph.compile(checkpointer=checkpointer, name="skilldesk")
