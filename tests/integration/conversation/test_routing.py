"""How a message is routed: retrieval, the tie-break call, clauses of a multi-intent
message, an explicit skill, the thread's context."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from app.services import Services
from tests.fakellm import FakeLLM, Reply
from tests.integration.conversation.kit import final, route_of, turn
from tests.skillkit import router_picks


async def test_an_ambiguous_message_is_settled_by_one_small_model_call(
    services: Services, fake_llm: FakeLLM
) -> None:
    router_picks(fake_llm, "leave-balance")
    fake_llm.script(Reply(content="You have 12 days left."))
    events = await turn(services, "how many days can I still take off before the holidays")
    route = route_of(events)
    assert (route.kind, route.target, route.by) == ("skill", "leave-balance", "model")
    [tie_break] = [v for v in fake_llm.views if v.forced_tool == "choose_route"]
    choices = tie_break.tool("choose_route").parameters["properties"]["skill"]["enum"]
    assert "leave-balance" in choices
    assert "none" in choices
    assert final(events).message.content == "You have 12 days left."
    state = await services.conversations.state(final(events).thread_id)
    assert state["route"]["by"] == "model"


async def test_a_multi_intent_message_is_routed_by_its_clauses_alone(
    services: Services, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = services.skills.index.cache
    assert cache is not None
    embedded: list[str] = []
    encode = cache.embedder.encode

    def recording(texts: Any) -> Any:
        embedded.extend(texts)
        return encode(texts)

    monkeypatch.setattr(cache.embedder, "encode", recording)
    text = "check order ORD1234 and tell me if CNC-001 has open alarms"
    fake_llm.script(Reply(content="Both checked."))
    route = route_of(await turn(services, text))
    assert route.kind == "multi"
    # The clauses decided it: the whole message was not embedded, and the candidates are
    # the clauses' hits, best first.
    assert text not in embedded
    assert embedded
    names = [c["name"] for c in route.candidates]
    assert {"order-lookup", "device-alarms"} <= set(names)
    scores = [c["score"] for c in route.candidates]
    assert scores == sorted(scores, reverse=True)


async def test_an_explicit_skill_skips_retrieval(services: Services, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply(content="Closed on 1 May."))
    events = await turn(services, "hello", skill="holiday-calendar")
    route = route_of(events)
    assert (route.kind, route.target, route.by) == ("skill", "holiday-calendar", "explicit")


async def test_the_message_is_embedded_once_while_the_thread_is_read(
    services: Services, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The query embedding starts with the turn, overlapping the thread read and the first
    # checkpoint, and routing uses that vector instead of embedding the message again.
    order: list[str] = []
    index = services.skills.index
    embedder: Any = index.cache.embedder  # type: ignore[union-attr]
    forward, anticipate = embedder._forward, index.anticipate
    read = services.checkpointer.aget_tuple

    def forwarded(texts: list[str]) -> Any:
        order.extend(f"embed {t}" for t in texts)
        return forward(texts)

    def anticipating(queries: list[str]) -> None:
        order.append(f"anticipate {queries}")
        anticipate(queries)

    async def reading(config: Any) -> Any:
        order.append("read")
        return await read(config)

    monkeypatch.setattr(embedder, "_forward", forwarded)
    monkeypatch.setattr(index, "anticipate", anticipating)
    monkeypatch.setattr(services.checkpointer, "aget_tuple", reading)
    fake_llm.script(Reply(content="It has shipped."))
    text = f"where is my order ORD{uuid.uuid4().int % 10**6}?"
    events = await turn(services, text)
    assert route_of(events).target == "order-lookup"
    assert order[0] == f"anticipate {[text]}"  # before the thread is read
    assert "read" in order
    assert order.count(f"embed {text}") == 1


async def test_a_follow_up_stays_with_the_previous_skill_without_a_model_call(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="ORD1001 has shipped."), Reply(content="ORD1002 too."))
    await turn(services, "where is my order ORD1001?", "follow")
    events = await turn(services, "and the other one?", "follow")
    route = route_of(events)
    assert (route.kind, route.target, route.by) == ("skill", "order-lookup", "context")
    assert fake_llm.forced_requests == []
    assert final(events).message.content == "ORD1002 too."


async def test_small_talk_after_a_skill_turn_goes_to_the_assistant(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="ORD1001 has shipped."), Reply(content="I am Skilldesk."))
    await turn(services, "where is my order ORD1001?", "chat-after")
    events = await turn(services, "hi there, who are you?", "chat-after")
    assert route_of(events).kind == "general"
    assert final(events).message.content == "I am Skilldesk."


async def test_the_routing_call_counts_in_the_thread_usage(
    services: Services, fake_llm: FakeLLM
) -> None:
    router_picks(fake_llm, "leave-balance")
    fake_llm.script(
        Reply(
            content="12 days.",
            usage={"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
        )
    )
    events = await turn(services, "how many days can I still take off before the holidays")
    assert route_of(events).by == "model"
    assert final(events).usage["model_calls"] == 2
