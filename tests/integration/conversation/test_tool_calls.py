"""Tool-call hygiene and limits: scope, pairing of calls and results, history repair, the
run's budget and the expert's rounds."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from agents.events import ToolCalled, ToolReturned
from app.services import Services, open_services
from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.integration.conversation.kit import final, make_skills, turn

TICKET_MODULES = "_skilldesk_skill_ticket"  # the package the runner imports ticket-desk into


async def test_an_instruction_planted_in_a_tool_result_cannot_widen_the_expert(
    services: Services, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An earlier test in this process may have imported ticket-desk's handler: forget it.
    for name in [m for m in sys.modules if m.startswith(TICKET_MODULES)]:
        monkeypatch.delitem(sys.modules, name)
    fake_llm.script(
        Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})]),
        # The model "obeys" the planted text; the expert's scope refuses both routes to it.
        Reply(
            tool_calls=[
                ToolCall("create_ticket", {"title": "pwned"}),
                ToolCall("load_skill", {"name": "ticket-desk"}),
            ]
        ),
        Reply(content="Your order has shipped."),
    )
    events = await turn(services, "where is my order ORD1001?")
    returned = {e.tool: e for e in events if isinstance(e, ToolReturned)}
    assert "ignore all previous instructions" in returned["get_order"].content
    assert returned["create_ticket"].ok is False
    assert "out_of_scope" in returned["create_ticket"].content
    assert returned["load_skill"].ok is False
    tools_seen = set().union(*(v.tool_names for v in fake_llm.views))
    assert "create_ticket" not in tools_seen
    assert not any(m.startswith(TICKET_MODULES) for m in sys.modules)


async def test_every_tool_call_in_history_has_its_result(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(
            tool_calls=[
                ToolCall("get_order", {"order_id": "ORD1"}),
                ToolCall("no_such_tool", {}),
                ToolCall("get_order", '{"order_id": '),
            ]
        ),
        Reply(content="Done."),
    )
    events = await turn(services, "where is my order ORD1?")
    history = await services.conversations.history(final(events).thread_id)
    calls = [c["id"] for m in history if isinstance(m, AIMessage) for c in m.tool_calls]
    calls += [c["id"] for m in history if isinstance(m, AIMessage) for c in m.invalid_tool_calls]
    results = [m.tool_call_id for m in history if isinstance(m, ToolMessage)]
    assert sorted(calls) == sorted(results)
    assert len(results) == 3
    # Every tool_returned event pairs with a tool_called one, the unparsable call included.
    called = [e.call_id for e in events if isinstance(e, ToolCalled)]
    returned = [e.call_id for e in events if isinstance(e, ToolReturned)]
    assert sorted(called) == sorted(returned) == sorted(results)


async def test_a_dangling_tool_call_is_repaired_before_the_next_turn(
    services: Services, fake_llm: FakeLLM
) -> None:
    thread = "dangling"
    config = {"configurable": {"thread_id": thread}}
    await services.conversations.graph.aupdate_state(
        config,
        {
            "messages": [
                HumanMessage("hi"),
                AIMessage(
                    content="",
                    tool_calls=[
                        {"name": "get_order", "args": {"order_id": "ORD1"}, "id": "lost_1"}
                    ],
                ),
            ]
        },
    )
    fake_llm.script(Reply(content="Hello again."))
    await turn(services, "hello?", thread)
    sent = fake_llm.scripted_views[0]
    repaired = [m for m in sent.results if m.tool_call_id == "lost_1"]
    assert "cancelled" in repaired[0].text


async def test_stored_content_no_provider_can_read_is_replaced_before_the_next_turn(
    services: Services, fake_llm: FakeLLM
) -> None:
    thread = "unreadable"
    config = {"configurable": {"thread_id": thread}}
    stored = [
        HumanMessage(content=[{"type": "text", "text": "order ORD1"}, {"text": "no type"}]),
        HumanMessage(content=[{}]),
        AIMessage(content="Noted."),
    ]
    await services.conversations.graph.aupdate_state(config, {"messages": stored})
    fake_llm.script(Reply(content="Hello again."))
    assert final(await turn(services, "hello?", thread)).message.text == "Hello again."
    sent = [m["content"] for m in fake_llm.scripted_requests[0]["messages"] if m["role"] == "user"]
    assert sent[0] in ("order ORD1", [{"type": "text", "text": "order ORD1"}])
    assert "could not be read" in str(sent[1])
    assert sent[-1] == "hello?"
    # The repair is stored: both messages stay in place, now readable; nothing else is lost.
    history = await services.conversations.history(thread)
    assert [m.type for m in history] == ["human", "human", "ai", "human", "ai"]
    assert history[0].content == [{"type": "text", "text": "order ORD1"}]
    assert "could not be read" in history[1].text


async def test_the_run_budget_holds_across_the_whole_run(
    model_settings: Any, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    settings = model_settings.model_copy(
        update={"skills_dir": make_skills(tmp_path / "skills"), "max_model_calls": 2}
    )
    # A third call would find no reply (and fail the test): the budget must stop at two.
    fake_llm.script(*[Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1"})])] * 2)
    async with open_services(settings) as services:
        events = await turn(services, "where is my order ORD1001?", skill="order-lookup")
    assert len(fake_llm.requests) == 2
    assert "limit of 2 model calls" in str(final(events).message.content)


async def test_the_expert_stops_after_five_rounds(services: Services, fake_llm: FakeLLM) -> None:
    fake_llm.script(*[Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1"})])] * 5)
    events = await turn(services, "where is my order ORD1001?")
    assert "stopped after 5 rounds" in str(final(events).message.content)
    assert len(fake_llm.requests) == 5


async def test_a_bad_reference_path_is_a_tool_error_not_a_crash(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(
            tool_calls=[
                ToolCall(
                    "read_skill_reference",
                    {"name": "order-lookup", "path": "refer\u0000ences/x.md"},
                )
            ]
        ),
        Reply(content="Sorry, no such document."),
    )
    events = await turn(services, "where is my order ORD1001?")
    returned = next(e for e in events if isinstance(e, ToolReturned))
    assert returned.ok is False
    assert "bad_reference" in returned.content
    assert final(events).message.content == "Sorry, no such document."
