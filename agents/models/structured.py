"""Small structured outputs through a forced function call (router tie-break, planner)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig

from agents.models.usage import call_usage

if TYPE_CHECKING:
    from agents.models.gateway import ModelGateway


def function_tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function-calling tool definition."""
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


async def forced_call(
    gateway: ModelGateway,
    profile: str | None,
    tool: dict[str, Any],
    system: str,
    text: str,
    config: RunnableConfig,
) -> tuple[dict[str, Any], dict[str, int]]:
    """Make the model call ``tool`` once; returns its arguments ({} if it did not) and the
    call's usage. Model failures raise ModelError."""
    name = tool["function"]["name"]
    model: Any = gateway.chat_model(profile).bind_tools([tool], tool_choice=name)
    reply = await model.ainvoke([SystemMessage(content=system), HumanMessage(text)], config)
    calls = [c for c in reply.tool_calls if c["name"] == name]
    return (dict(calls[0]["args"]) if calls else {}), call_usage(reply)
