"""The ``llm`` node with a ``schema``: the model's answer is checked against it, sent back
once with what is wrong, and a second wrong answer fails the node by its ``on_error``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.workflows.engine import WorkflowEngine
from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.workflowkit import Workflows

CLASSIFY = """
name: classify
description: Labels a text, then says what it found.
inputs: {text: {type: string}}
nodes:
  - id: label
    kind: llm
    prompt: "Label this: {{ inputs.text }}"
    schema:
      type: object
      properties:
        label: {type: string, enum: [good, bad]}
        score: {type: number}
      required: [label, score]
    on_error: {goto: unsure}
    next: decide
  - {id: decide, kind: switch, cases: [{when: "nodes.label.output.label == 'good'", goto: ok}],
     otherwise: bad}
  - {id: ok, kind: set, values: {said: good}}
  - {id: bad, kind: set, values: {said: bad}}
  - {id: unsure, kind: set, values: {said: "unsure: {{ nodes.label.output.error }}"}}
outputs: {message: "{{ (nodes.ok or nodes.bad or nodes.unsure).output.said }}"}
"""


def answer(**args: Any) -> Reply:
    return Reply(tool_calls=[ToolCall("answer", args)])


@pytest.fixture
async def engine(model_settings: Any) -> AsyncIterator[WorkflowEngine]:
    gateway = ModelGateway(model_settings.models())
    yield WorkflowEngine(
        Workflows(CLASSIFY), InMemorySaver(), skills=None, gateway=gateway, prompts=Prompts()
    )
    await gateway.aclose()


async def test_an_answer_against_the_schema_is_sent_back_once_with_what_is_wrong(
    engine: WorkflowEngine, fake_llm: FakeLLM
) -> None:
    fake_llm.script(answer(label="ugly", score="high"), answer(label="good", score=0.9))
    record = await engine.run("classify", {"text": "nice"})
    assert (record["status"], record["outputs"]) == ("SUCCEEDED", {"message": "good"})
    assert record["nodes"]["label"]["output"] == {"label": "good", "score": 0.9}
    retry = fake_llm.scripted_views[1]
    assert retry.forced_tool == "answer"
    [result] = retry.results_of("answer")
    assert "label: 'ugly' is not one of ['good', 'bad']" in result.text
    assert "score: 'high' is not of type 'number'" in result.text
    assert record["usage"]["model_calls"] == 2


async def test_a_second_wrong_answer_fails_the_node_naming_it_and_the_field(
    engine: WorkflowEngine, fake_llm: FakeLLM
) -> None:
    fake_llm.script(answer(label="ugly", score=1), answer(label="ugly", score=1))
    record = await engine.run("classify", {"text": "nice"})
    node = record["nodes"]["label"]
    assert node["status"] == "failed"
    assert "node 'label'" in node["error"]
    assert "label: 'ugly' is not one of ['good', 'bad']" in node["error"]
    assert record["outputs"]["message"].startswith("unsure: the model's answer for node 'label'")
    assert "decide" not in record["nodes"]  # not a silent `otherwise`
