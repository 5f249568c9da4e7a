"""A workflow's tool node that failed because its handler raised: the class named from what
the runner gives (``ToolResult.raised``), never read back out of the error's words, so a
message that starts with a capitalised word and a colon is not taken for a class."""

from __future__ import annotations

from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.skills.service import SkillService, SkillsOptions
from agents.workflows.engine import WorkflowEngine
from tests.skillkit import tool, write_skill
from tests.workflowkit import Workflows

HANDLER = """
from agents.errors import HandlerFailed


def get_stock(how):
    if how == "refused":  # the service's own error, raised by the handler: no class named
        raise HandlerFailed("Warehouse: closed")
    if how == "lookup":
        raise LookupError("Warehouse: closed")
    raise SystemExit(3)
"""
STOCK = """
name: stock
description: Check the stock.
inputs: {how: {type: string}}
nodes:
  - {id: stock, kind: tool, tool: get_stock, arguments: {how: "{{ inputs.how }}"}}
"""


@pytest.mark.parametrize(
    ("isolation", "how", "told"),
    [
        ("thread", "refused", "get_stock: Warehouse: closed"),
        ("thread", "lookup", "get_stock raised LookupError: Warehouse: closed"),
        ("process", "lookup", "get_stock raised LookupError: Warehouse: closed"),
        ("process", "exit", "get_stock raised SystemExit(3)"),
    ],
)
async def test_a_failed_tool_node_names_the_class_its_handler_raised_and_no_other(
    tmp_path: Path, isolation: str, how: str, told: str
) -> None:
    entry = tool("get_stock", "handler:get_stock", {"how": {"type": "string"}}, ["how"])
    config = {"isolation": isolation, "tools": [entry]}
    write_skill(tmp_path / "skills", "stock", config=config, handler=HANDLER)
    skills = SkillService(SkillsOptions(tmp_path / "skills", tmp_path / "data", embeddings=False))
    skills.reload()
    engine = WorkflowEngine(
        Workflows(STOCK),
        InMemorySaver(),
        skills=skills,
        gateway=ModelGateway(None),
        prompts=Prompts(),
    )
    try:
        record = await engine.run("stock", {"how": how})
    finally:
        await skills.aclose()
    assert record["status"] == "FAILED"
    assert record["nodes"]["stock"]["error"] == f"{told} (tool_failed)"
