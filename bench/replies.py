"""Scripted model replies of the conversation benchmark, as module-level functions so that
they can be sent to the scripted server's own process (light imports: the server process
loads this module to run them)."""

from __future__ import annotations

from tests.fakellm import Reply, RequestView, ToolCall


def route_reply(skill: str, request: RequestView) -> Reply:
    """The router's tie-break picks ``skill``."""
    return Reply(tool_calls=[ToolCall("choose_route", {"skill": skill})])


def plan_reply(plan: list[dict[str, str]], request: RequestView) -> Reply:
    """The planner answers with ``plan``."""
    return Reply(tool_calls=[ToolCall("plan_tasks", {"tasks": plan})])


def expert_reply(tools: list[str], request: RequestView) -> Reply:
    """An expert: first call the task's tools it holds (in one turn), then answer."""
    if any(m.is_tool_result for m in request.turn):
        return Reply(content="Record 7 is fine.")
    offered = [t.name for t in request.tools]
    return Reply(tool_calls=[ToolCall(n, {"record_id": "7"}) for n in offered if n in tools])
