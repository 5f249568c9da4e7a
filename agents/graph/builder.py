"""Compile the conversation graph with the thread's checkpointer."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agents.graph.assistant import make_assistant_node
from agents.graph.state import ThreadState
from agents.models import ModelGateway
from agents.prompts import Prompts


def build_graph(
    gateway: ModelGateway,
    checkpointer: BaseCheckpointSaver[Any] | None,
    prompts: Prompts | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The conversation graph: for now one general assistant node."""
    graph = StateGraph(ThreadState)
    graph.add_node("assistant", make_assistant_node(gateway, prompts or Prompts()))
    graph.add_edge(START, "assistant")
    graph.add_edge("assistant", END)
    return graph.compile(checkpointer=checkpointer, name="skilldesk")
