"""Small structured outputs through a forced function call (router tie-break, planner)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AnyMessage, HumanMessage, SystemMessage, ToolMessage
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
    args, usage, _ = await checked_call(
        gateway, profile, tool, system, text, config, check=lambda _: None
    )
    return args, usage


async def checked_call(
    gateway: ModelGateway,
    profile: str | None,
    tool: dict[str, Any],
    system: str,
    text: str,
    config: RunnableConfig,
    check: Callable[[dict[str, Any]], str | None],
) -> tuple[dict[str, Any], dict[str, int], str | None]:
    """``forced_call`` whose arguments ``check`` must accept (it returns what is wrong, or
    None). A rejected answer goes back to the model once, as a failed call of ``tool`` with
    ``check``'s words, and the model is asked again, as a function-calling loop does.

    Returns:
        The last arguments, the usage of every call, and what is wrong with the last
        arguments (None: accepted). Model failures raise ModelError.
    """
    name = tool["function"]["name"]
    model: Any = gateway.chat_model(profile).bind_tools([tool], tool_choice=name)
    messages: list[AnyMessage] = [SystemMessage(content=system), HumanMessage(text)]
    usage: dict[str, int] = {}
    for attempt in range(2):
        reply = await model.ainvoke(messages, config)
        for key, value in call_usage(reply).items():
            usage[key] = usage.get(key, 0) + value
        calls = [c for c in reply.tool_calls if c["name"] == name]
        args = dict(calls[0]["args"]) if calls else {}
        problem = check(args)
        if problem is None or attempt:
            return args, usage, problem
        error = f"error (invalid_arguments): invalid arguments for {name}: {problem}"
        if calls:
            messages += [reply, ToolMessage(error, tool_call_id=calls[0]["id"] or name)]
        else:
            messages += [reply, HumanMessage(f"{error}; call {name}")]
    raise AssertionError("unreachable")
