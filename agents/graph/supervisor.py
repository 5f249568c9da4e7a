"""Several intents: a planner splits the message into tasks, experts run them (independent
ones in parallel through ``Send``), an aggregator composes one answer."""

from __future__ import annotations

import json
import uuid
from typing import Any

import structlog
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Send

from agents.errors import ModelError
from agents.graph.context import BudgetExceeded, emit
from agents.graph.loop import LoopResult, Scope, complete, run_tool_loop
from agents.graph.nodes import (
    Brain,
    Node,
    context,
    expert_prompt,
    last_user_text,
    next_after_route,
)
from agents.graph.state import SCHEMA_VERSION, ThreadState
from agents.models.structured import forced_call, function_tool
from agents.models.usage import call_usage
from agents.router.intents import independent, split_intents
from agents.skills.definitions import META_TOOLS, openai_tool
from agents.skills.loader import Skill
from agents.skills.registry import SkillNotFound
from agents.tokens import count_tokens

log = structlog.get_logger(__name__)
PLAN = "plan_tasks"
MAX_TASKS = 6
JOINT = "joint"  # one expert holds every task's skill and answers in one reply
PARALLEL = "parallel"  # one expert per task (Send), then the aggregator


def make_plan(brain: Brain) -> Node:
    """One model call (forced function call) turns the message into tasks with dependencies."""

    async def plan(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        assert brain.skills is not None
        route = state.get("route") or {}
        allowed = _allowed(brain, route)
        text = last_user_text(state)
        ctx = context()
        tasks = _clause_tasks(route, text)
        usage: dict[str, int] = {}
        if tasks is None:
            try:
                ctx.budget.spend_model_call()
                tasks, usage = await _plan_with_model(brain, text, allowed, ctx.profile, config)
            except (ModelError, BudgetExceeded) as exc:
                emit("error", code="planner_failed", message=str(exc))
        problem = _check(tasks, allowed) if tasks is not None else "no plan"
        if problem:
            log.info("planner.fallback", problem=problem)
            tasks = _fallback(brain, text, route.get("skills", []))
        return {
            "workspace": _workspace(brain, tasks or []),
            "usage": usage,
            "schema_version": SCHEMA_VERSION,
        }

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
        if tasks is None or _check(tasks, _allowed(brain, decision)):
            return update  # the plan step decides (a model call, or the fallback)
        workspace = _workspace(brain, tasks)
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


def _allowed(brain: Brain, route: dict[str, Any]) -> list[str]:
    """Skills a plan for this route may use: the routed ones and the candidates."""
    assert brain.skills is not None
    named = [*route.get("skills", []), *[c["name"] for c in route.get("candidates", [])]]
    return [n for n in dict.fromkeys(named) if n in brain.skills.registry]


def _clause_tasks(route: dict[str, Any], text: str) -> list[dict[str, Any]] | None:
    """One task per request the router mapped to a skill, when none refers to another."""
    clauses = route.get("clauses") or []
    if not clauses or not independent(text):
        return None
    return [
        {"id": f"t{i}", "skill": c["skill"], "instruction": c["clause"], "depends_on": []}
        for i, c in enumerate(clauses, 1)
    ]


def _workspace(brain: Brain, tasks: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "plan_id": uuid.uuid4().hex[:12],
        "mode": JOINT if _one_expert_fits(brain, tasks) else PARALLEL,
        "tasks": {
            t["id"]: {**t, "status": "pending", "result": None, "error": None} for t in tasks
        },
    }


async def _plan_with_model(
    brain: Brain, text: str, allowed: list[str], profile: str | None, config: RunnableConfig
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    assert brain.skills is not None
    listing = "\n".join(f"- {n}: {brain.skills.registry.get(n).description}" for n in allowed)
    task = {
        "type": "object",
        "additionalProperties": False,
        "required": ["id", "skill", "instruction"],
        "properties": {
            "id": {"type": "string"},
            "skill": {"type": "string", "enum": allowed},
            "instruction": {"type": "string"},
            "depends_on": {"type": "array", "items": {"type": "string"}},
        },
    }
    tool = function_tool(
        PLAN,
        "The tasks to carry out for the user's message.",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["tasks"],
            "properties": {
                "tasks": {"type": "array", "minItems": 1, "maxItems": MAX_TASKS, "items": task}
            },
        },
    )
    system = brain.prompts.render("planner", skills=listing)
    args, usage = await forced_call(brain.gateway, profile, tool, system, text, config)
    raw = args.get("tasks") or []
    tasks = [
        {
            "id": str(t.get("id")),
            "skill": str(t.get("skill")),
            "instruction": str(t.get("instruction", "")),
            "depends_on": [str(d) for d in t.get("depends_on") or []],
        }
        for t in raw
        if isinstance(t, dict)
    ]
    return tasks, usage


def _check(tasks: list[dict[str, Any]], allowed: list[str]) -> str | None:
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


def _fallback(brain: Brain, text: str, skills: list[str]) -> list[dict[str, Any]]:
    """One task per clause that names a routed skill, all independent."""
    assert brain.skills is not None
    tasks: list[dict[str, Any]] = []
    for clause in split_intents(text):
        hits = brain.skills.search(clause, k=1)
        if hits and hits[0].name in skills and all(t["skill"] != hits[0].name for t in tasks):
            tasks.append(
                {
                    "id": f"t{len(tasks) + 1}",
                    "skill": hits[0].name,
                    "instruction": clause,
                    "depends_on": [],
                }
            )
    return tasks or [{"id": "t1", "skill": skills[0], "instruction": text, "depends_on": []}]


def _one_expert_fits(brain: Brain, tasks: list[dict[str, Any]]) -> bool:
    """Whether one expert holding every task's skill should answer (see ``make_joint``)."""
    budget = brain.options.joint_budget_tokens
    if brain.skills is None or budget <= 0 or not tasks:
        return False
    if any(t["depends_on"] for t in tasks):
        return False  # a task needs another's result: experts run in order
    try:
        skills = [brain.skills.registry.get(n) for n in dict.fromkeys(t["skill"] for t in tasks)]
    except SkillNotFound:
        return False
    if any(t.side_effects for s in skills for t in s.tools):
        # Separate experts keep each request's tools apart: text returned by one request's
        # lookup must not be able to trigger another request's side-effecting tool.
        return False
    return sum(_definition_tokens(s) for s in skills) <= budget


_DEFINITION_TOKENS: dict[tuple[str, str], int] = {}


def _definition_tokens(skill: Skill) -> int:
    """Tokens of a skill's instructions and tool schemas, counted once per version of its
    folder (the count reads SKILL.md and tokenises it)."""
    key = (skill.name, skill.fingerprint)
    count = _DEFINITION_TOKENS.get(key)
    if count is None:
        tools = json.dumps([openai_tool(t) for t in skill.tools])
        count = count_tokens(skill.body()) + count_tokens(tools)
        if len(_DEFINITION_TOKENS) > 4096:  # versions of edited skills pile up otherwise
            _DEFINITION_TOKENS.clear()
        _DEFINITION_TOKENS[key] = count
    return count


def dispatch(state: ThreadState) -> list[Send] | str:
    """Send every ready task to an expert; when nothing is left, aggregate.

    A plan in joint mode goes to the one expert that holds all its skills instead.
    """
    workspace = state.get("workspace") or {}
    tasks = workspace.get("tasks", {})
    pending = {i: t for i, t in tasks.items() if t["status"] == "pending"}
    if not pending:
        return "aggregate"
    if workspace.get("mode") == JOINT:
        return "joint_expert"
    finished = {i for i, t in tasks.items() if t["status"] in ("done", "failed")}
    ready = [t for t in pending.values() if set(t["depends_on"]) <= finished]
    if not ready:
        return "aggregate"  # unreachable for a checked plan; never loop
    plan_id = (state.get("workspace") or {}).get("plan_id")
    return [Send("task", {"task": t, "tasks": tasks, "plan_id": plan_id}) for t in ready]


def make_task(brain: Brain) -> Any:
    """Run one planned task with its expert; a failure is recorded, not raised."""

    async def task(payload: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        item, tasks = payload["task"], payload["tasks"]
        task_id = item["id"]
        emit("node_started", node="task", task_id=task_id)
        failed_deps = [d for d in item["depends_on"] if tasks[d]["status"] == "failed"]
        if failed_deps:
            skipped = {"status": "failed", "error": f"skipped: task {failed_deps[0]} failed"}
            emit("node_finished", node="task", task_id=task_id, ok=False)
            return {"workspace": {"plan_id": _plan_id(payload), "tasks": {task_id: skipped}}}
        inputs = {d: tasks[d]["result"] for d in item["depends_on"]}
        ctx = context()
        try:
            result = await run_tool_loop(
                gateway=brain.gateway,
                skills=brain.skills,
                system=expert_prompt(brain, item["skill"], task=item["instruction"], inputs=inputs),
                history=[HumanMessage(content=item["instruction"])],
                scope=Scope(loaded=[item["skill"]], loadable={item["skill"]}),
                ctx=ctx,
                config=config,
                max_rounds=brain.options.max_rounds,
                task_id=task_id,
            )
            text = str(result.answer.text)
            update: dict[str, Any] = {
                "status": "done" if result.stopped is None else "failed",
                "result": text,
                "error": None if result.stopped is None else text,
            }
            usage = result.usage
        except ModelError as exc:
            emit("error", code=exc.code, message=exc.message, task_id=task_id)
            update = {"status": "failed", "error": exc.message}
            usage = {}
        except Exception as exc:  # one task's bug (a skill removed mid-run...) fails that task
            log.exception("task.crashed", task_id=task_id)
            update = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
            usage = {}
        emit("node_finished", node="task", task_id=task_id, ok=update["status"] == "done")
        return {
            "workspace": {"plan_id": _plan_id(payload), "tasks": {task_id: update}},
            "usage": usage,
        }

    return task


def _plan_id(payload: dict[str, Any]) -> str | None:
    # Every task of a plan carries the plan's id so the reducer merges rather than replaces.
    plan_id = payload.get("plan_id")
    return str(plan_id) if plan_id else None


def _line(task: dict[str, Any]) -> str:
    if task["status"] == "done":
        return f"- {task['skill']}: {task['result']}"
    return f"- {task['skill']}: failed ({task['error']})"


def join(state: ThreadState) -> dict[str, Any]:
    """Where the experts of one step meet before the next dispatch."""
    return {}


def make_aggregate(brain: Brain) -> Node:
    """Compose one answer that keeps each expert's facts and reports failed tasks."""

    async def aggregate(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        tasks = list((state.get("workspace") or {}).get("tasks", {}).values())
        ctx = context()
        usage: dict[str, int] = {}
        try:
            ctx.budget.spend_model_call()
            system = brain.prompts.render("aggregator", question=last_user_text(state), tasks=tasks)
            model = brain.gateway.chat_model(ctx.profile)
            answer = await complete(
                model, [SystemMessage(content=system), HumanMessage(last_user_text(state))], config
            )
            usage = call_usage(answer)
        except (ModelError, BudgetExceeded) as exc:
            emit("error", code="aggregator_failed", message=str(exc))
            answer = AIMessage(content="\n".join(_line(t) for t in tasks))
        return {"messages": [answer], "usage": usage, "schema_version": SCHEMA_VERSION}

    return aggregate


def make_joint(brain: Brain) -> Node:
    """One expert with the skills of every task answers the whole message.

    For independent requests whose skills are small, this is the cheapest plan: the model
    calls every request's tools in one turn (they run concurrently) and answers from their
    results in the next, two model calls in all against an expert per task plus an
    aggregator. Its answer reaches the user as written; each task's status is read from the
    results of its skill's tools.
    """

    async def joint_expert(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        assert brain.skills is not None
        workspace = state.get("workspace") or {}
        tasks = list(workspace.get("tasks", {}).values())
        names = [n for n in dict.fromkeys(t["skill"] for t in tasks) if n in brain.skills.registry]
        try:
            result = await run_tool_loop(
                gateway=brain.gateway,
                skills=brain.skills,
                system=expert_prompt(brain, names, requests=tasks),
                history=list(state.get("messages", [])),
                scope=Scope(loaded=list(names), loadable=set(names)),
                ctx=context(),
                config=config,
                max_rounds=brain.options.max_rounds,
            )
        except ModelError as exc:
            # As in the parallel plan: the turn ends with an answer that says what failed,
            # and every task records why.
            emit("error", code=exc.code, message=exc.message)
            failed = {"status": "failed", "error": exc.message}
            return {
                "messages": [AIMessage(content=f"I could not answer this request: {exc.message}")],
                "workspace": {
                    "plan_id": workspace.get("plan_id"),
                    "tasks": {t["id"]: dict(failed) for t in tasks},
                },
                "schema_version": SCHEMA_VERSION,
            }
        outcomes = _outcomes(brain, tasks, result)
        return {
            "messages": result.messages,
            "usage": result.usage,
            "workspace": {"plan_id": workspace.get("plan_id"), "tasks": outcomes},
            "schema_version": SCHEMA_VERSION,
        }

    return joint_expert


def _outcomes(
    brain: Brain, tasks: list[dict[str, Any]], result: LoopResult
) -> dict[str, dict[str, Any]]:
    """Each task's status from its skill's tool results in the joint expert's run."""
    assert brain.skills is not None
    by_skill: dict[str, list[ToolMessage]] = {}
    for message in result.messages:
        if isinstance(message, ToolMessage) and message.name not in META_TOOLS:
            try:
                owner, _ = brain.skills.registry.tool(str(message.name))
            except SkillNotFound:
                continue
            by_skill.setdefault(owner.name, []).append(message)
    answer = str(result.answer.text)
    outcomes: dict[str, dict[str, Any]] = {}
    for task in tasks:
        messages = by_skill.get(task["skill"], [])
        good = [str(m.content) for m in messages if m.status != "error"]
        bad = [str(m.content) for m in messages if m.status == "error"]
        if good:
            outcomes[task["id"]] = {"status": "done", "result": "\n".join(good), "error": None}
        elif bad or result.stopped:
            outcomes[task["id"]] = {"status": "failed", "error": bad[-1] if bad else answer}
        else:  # answered from the skill's instructions alone
            outcomes[task["id"]] = {"status": "done", "result": answer, "error": None}
    return outcomes
