"""Compile the conversation graph with the thread's checkpointer."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agents.graph.assistant import AssistantOptions, make_assistant_node, needs_tools
from agents.graph.state import ThreadState
from agents.graph.tools import make_tools_node
from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.skills.service import SkillService


def build_graph(
    gateway: ModelGateway,
    checkpointer: BaseCheckpointSaver[Any] | None,
    prompts: Prompts | None = None,
    skills: SkillService | None = None,
    options: AssistantOptions | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The conversation graph: the general assistant, and a tools node when skills exist."""
    graph = StateGraph(ThreadState)
    graph.add_node("assistant", make_assistant_node(gateway, prompts or Prompts(), skills, options))
    graph.add_edge(START, "assistant")
    if skills is None:
        graph.add_edge("assistant", END)
    else:
        graph.add_node("tools", make_tools_node(skills))
        graph.add_conditional_edges(
            "assistant", lambda s: "tools" if needs_tools(s) else END, ["tools", END]
        )
        graph.add_edge("tools", "assistant")
    return graph.compile(checkpointer=checkpointer, name="skilldesk")
