"""Scripted model replies of the conversation benchmark, as module-level functions so that
they can be sent to the scripted server's own process (light imports: the server process
loads this module to run them)."""

from __future__ import annotations

from typing import Any

from tests.fakellm import Reply, ToolCall


def route_reply(skill: str, body: dict[str, Any]) -> Reply:
    """The router's tie-break picks ``skill``."""
    return Reply(tool_calls=[ToolCall("choose_route", {"skill": skill})])


def plan_reply(plan: list[dict[str, str]], body: dict[str, Any]) -> Reply:
    """The planner answers with ``plan``."""
    return Reply(tool_calls=[ToolCall("plan_tasks", {"tasks": plan})])


def expert_reply(tools: list[str], body: dict[str, Any]) -> Reply:
    """An expert: first call the task's tools it holds (in one turn), then answer."""
    roles = [m["role"] for m in body["messages"]]
    this_turn = roles[len(roles) - roles[::-1].index("user") :]
    if "tool" in this_turn:
        return Reply(content="Record 7 is fine.")
    names = [t["function"]["name"] for t in body.get("tools", [])]
    return Reply(tool_calls=[ToolCall(n, {"record_id": "7"}) for n in names if n in tools])
