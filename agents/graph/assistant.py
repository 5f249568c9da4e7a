"""The general assistant node: answers with the conversation so far."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, SystemMessage
from langchain_core.runnables import RunnableConfig

from agents.errors import NO_MODEL_HINT
from agents.graph.state import SCHEMA_VERSION, ThreadState
from agents.models import ModelGateway
from agents.prompts import Prompts


def make_assistant_node(gateway: ModelGateway, prompts: Prompts) -> Any:
    """Build the node; the run config's ``model_profile`` picks the profile for one run."""

    async def assistant(state: ThreadState, config: RunnableConfig) -> dict[str, Any]:
        if not gateway.configured:
            return {
                "messages": [AIMessage(content=NO_MODEL_HINT, name="skilldesk")],
                "schema_version": SCHEMA_VERSION,
            }
        profile = (config.get("configurable") or {}).get("model_profile")
        model = gateway.chat_model(profile)
        system = SystemMessage(content=prompts.render("assistant", summary=None))
        reply = await model.ainvoke([system, *state.get("messages", [])], config)
        usage: dict[str, int] = {"model_calls": 1}
        if isinstance(reply, AIMessage) and reply.usage_metadata:
            usage.update(
                input_tokens=reply.usage_metadata["input_tokens"],
                output_tokens=reply.usage_metadata["output_tokens"],
                total_tokens=reply.usage_metadata["total_tokens"],
            )
        return {"messages": [reply], "usage": usage, "schema_version": SCHEMA_VERSION}

    return assistant
