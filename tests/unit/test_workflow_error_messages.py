"""What a workflow's errors say (QA): a missing input in words with the field it is, a failed
tool node naming its tool once, a withdrawn workflow naming its file and node, and a workflow
that does not serve told with the code every surface uses."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agents.errors import BadInputs, WorkflowNotFound
from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.skills.results import ToolResult, tool_error
from agents.workflows.engine import WorkflowEngine
from agents.workflows.executors.tool import failure
from agents.workflows.inputs import check_inputs
from agents.workflows.registry import WorkflowRegistry
from agents.workflows.spec import WorkflowSpec
from app.api.errors import api_error
from tests.workflowkit import Workflows

REFUND = WorkflowSpec.model_validate(
    {
        "name": "refund-request",
        "description": "Refund an order.",
        "inputs": {
            "order_id": {"type": "string"},
            "amount": {"type": "number", "description": "How much to refund"},
            "note": {"type": "string", "required": False},
        },
        "nodes": [{"id": "one", "kind": "set", "values": {"o": "{{ inputs.order_id }}"}}],
    }
)
LOOKUP = """
name: lookup
description: Look an order up.
inputs: {order_id: {type: string}}
nodes:
  - {id: order, kind: tool, tool: get_order, arguments: {order_id: "{{ inputs.order_id }}"}}
"""


def test_a_missing_input_is_said_in_words_and_named_as_the_request_s_field() -> None:
    # QA: "'order_id' is required: string", param null.
    with pytest.raises(BadInputs) as refused:
        check_inputs(REFUND, {"amount": 5})
    assert refused.value.message == (
        "workflow 'refund-request' cannot start: input 'order_id' is required (a string)"
    )
    assert refused.value.param == "inputs.order_id"
    error = api_error(refused.value)
    assert (error.status, error.code, error.param) == (400, "invalid_inputs", "inputs.order_id")


def test_each_missing_input_says_its_type_and_description_the_first_is_the_param() -> None:
    with pytest.raises(BadInputs) as refused:
        check_inputs(REFUND, {})
    assert refused.value.message == (
        "workflow 'refund-request' cannot start: input 'order_id' is required (a string); "
        "input 'amount' is required (a number: How much to refund)"
    )
    assert refused.value.param == "inputs.order_id"


def test_an_unknown_or_refused_input_is_the_param_too() -> None:
    with pytest.raises(BadInputs) as unknown:
        check_inputs(REFUND, {"order_id": "ORD1", "amount": 1, "colour": "red"})
    assert unknown.value.param == "inputs.colour"
    with pytest.raises(BadInputs) as refused:
        check_inputs(REFUND, {"order_id": "ORD1", "amount": "lots"})
    assert refused.value.param == "inputs.amount"


class FailingSkills:
    """A skill service whose every call fails as the runner words ``said`` (the handler
    raised ``raised``)."""

    def __init__(self, said: str, raised: str | None = None) -> None:
        self.said, self.raised = said, raised

    async def call(self, tool: str, arguments: dict[str, Any], **_: Any) -> ToolResult:
        return tool_error(tool, "tool_failed", self.said, time.perf_counter(), raised=self.raised)


async def test_a_failed_tool_node_names_its_node_and_its_tool_once() -> None:
    # QA: "get_order: get_order failed: ValueError: no order ORD9".
    skills = FailingSkills("get_order failed: ValueError: no order ORD9", "ValueError")
    engine = WorkflowEngine(
        Workflows(LOOKUP),
        InMemorySaver(),
        skills=cast(Any, skills),
        gateway=ModelGateway(None),
        prompts=Prompts(),
    )
    record = await engine.run("lookup", {"order_id": "ORD9"})
    assert record["status"] == "FAILED"
    said = "get_order raised ValueError: no order ORD9 (tool_failed)"
    assert record["error"] == f"node 'order' failed: {said}"
    assert record["nodes"]["order"]["error"] == said


@pytest.mark.parametrize(
    ("said", "raised", "told"),
    [
        (
            "get_order failed: ValueError: no order",
            "ValueError",
            "get_order raised ValueError: no order",
        ),
        (
            "get_order failed: the handler raised SystemExit(3)",
            "SystemExit",
            "get_order raised SystemExit(3)",
        ),
        (
            "get_order failed: returned data that is not JSON: x",
            None,
            "get_order: returned data that is not JSON: x",
        ),
        ("get_order did not finish within 5 s", None, "get_order did not finish within 5 s"),
        (
            "invalid arguments for get_order: order_id: is required",
            None,
            "invalid arguments for get_order: order_id: is required",
        ),
        ("every handler thread is taken", None, "get_order: every handler thread is taken"),
        ("get_orders is not get_order's", None, "get_orders is not get_order's"),
        ("see get_order_v2", None, "get_order: see get_order_v2"),
    ],
)
def test_a_tool_s_failure_is_told_with_the_tool_named_once(
    said: str, raised: str | None, told: str
) -> None:
    assert failure("get_order", said, raised) == told


def test_a_workflow_withdrawn_for_a_missing_tool_names_its_file_and_node(
    tmp_path: Path,
) -> None:
    # QA: "tool: 'qa_echo' is not installed..." named neither, though GET /v1/workflows did.
    path = tmp_path / "echo.yaml"
    path.write_text(
        "name: echo\ndescription: Echo.\nnodes:\n  - {id: say, kind: tool, tool: qa_echo}\n",
        encoding="utf-8",
    )
    registry = WorkflowRegistry(tmp_path, tools={"qa_echo"})
    registry.reload()
    registry.recheck(tools={"other"})
    [listed] = registry.errors
    with pytest.raises(WorkflowNotFound) as withdrawn:
        registry.get("echo")
    assert withdrawn.value.reason == str(listed).replace(str(path), path.name)  # its name only
    assert str(withdrawn.value) == (
        f"workflow 'echo' is not available: {path.name}:4: node 'say': tool: 'qa_echo' is not "
        f"installed: {listed.message.split('is not installed: ', 1)[1]}"
    )


def test_a_workflow_withdrawn_by_a_sub_workflow_names_its_file_and_node(tmp_path: Path) -> None:
    (tmp_path / "child.yaml").write_text(
        "name: child\ndescription: C.\nnodes:\n  - {id: say, kind: tool, tool: qa_echo}\n"
    )
    parent = tmp_path / "parent.yaml"
    parent.write_text(
        "name: parent\ndescription: P.\nnodes:\n  - {id: sub, kind: workflow, workflow: child}\n"
    )
    registry = WorkflowRegistry(tmp_path, tools={"qa_echo"})
    registry.reload()
    registry.recheck(tools=set())
    with pytest.raises(WorkflowNotFound) as withdrawn:
        registry.get("parent")
    assert withdrawn.value.reason.startswith(f"{parent.name}:4: node 'sub': workflow: ")


async def test_a_workflow_withdrawn_before_its_run_starts_is_workflow_unavailable() -> None:
    # QA: withdrawn between a route's look-up and engine.stream, the global handler said
    # 404 workflow_not_found, while the route says workflow_unavailable.
    workflows = Workflows(LOOKUP)
    engine = WorkflowEngine(
        workflows, InMemorySaver(), skills=None, gateway=ModelGateway(None), prompts=Prompts()
    )
    workflows.withdraw("lookup", "node 'order': tool: 'get_order' is not installed")
    with pytest.raises(WorkflowNotFound) as raced:
        await engine.run("lookup", {"order_id": "ORD1"})
    error = api_error(raced.value)
    assert (error.status, error.code) == (404, "workflow_unavailable")
    assert error.message.startswith("workflow 'lookup' is not available: node 'order': ")
    with pytest.raises(WorkflowNotFound) as unknown:
        await engine.run("nope", {})
    error = api_error(unknown.value)
    assert (error.status, error.code) == (404, "unknown_workflow")
    # As the workflow routes, chat and the tool server say it: the installed ones (none:
    # lookup is withdrawn) listed.
    assert error.message == "no workflow named 'nope' (no workflows are installed)"
