"""A thread's checkpoints as the steps of its history: what each step did, in one line."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langgraph.types import StateSnapshot

from agents.memory.summaries import summarised_count
from agents.state.migrations import migrate


def history_entry(snap: StateSnapshot, parent: StateSnapshot | None) -> dict[str, Any]:
    values = migrate(dict(snap.values))[0] if snap.values else {}
    earlier = migrate(dict(parent.values))[0] if parent is not None and parent.values else {}
    metadata = dict(snap.metadata or {})
    parent_id = (snap.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    wrote = list(parent.next) if parent is not None else []
    source = metadata.get("source")
    node = wrote[0] if len(wrote) == 1 else None
    if node == "__start__":
        node = "input"  # the step that takes a run's input into the state
    change = describe_change(earlier, values)
    if source == "input":
        change = "a run starts"
    elif node == "route" and "route " not in change:
        route = values.get("route") or {}
        change = f"route {route.get('kind')}" + (
            f" → {route['target']}" if route.get("target") else ""
        )
    return {
        "checkpoint_id": snap.config["configurable"]["checkpoint_id"],
        "parent_id": parent_id,
        "step": metadata.get("step"),
        "source": source,
        "node": node,
        "nodes": wrote,
        "created": snap.created_at,
        "next": list(snap.next),
        "messages": len(values.get("messages", [])) + summarised_count(values.get("summary")),
        "change": change,
    }


def describe_change(before: dict[str, Any], after: dict[str, Any]) -> str:
    """What a checkpoint changed, in one line (``"+1 user: where is my order…"``)."""
    parts: list[str] = []
    old_ids = {m.id for m in before.get("messages", [])}
    added = [m for m in after.get("messages", []) if m.id not in old_ids]
    if added:
        parts.append(f"+{len(added)} " + ", ".join(_said(m) for m in added[:3]))
        if len(added) > 3:
            parts[-1] += ", …"
    gone = summarised_count(after.get("summary")) - summarised_count(before.get("summary"))
    if gone > 0:
        parts.append(f"summarised {gone} earlier messages")
    route = after.get("route") or {}
    if route and route != (before.get("route") or {}):
        parts.append(
            f"route {route.get('kind')}" + (f" → {route['target']}" if route.get("target") else "")
        )
    files = len(after.get("attachments", [])) - len(before.get("attachments", []))
    if files > 0:
        parts.append(f"+{files} attachment{'s' if files > 1 else ''}")
    return "; ".join(parts) or "no change to messages"


def _said(message: BaseMessage) -> str:
    who = {"human": "user", "ai": "assistant"}.get(message.type, message.type)
    if isinstance(message, AIMessage) and message.tool_calls:
        return f"{who} calls " + ", ".join(c["name"] for c in message.tool_calls)
    text = " ".join(str(message.text).split())
    return f"{who}: {text[:40]}{'…' if len(text) > 40 else ''}" if text else who
