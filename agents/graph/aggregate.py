"""Experts in parallel: each ready task goes to its expert (``Send``), dependent ones after
the tasks they need; the aggregator composes one answer."""

from __future__ import annotations

from typing import Any

import structlog
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Send

from agents.errors import BudgetExceeded, ModelError, SkilldeskError
from agents.graph.experts import expert_prompt
from agents.graph.nodes import Brain, Node, last_user_text
from agents.loop import complete
from agents.memory.summaries import summary_text
from agents.models.usage import call_usage
from agents.run import current_context, emit
from agents.skills.meta import Scope
from agents.state.schema import Task, TaskUpdate, ThreadState

log = structlog.get_logger(__name__)


def dispatch(state: ThreadState) -> list[Send] | str:
    """Send every ready task to an expert; when nothing is left, aggregate.

    A plan in joint mode goes to the one expert that holds all its skills instead.
    """
    workspace = state.get("workspace") or {}
    tasks: dict[str, Task] = workspace.get("tasks", {})
    pending = {i: t for i, t in tasks.items() if t["status"] == "pending"}
    if not pending:
        return "aggregate"
    if workspace.get("mode") == "joint":
        return "joint_expert"
    finished = {i for i, t in tasks.items() if t["status"] in ("done", "failed")}
    ready = [t for t in pending.values() if set(t["depends_on"]) <= finished]
    if not ready:
        return "aggregate"  # unreachable for a checked plan; never loop
    plan_id = workspace.get("plan_id")
    summary = summary_text(state.get("summary"))
    return [
        Send("task", {"task": t, "tasks": tasks, "plan_id": plan_id, "summary": summary})
        for t in ready
    ]


def make_task(brain: Brain) -> Any:
    """Run one planned task with its expert; a failure is recorded, not raised."""

    async def task(payload: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        item: Task = payload["task"]
        tasks: dict[str, Task] = payload["tasks"]
        task_id = item["id"]
        emit("node_started", node="task", task_id=task_id)
        failed_deps = [d for d in item["depends_on"] if tasks[d]["status"] == "failed"]
        usage: dict[str, int] = {}
        if failed_deps:
            update = TaskUpdate(status="failed", error=f"skipped: task {failed_deps[0]} failed")
        else:
            update, usage = await _run_task(brain, item, tasks, config, payload.get("summary"))
        emit("node_finished", node="task", task_id=task_id, ok=update["status"] == "done")
        # Every task of a plan carries the plan's id so the reducer merges, not replaces.
        plan_id = payload.get("plan_id")
        workspace = {"plan_id": str(plan_id) if plan_id else None, "tasks": {task_id: update}}
        return {"workspace": workspace, "usage": usage}

    return task


async def _run_task(
    brain: Brain,
    item: Task,
    tasks: dict[str, Task],
    config: RunnableConfig,
    summary: str | None = None,
) -> tuple[TaskUpdate, dict[str, int]]:
    inputs = {d: tasks[d]["result"] for d in item["depends_on"]}
    system = expert_prompt(
        brain, item["skill"], task=item["instruction"], inputs=inputs, summary=summary
    )
    scope = Scope(loaded=[item["skill"]], loadable={item["skill"]})
    history = [HumanMessage(content=item["instruction"])]
    try:
        result = await brain.answer(system, history, scope, config, task_id=item["id"])
    except ModelError as exc:
        emit("error", code=exc.code, message=exc.message, task_id=item["id"])
        return TaskUpdate(status="failed", error=exc.message), {}
    except Exception as exc:  # one task's bug (a skill removed mid-run...) fails that task
        log.exception("task.crashed", task_id=item["id"])
        # Our own errors say what happened; another's text (a driver's, a library's) may
        # name hosts or paths: its kind only, the rest in the log.
        why = str(exc) if isinstance(exc, SkilldeskError) else f"{type(exc).__name__}"
        return TaskUpdate(status="failed", error=f"internal error: {why}; it has been logged"), {}
    text = str(result.answer.text)
    ok = result.stopped is None
    update = TaskUpdate(status="done" if ok else "failed", result=text, error=None if ok else text)
    return update, result.usage


def join(state: ThreadState) -> dict[str, Any]:
    """Where the experts of one step meet before the next dispatch."""
    return {}


def make_aggregate(brain: Brain) -> Node:
    """Compose one answer that keeps each expert's facts and reports failed tasks."""

    async def aggregate(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        tasks = list((state.get("workspace") or {}).get("tasks", {}).values())
        ctx = current_context()
        usage: dict[str, int] = {}
        question = last_user_text(state)
        try:
            ctx.budget.spend_model_call()
            summary = summary_text(state.get("summary"))
            system = brain.prompts.render(
                "aggregator", question=question, tasks=tasks, summary=summary
            )
            model = brain.gateway.chat_model(brain.gateway.node_profile("aggregator", ctx.profile))
            messages = [SystemMessage(content=system), HumanMessage(question)]
            answer = await complete(model, messages, config)
            usage = call_usage(answer)
        except (ModelError, BudgetExceeded) as exc:
            emit("error", code="aggregator_failed", message=str(exc))
            answer = AIMessage(content=brain.prompts.reply("tasks_summary", tasks=tasks))
        return {"messages": [answer], "usage": usage}

    return aggregate
