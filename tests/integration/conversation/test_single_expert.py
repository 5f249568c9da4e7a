"""One expert for one skill, and the general assistant with the compact skill index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents.events import NodeStarted, Token, ToolReturned
from app.services import Services, open_services
from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.integration.conversation.kit import ORDERS, final, make_skills, route_of, turn


async def test_one_clear_skill_takes_two_model_calls_and_no_routing_call(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})]),
        Reply(content="ORD1001 has shipped."),
    )
    events = await turn(services, "where is my order ORD1001?")
    route = route_of(events)
    assert (route.kind, route.target, route.by) == ("skill", "order-lookup", "retrieval")
    assert route.candidates[0]["name"] == "order-lookup"
    assert route.candidates[0]["score"] > route.candidates[1]["score"]
    assert final(events).message.content == "ORD1001 has shipped."
    assert len(fake_llm.requests) == 2
    first = fake_llm.views[0]
    assert first.system_contains(ORDERS.instructions)  # definition compiled in
    assert first.tool_names == {"get_order", "load_skill", "read_skill_reference"}
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("RouteDecided") < kinds.index("ToolCalled") < kinds.index("Token")
    assert any(isinstance(e, ToolReturned) and e.ok for e in events)
    assert {e.node for e in events if isinstance(e, NodeStarted)} >= {"route", "expert"}


async def test_the_expert_answer_reaches_the_user_unchanged(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Exactly these words, from the expert."))
    events = await turn(services, "where is my order ORD1001?")
    tokens = "".join(e.text for e in events if isinstance(e, Token))
    assert tokens == final(events).message.content == "Exactly these words, from the expert."
    history = await services.conversations.history(final(events).thread_id)
    assert [type(m).__name__ for m in history] == ["HumanMessage", "AIMessage"]


async def test_general_chat_goes_to_the_assistant_with_the_compact_index(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hello! How can I help?"))
    events = await turn(services, "hi there, good morning")
    assert route_of(events).kind == "general"
    assert final(events).message.content == "Hello! How can I help?"
    assert "load_skill" in fake_llm.scripted_views[0].system


async def test_the_general_assistant_can_load_only_what_its_index_listed(
    model_settings: Any, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    settings = model_settings.model_copy(
        update={
            "skills_dir": make_skills(tmp_path / "skills"),
            "skills_embeddings": True,
            "skills_prompt_budget": 50,
        }
    )
    fake_llm.script(
        Reply(tool_calls=[ToolCall("load_skill", {"name": "ticket-desk"})]),
        Reply(content="I can't do that."),
    )
    async with open_services(settings) as services:
        events = await turn(services, "hi there, good morning")
    assert route_of(events).kind == "general"
    assert not fake_llm.scripted_views[0].system_contains("ticket-desk")
    returned = next(e for e in events if isinstance(e, ToolReturned))
    assert "out_of_scope" in returned.content
