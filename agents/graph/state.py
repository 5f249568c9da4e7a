"""Thread state: what a checkpoint holds for one conversation."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages

SCHEMA_VERSION = 1


def add_usage(left: dict[str, int] | None, right: dict[str, Any] | None) -> dict[str, int]:
    """Reducer: token counts add up over the thread's model calls."""
    total = dict(left or {})
    for key in ("input_tokens", "output_tokens", "total_tokens", "model_calls"):
        if right and key in right:
            total[key] = total.get(key, 0) + int(right[key])
    return total


def add_names(left: list[str] | None, right: list[str] | None) -> list[str]:
    """Reducer: an ordered set of names (a skill is recorded as loaded once)."""
    out = list(left or [])
    out.extend(n for n in (right or []) if n not in out)
    return out


def merge_workspace(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    """Reducer: a new plan replaces the old one; updates of one plan merge task by task."""
    if not right:
        return dict(left or {})
    if not left or right.get("plan_id") != left.get("plan_id"):
        return {**right, "tasks": dict(right.get("tasks", {}))}
    tasks = {k: dict(v) for k, v in left.get("tasks", {}).items()}
    for task_id, update in right.get("tasks", {}).items():
        tasks[task_id] = {**tasks.get(task_id, {}), **update}
    return {**left, "tasks": tasks}


class ThreadState(TypedDict, total=False):
    """State of one conversation thread (see DESIGN.md §5)."""

    messages: Annotated[list[AnyMessage], add_messages]
    usage: Annotated[dict[str, int], add_usage]
    loaded_skills: Annotated[list[str], add_names]
    route: dict[str, Any]
    workspace: Annotated[dict[str, Any], merge_workspace]
    schema_version: int
