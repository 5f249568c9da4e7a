"""Thread state: what a checkpoint holds for one conversation (DESIGN.md §5)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypedDict

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages

from agents.memory.summaries import Summary

# The shape of state a run writes. Set in one place: the input of every run
# (``Conversations``), so each checkpoint written after it carries the version; an older
# checkpoint is brought up to it on read (``agents/state/migrations.py``).
# 1: messages, usage, loaded_skills, route, workspace, pending_workflow, summary.
# 2: attachments.
# 3: summary.folded (the entries past SummaryOptions.entries, counted by speaker).
SCHEMA_VERSION = 3

TaskStatus = Literal["pending", "done", "failed"]


class PlannedTask(TypedDict):
    """One request of a multi-intent message, as a plan names it."""

    id: str
    skill: str
    instruction: str
    depends_on: list[str]


class Task(PlannedTask):
    """A planned task in the workspace, with how it went."""

    status: TaskStatus
    result: str | None
    error: str | None


class TaskUpdate(TypedDict, total=False):
    """What a node reports of one task (merged into the workspace by ``merge_workspace``)."""

    status: TaskStatus
    result: str | None
    error: str | None


class Workspace(TypedDict, total=False):
    """The supervisor's plan for the current message.

    ``mode``: ``joint`` (one expert holds every task's skill) or ``parallel`` (an expert per
    task, then the aggregator). Updates of one plan carry its ``plan_id`` and only the tasks
    they change.
    """

    plan_id: str | None
    mode: Literal["joint", "parallel"]
    tasks: dict[str, Any]  # Task when written by the planner, TaskUpdate in node updates


_PRICED = ("reasoning_tokens", "cost_micro_usd")  # cost in millionths of a US dollar


def add_usage(left: dict[str, int] | None, right: dict[str, Any] | None) -> dict[str, int]:
    """Reducer: token counts add up over the thread's model calls."""
    total = dict(left or {})
    for key in ("input_tokens", "output_tokens", "total_tokens", "model_calls", *_PRICED):
        if right and key in right:
            total[key] = total.get(key, 0) + int(right[key])
    return total


def usage_since(now: dict[str, int] | None, before: dict[str, int] | None) -> dict[str, int]:
    """What was used between two totals of ``add_usage`` (``before`` the earlier)."""
    before = before or {}
    return {k: v - before.get(k, 0) for k, v in (now or {}).items() if v != before.get(k, 0)}


def add_names(left: list[str] | None, right: list[str] | None) -> list[str]:
    """Reducer: an ordered set of names (a skill is recorded as loaded once)."""
    out = list(left or [])
    out.extend(n for n in (right or []) if n not in out)
    return out


def merge_workspace(left: Workspace | None, right: Workspace | None) -> Workspace:
    """Reducer: a new plan replaces the old one; updates of one plan merge task by task."""
    if not right:
        return Workspace(**(left or {}))
    if not left or right.get("plan_id") != left.get("plan_id"):
        return Workspace(**{**right, "tasks": dict(right.get("tasks", {}))})
    tasks = {k: dict(v) for k, v in left.get("tasks", {}).items()}
    for task_id, update in right.get("tasks", {}).items():
        tasks[task_id] = {**tasks.get(task_id, {}), **update}
    return Workspace(**{**left, "tasks": tasks})


class Attachment(TypedDict, total=False):
    """A file of the thread, by reference: the bytes live in the attachment store, never in
    state or in a prompt (the model reads the name and the caption)."""

    id: str
    kind: Literal["upload", "generated"]
    ref: str  # where the store keeps it (a path under the data directory)
    name: str
    media_type: str
    size: int
    caption: str
    created: float


def add_attachments(
    left: list[Attachment] | None, right: list[Attachment] | None
) -> list[Attachment]:
    """Reducer: attachments are added once each (by id), in order; an entry with
    ``removed`` true takes its id out."""
    out = {a["id"]: a for a in left or []}
    for item in right or []:
        if item.get("removed"):
            out.pop(item["id"], None)
        else:
            out[item["id"]] = item
    return list(out.values())


class ThreadState(TypedDict, total=False):
    """State of one conversation thread."""

    messages: Annotated[list[AnyMessage], add_messages]
    usage: Annotated[dict[str, int], add_usage]
    loaded_skills: Annotated[list[str], add_names]
    route: dict[str, Any]
    workspace: Annotated[Workspace, merge_workspace]
    # A workflow the user asked for that waits for an input: {workflow, inputs, missing}.
    pending_workflow: dict[str, Any] | None
    # The earlier messages removed from `messages`, summarised (agents/memory/summaries.py).
    summary: Summary | None
    # Files uploaded to the thread or made by its skills (references only).
    attachments: Annotated[list[Attachment], add_attachments]
    schema_version: int
