"""How a message is routed: retrieval, close candidates offered to one expert (the model
picks), the tie-break call where that cannot be, the general assistant's pre-loaded hits,
clauses of a multi-intent message, an explicit skill, the thread's context."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from agents.events import ToolCalled
from agents.run import RunContext
from app.services import Services
from tests.fakellm import FakeLLM, Reply, RequestView, ToolCall
from tests.integration.conversation.kit import ALARMS as ALARMS_SIG
from tests.integration.conversation.kit import ORDERS as ORDERS_SIG
from tests.integration.conversation.kit import SHOP_FLOOR, final, route_of, turn
from tests.skillkit import router_picks, signature

LEAVE = signature(SHOP_FLOOR / "leave-balance")
HOLIDAYS = signature(SHOP_FLOOR / "holiday-calendar")
TICKETS = signature(SHOP_FLOOR / "ticket-desk")


async def test_an_ambiguous_message_goes_to_one_expert_holding_the_close_candidates(
    services: Services, fake_llm: FakeLLM
) -> None:
    def answer(request: RequestView) -> Reply:
        # One expert holds both close candidates' instructions: the model picks in its answer.
        held = request.skills([LEAVE, HOLIDAYS])
        assert held == ["leave-balance", "holiday-calendar"], request.describe()
        return Reply(content="You have 12 days left.")

    fake_llm.script(answer)
    events = await turn(services, "how many days can I still take off before the holidays")
    route = route_of(events)
    assert (route.kind, route.by) == ("candidates", "retrieval")
    assert set(route.offered) == {"leave-balance", "holiday-calendar"}
    assert route.skills == route.offered
    assert fake_llm.forced_requests == []  # no separate tie-break call
    assert final(events).message.content == "You have 12 days left."
    assert final(events).usage["model_calls"] == 1
    state = await services.conversations.state(final(events).thread_id)
    assert state["route"]["kind"] == "candidates"


async def test_the_candidates_expert_calls_the_fitting_tool_and_a_follow_up_stays_with_it(
    services: Services, fake_llm: FakeLLM
) -> None:
    def first(request: RequestView) -> Reply:
        assert request.offers("get_order", "list_alarms"), request.describe()
        assert "create_ticket" not in request.tool_names
        return Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})])

    def answer(request: RequestView) -> Reply:
        [result] = request.results_of("get_order")
        assert "shipped" in result.text
        return Reply(content="ORD1001 has shipped.")

    fake_llm.script(first, answer, Reply(content="ORD1002 too."))
    thread = uuid.uuid4().hex
    events = await turn(services, "status of the delivery for the broken pump", thread)
    route = route_of(events)
    assert route.kind == "candidates"
    assert {"order-lookup", "device-alarms"} <= set(route.offered)
    assert final(events).usage["model_calls"] == 2  # the floor for an answer from a tool
    state = await services.conversations.state(thread)
    assert state["route"]["target"] == "order-lookup"  # the skill the model used
    events = await turn(services, "and the other one?", thread)
    assert (route_of(events).target, route_of(events).by) == ("order-lookup", "context")
    assert final(events).message.content == "ORD1002 too."


async def test_when_no_candidate_fits_the_expert_can_load_one_of_the_next_best(
    services: Services, fake_llm: FakeLLM
) -> None:
    def first(request: RequestView) -> Reply:
        assert request.offers("get_order", "list_alarms", "load_skill"), request.describe()
        return Reply(
            tool_calls=[
                ToolCall("load_skill", {"name": "leave-balance"}, id="c1"),  # not listed
                ToolCall("load_skill", {"name": "holiday-calendar"}, id="c2"),  # listed next
            ]
        )

    def answer(request: RequestView) -> Reply:
        refused, loaded = request.results_of("load_skill")
        assert "out_of_scope" in refused.text
        assert HOLIDAYS.instructions in loaded.text
        return Reply(content="Closed on 1 May.")

    fake_llm.script(first, answer)
    events = await turn(services, "status of the delivery for the broken pump")
    assert route_of(events).kind == "candidates"
    assert final(events).message.content == "Closed on 1 May."


async def test_close_candidates_with_a_side_effecting_tool_are_settled_by_the_tie_break(
    services: Services, fake_llm: FakeLLM
) -> None:
    router_picks(fake_llm, "order-lookup")

    def expert(request: RequestView) -> Reply:
        assert "create_ticket" not in request.tool_names  # the wrong tool is never offered
        return Reply(content="Your order has shipped.")

    fake_llm.script(expert)
    events = await turn(services, "my order is broken, I need a ticket")
    route = route_of(events)
    assert (route.kind, route.target, route.by) == ("skill", "order-lookup", "model")
    [tie_break] = [v for v in fake_llm.views if v.forced_tool == "choose_route"]
    choices = tie_break.tool("choose_route").parameters["properties"]["skill"]["enum"]
    assert {"order-lookup", "ticket-desk", "none"} <= set(choices)
    assert final(events).usage["model_calls"] == 2


async def test_with_no_offer_budget_a_small_model_call_settles_the_tie(
    no_offers: Services, fake_llm: FakeLLM
) -> None:
    router_picks(fake_llm, "leave-balance")
    fake_llm.script(Reply(content="You have 12 days left."))
    events = await turn(no_offers, "how many days can I still take off before the holidays")
    route = route_of(events)
    assert (route.kind, route.target, route.by) == ("skill", "leave-balance", "model")
    assert route.offered == []
    assert final(events).usage["model_calls"] == 2


async def test_the_general_assistant_holds_its_best_hits_and_calls_their_tools_at_once(
    services: Services, fake_llm: FakeLLM
) -> None:
    def first(request: RequestView) -> Reply:
        # The best hit's definition is in the prompt and its tool is offered: no load_skill.
        assert request.holds(TICKETS), request.describe()
        return Reply(tool_calls=[ToolCall("create_ticket", {"title": "laptop screen"})])

    fake_llm.script(first, Reply(content="Ticket 1 is open."))
    events = await turn(services, "I need help with my laptop screen")
    route = route_of(events)
    assert route.kind == "general"
    assert route.offered[0] == "ticket-desk"
    calls = [e.tool for e in events if isinstance(e, ToolCalled)]
    assert calls == ["create_ticket"]
    assert final(events).usage["model_calls"] == 2
    state = await services.conversations.state(final(events).thread_id)
    assert "ticket-desk" not in state.get("loaded_skills", [])  # lived in that prompt only


async def test_small_talk_gets_no_pre_loaded_definitions(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hello!"))
    events = await turn(services, "hi there, who are you?")
    assert route_of(events).kind == "general"
    assert route_of(events).offered == []
    assert fake_llm.views[0].skills([ORDERS_SIG, ALARMS_SIG, TICKETS, LEAVE, HOLIDAYS]) == []


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


async def test_two_requests_among_near_duplicate_skills_still_go_to_one_joint_expert(
    near_duplicates: Services, fake_llm: FakeLLM
) -> None:
    # Each request's best skill leads the next by less than the margin a skill needs to
    # answer a whole message with no model call; a request of several keeps its own margin.
    def joint(request: RequestView) -> Reply:
        assert request.system_contains("Answer with repair-lookup.")
        assert request.system_contains("Answer with benefits-lookup.")
        return Reply(content="Both looked up.")

    fake_llm.script(joint)
    text = (
        "Look up repair records and related lubrication details for the maintenance team and "
        "also look up benefits records and related leave details for the hr team"
    )
    events = await turn(near_duplicates, text)
    route = route_of(events)
    assert route.kind == "multi"
    assert route.skills == ["repair-lookup", "benefits-lookup"]
    assert final(events).usage["model_calls"] == 1


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


async def test_a_message_a_workflow_keyword_decides_starts_no_skill_query(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The route of a message naming a workflow's keyword is that workflow, whatever the skills
    # score: its query embedding, started ahead of routing, would be a model pass for nothing.
    router = services.conversations.router
    assert router is not None
    assert "refund-request" in services.workflows.names()
    started: list[list[str]] = []
    monkeypatch.setattr(services.skills.index, "anticipate", started.append)
    router.anticipate("I want a refund for order ORD1001, it arrived broken", RunContext())
    router.anticipate("where is my order ORD1001?", RunContext())
    assert started == [["where is my order ORD1001?"]]


async def test_the_workflow_intent_is_matched_off_the_event_loop(
    services: Services, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Matching a workflow's example embeds the message: on the event loop, every other
    # request would wait for the encoder meanwhile.
    matched_on: list[threading.Thread] = []
    match = services.workflows.match

    def matching(text: str, **options: Any) -> Any:
        if not options.get("words_only"):  # keywords alone (no embedding) run on the loop
            matched_on.append(threading.current_thread())
        return match(text, **options)

    monkeypatch.setattr(services.workflows, "match", matching)
    fake_llm.script(Reply(content="It has shipped."))
    events = await turn(services, "where is my order ORD1001?")
    assert route_of(events).target == "order-lookup"
    assert matched_on
    assert threading.current_thread() not in matched_on
    assert matched_on[0].name.startswith("skilldesk-embed")  # beside the encoder: no hop


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
    router_picks(fake_llm, "order-lookup")
    fake_llm.script(
        Reply(
            content="It has shipped.",
            usage={"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
        )
    )
    events = await turn(services, "my order is broken, I need a ticket")
    assert route_of(events).by == "model"
    assert final(events).usage["model_calls"] == 2
