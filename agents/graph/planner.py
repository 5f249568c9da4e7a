"""Several intents: the plan of tasks, from the router's requests (no model call) or from
the planner (one forced function call), checked before anything runs."""

from __future__ import annotations

import uuid
from typing import Any

import structlog
from langchain_core.runnables import RunnableConfig
from langgraph.types import Send

from agents.errors import BudgetExceeded, ModelError
from agents.graph.aggregate import dispatch
from agents.graph.experts import one_expert_fits
from agents.graph.nodes import Brain, Node, last_user_text, next_after_route
from agents.models.structured import forced_call, function_tool
from agents.router.intents import independent, split_intents
from agents.run import current_context, emit
from agents.state.schema import PlannedTask, Task, ThreadState, Workspace

log = structlog.get_logger(__name__)
MAX_TASKS = 6


def make_plan(brain: Brain) -> Node:
    """One model call (forced function call) turns the message into tasks with dependencies."""

    async def plan(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        route = state.get("route") or {}
        allowed = _allowed(brain, route)
        text = last_user_text(state)
        tasks = _clause_tasks(route, text)
        usage: dict[str, int] = {}
        if tasks is None:
            ctx = current_context()
            try:
                ctx.budget.spend_model_call()
                tasks, usage = await _plan_with_model(
                    brain, text, allowed, brain.gateway.node_profile("planner", ctx.profile), config
                )
            except (ModelError, BudgetExceeded) as exc:
                emit("error", code="planner_failed", message=str(exc))
        problem = check_plan(tasks, allowed) if tasks is not None else "no plan"
        if problem:
            log.info("planner.fallback", problem=problem)
            tasks = _fallback(brain, text, route.get("skills", []))
        return {"workspace": new_workspace(brain, tasks or []), "usage": usage}

    return plan


def with_quick_plan(brain: Brain, route_node: Node) -> Node:
    """The route step, planning in the same step when the router's requests make the plan
    (each names its own skill, none refers to another): no planner step, no model call."""

    async def route(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        update: dict[str, Any] = await route_node(state, config)
        decision = update.get("route") or {}
        if decision.get("kind") != "multi" or brain.skills is None:
            return update
        tasks = _clause_tasks(decision, last_user_text(state))
        if tasks is None or check_plan(tasks, _allowed(brain, decision)):
            return update  # the plan step decides (a model call, or the fallback)
        workspace = new_workspace(brain, tasks)
        decision = {**decision, "plan_id": workspace["plan_id"]}
        return {**update, "route": decision, "workspace": workspace}

    return route


def after_route(state: ThreadState) -> list[Send] | str:
    """The planned tasks when the route step planned them, else the node the route names."""
    route = state.get("route") or {}
    planned = route.get("plan_id")
    if planned and planned == (state.get("workspace") or {}).get("plan_id"):
        return dispatch(state)
    return next_after_route(state)


def new_workspace(brain: Brain, tasks: list[PlannedTask]) -> Workspace:
    """A new plan: every task pending, and how they will be answered."""
    return Workspace(
        plan_id=uuid.uuid4().hex[:12],
        mode="joint" if one_expert_fits(brain, tasks) else "parallel",
        tasks={t["id"]: Task(**t, status="pending", result=None, error=None) for t in tasks},
    )


def check_plan(tasks: list[PlannedTask], allowed: list[str]) -> str | None:
    """Why a plan cannot run (unknown skill, duplicate id, missing or cyclic dependency)."""
    if not tasks or len(tasks) > MAX_TASKS:
        return f"a plan needs 1 to {MAX_TASKS} tasks"
    ids = [t["id"] for t in tasks]
    if len(set(ids)) != len(ids):
        return "duplicate task ids"
    for t in tasks:
        if t["skill"] not in allowed:
            return f"task {t['id']} names skill {t['skill']!r} outside the route"
        if any(d not in ids for d in t["depends_on"]):
            return f"task {t['id']} depends on an unknown task"
    done: set[str] = set()
    remaining = {t["id"]: set(t["depends_on"]) for t in tasks}
    while remaining:
        ready = [i for i, deps in remaining.items() if deps <= done]
        if not ready:
            return "the dependencies form a cycle"
        for i in ready:
            done.add(i)
            del remaining[i]
    return None


def _allowed(brain: Brain, route: dict[str, Any]) -> list[str]:
    """Skills a plan for this route may use: the routed ones and the candidates."""
    assert brain.skills is not None
    named = [*route.get("skills", []), *[c["name"] for c in route.get("candidates", [])]]
    return [n for n in dict.fromkeys(named) if n in brain.skills.registry]


def _clause_tasks(route: dict[str, Any], text: str) -> list[PlannedTask] | None:
    """One task per request the router mapped to a skill, when none refers to another."""
    clauses = route.get("clauses") or []
    if not clauses or not independent(text):
        return None
    return [
        PlannedTask(id=f"t{i}", skill=c["skill"], instruction=c["clause"], depends_on=[])
        for i, c in enumerate(clauses, 1)
    ]


async def _plan_with_model(
    brain: Brain, text: str, allowed: list[str], profile: str | None, config: RunnableConfig
) -> tuple[list[PlannedTask], dict[str, int]]:
    assert brain.skills is not None
    skills = [brain.skills.registry.get(n) for n in allowed]
    spec = brain.prompts.tool("plan_tasks", skills=allowed, max_tasks=MAX_TASKS)
    tool = function_tool(spec["name"], spec["description"], spec["parameters"])
    system = brain.prompts.render("planner", skills=skills)
    args, usage = await forced_call(brain.gateway, profile, tool, system, text, config)
    tasks = [
        PlannedTask(
            id=str(t.get("id")),
            skill=str(t.get("skill")),
            instruction=str(t.get("instruction", "")),
            depends_on=[str(d) for d in t.get("depends_on") or []],
        )
        for t in args.get("tasks") or []
        if isinstance(t, dict)
    ]
    return tasks, usage


def _fallback(brain: Brain, text: str, skills: list[str]) -> list[PlannedTask]:
    """One task per clause that names a routed skill, all independent."""
    assert brain.skills is not None
    tasks: list[PlannedTask] = []
    for clause in split_intents(text):
        hits = brain.skills.search(clause, k=1)
        if hits and hits[0].name in skills and all(t["skill"] != hits[0].name for t in tasks):
            tasks.append(
                PlannedTask(
                    id=f"t{len(tasks) + 1}", skill=hits[0].name, instruction=clause, depends_on=[]
                )
            )
    return tasks or [PlannedTask(id="t1", skill=skills[0], instruction=text, depends_on=[])]
