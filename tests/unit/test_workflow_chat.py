"""A workflow from chat: inputs from the message, the missing ones asked for and filled by
the next message, "cancel", and the run's end as the answer."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.run import RunContext
from agents.workflows.conversation import WorkflowTurns
from agents.workflows.engine import WorkflowEngine
from tests.workflowkit import Workflows

TICKET = """
name: ticket
description: Opens a ticket for a device.
inputs:
  device: {type: string, pattern: "\\\\b([A-Z]{2,5}-\\\\d{2,4})\\\\b", description: The machine.}
  note: {type: string, extract: none, description: What is wrong.}
  urgent: {type: boolean, default: false}
nodes:
  - {id: open, kind: set, values: {ticket: "T-{{ inputs.device }}", note: "{{ inputs.note }}"}}
  - {id: ok, kind: approval, summary: "Open {{ nodes.open.output.ticket }}?"}
outputs: {message: "Opened {{ nodes.open.output.ticket }}: {{ inputs.note }}"}
"""


@pytest.fixture
def turns() -> WorkflowTurns:
    engine = WorkflowEngine(
        Workflows(TICKET),
        InMemorySaver(),
        skills=None,
        gateway=ModelGateway(None),
        prompts=Prompts(),
    )
    return WorkflowTurns(engine, ModelGateway(None), Prompts())


async def ask(turns: WorkflowTurns, text: str, pending: Any = None) -> tuple[str, Any]:
    answer = await turns.answer("ticket", text, pending, RunContext(thread_id="t"), {})
    return answer.reply, answer.pending


async def test_a_missing_input_is_asked_for_and_the_next_message_fills_it(
    turns: WorkflowTurns,
) -> None:
    reply, pending = await ask(turns, "open a ticket for CNC-001 please")
    assert pending == {"workflow": "ticket", "inputs": {"device": "CNC-001"}, "missing": ["note"]}
    assert "note: What is wrong." in reply
    reply, pending = await ask(turns, "the spindle is hot", pending)
    assert pending is None
    assert "waiting for approval: Open T-CNC-001?" in reply
    [waiting] = await turns.engine.approvals()
    assert waiting["thread_id"] == "t"


async def test_cancel_ends_what_was_pending(turns: WorkflowTurns) -> None:
    _, pending = await ask(turns, "open a ticket for CNC-001")
    reply, pending = await ask(turns, "cancel", pending)
    assert pending is None
    assert "won't start the ticket procedure" in reply
    assert await turns.engine.list_runs() == []


async def test_nothing_the_message_gives_means_every_input_is_asked_for(
    turns: WorkflowTurns,
) -> None:
    reply, pending = await ask(turns, "I need a ticket")
    assert pending["missing"] == ["device", "note"]
    assert "device: The machine." in reply


ORDER = """
name: order
description: Orders parts.
inputs:
  count: {type: integer, pattern: "(\\\\d+) parts"}
  price: {type: number, pattern: "at ([0-9.,]+)"}
  rush: {type: boolean, extract: none}
nodes:
  - {id: total, kind: set, values: {total: "{{ inputs.count * inputs.price }}"}}
outputs: {message: "Total {{ nodes.total.output.total }}, rush: {{ inputs.rush }}"}
"""


async def test_inputs_a_message_gives_as_text_are_read_as_their_types() -> None:
    gateway = ModelGateway(None)
    engine = WorkflowEngine(
        Workflows(ORDER), InMemorySaver(), skills=None, gateway=gateway, prompts=Prompts()
    )
    turns = WorkflowTurns(engine, gateway, Prompts())
    context = RunContext(thread_id="t")
    first = await turns.answer("order", "3 parts at 1,000.50", None, context, {})
    assert first.pending == {
        "workflow": "order",
        "inputs": {"count": "3", "price": "1,000.50"},
        "missing": ["rush"],
    }
    answer = await turns.answer("order", "yes", first.pending, context, {})
    assert "Total 3001.5, rush: True" in answer.reply
    [run] = await engine.list_runs()
    assert run["inputs"] == {"count": 3, "price": 1000.5, "rush": True}


async def test_a_turn_answered_again_finds_the_run_it_started_instead_of_a_second(
    turns: WorkflowTurns,
) -> None:
    # Found by the review: a chat turn cut off mid-run (a crash) and answered again (the
    # thread resumed, the message resent) started a second run beside the first, which its
    # own resumption finished: the workflow's side effects twice.
    text = "open a ticket for CNC-001: the spindle is hot"
    pending = {"workflow": "ticket", "inputs": {"device": "CNC-001"}, "missing": ["note"]}
    first = await turns.answer("ticket", text, pending, RunContext(thread_id="t", turn_id="m1"), {})
    again = await turns.answer("ticket", text, pending, RunContext(thread_id="t", turn_id="m1"), {})
    assert "waiting for approval" in first.reply
    assert again.reply == first.reply
    assert len(await turns.engine.list_runs()) == 1
    other = await turns.answer("ticket", text, pending, RunContext(thread_id="t", turn_id="m2"), {})
    assert "waiting for approval" in other.reply
    assert len(await turns.engine.list_runs()) == 2  # another message, another run


async def test_a_value_that_is_not_its_inputs_type_is_asked_for_again_keeping_the_rest(
    turns: WorkflowTurns,
) -> None:
    # Found by the review: the turn failed ("cannot start") and the inputs given so far
    # were dropped, so the user began again from nothing.
    pending = {
        "workflow": "ticket",
        "inputs": {"device": "CNC-001", "urgent": "sure"},
        "missing": ["note"],
    }
    reply, pending = await ask(turns, "the spindle is hot", pending)
    assert pending == {
        "workflow": "ticket",
        "inputs": {"device": "CNC-001", "note": "the spindle is hot"},
        "missing": ["urgent"],
    }
    assert "must be a boolean" in reply
    reply, pending = await ask(turns, "yes", pending)
    assert pending is None
    assert "waiting for approval: Open T-CNC-001?" in reply


async def test_a_turn_answered_again_after_its_decided_run_was_cut_off_tells_its_thread_once(
    turns: WorkflowTurns,
) -> None:
    # Found by the review: the run went on from the turn answered again (the message resent
    # with its key), and its end was posted to the thread beside the turn's answer.
    posted: list[str] = []

    async def post(thread_id: str, message: Any, *_: Any) -> None:
        posted.append(str(message.content))

    turns.engine.after_decision = functools.partial(turns.resumed, post=post)
    text = "open a ticket for CNC-001: the spindle is hot"
    pending = {"workflow": "ticket", "inputs": {"device": "CNC-001"}, "missing": ["note"]}
    first = await turns.answer("ticket", text, pending, RunContext(thread_id="t", turn_id="m1"), {})
    assert "waiting for approval" in first.reply
    [waiting] = await turns.engine.approvals()
    going = turns.engine.decide(waiting["approval_id"], approved=True, by="sam")
    await anext(going)  # the run goes on from the decision ...
    await going.aclose()  # ... and the deciding request is cut off
    assert (await turns.engine.get_run(waiting["run_id"]))["status"] == "RUNNING"

    again = await turns.answer("ticket", text, pending, RunContext(thread_id="t", turn_id="m1"), {})

    assert "Opened T-CNC-001" in again.reply
    assert posted == []  # the turn's answer is the one word of it
