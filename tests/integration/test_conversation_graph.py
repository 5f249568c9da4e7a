"""The conversation graph, scripted turn by turn: routes, experts, the supervisor, limits."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from agents.events import (
    Event,
    NodeStarted,
    RouteDecided,
    RunFailed,
    RunFinished,
    Token,
    ToolCalled,
    ToolReturned,
)
from app.services import Services, open_services
from tests.fakellm import FakeLLM, Reply, RequestView, ToolCall
from tests.skillkit import FIXTURE_SKILLS, copy_fixture_skills, router_picks, signature

SHOP_FLOOR = FIXTURE_SKILLS / "shop-floor"
ORDERS = signature(SHOP_FLOOR / "order-lookup")
ALARMS = signature(SHOP_FLOOR / "device-alarms")


def make_skills(root: Path) -> Path:
    """The shop-floor skills: order-lookup, device-alarms, ticket-desk (tools) and
    holiday-calendar, leave-balance (instructions only)."""
    return copy_fixture_skills(root, "shop-floor")


@pytest.fixture
async def services(model_settings: Any, tmp_path: Path) -> AsyncIterator[Services]:
    settings = model_settings.model_copy(
        update={"skills_dir": make_skills(tmp_path / "skills"), "skills_embeddings": True}
    )
    async with open_services(settings) as opened:
        yield opened


@pytest.fixture
async def fan_out(model_settings: Any, tmp_path: Path) -> AsyncIterator[Services]:
    """Services that give every request its own expert (no joint expert)."""
    settings = model_settings.model_copy(
        update={
            "skills_dir": make_skills(tmp_path / "skills"),
            "skills_embeddings": True,
            "joint_expert_tokens": 0,
        }
    )
    async with open_services(settings) as opened:
        yield opened


async def turn(
    services: Services, text: str, thread: str | None = None, **options: Any
) -> list[Event]:
    thread = thread or uuid.uuid4().hex
    return [e async for e in services.conversations.stream(thread, [HumanMessage(text)], **options)]


def final(events: list[Event]) -> RunFinished:
    last = events[-1]
    assert isinstance(last, RunFinished), last
    return last


def route_of(events: list[Event]) -> RouteDecided:
    return next(e for e in events if isinstance(e, RouteDecided))


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


async def test_general_chat_goes_to_the_assistant_with_the_compact_index(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hello! How can I help?"))
    events = await turn(services, "hi there, good morning")
    assert route_of(events).kind == "general"
    assert final(events).message.content == "Hello! How can I help?"
    assert "load_skill" in fake_llm.scripted_views[0].system


def expert_for(request: RequestView) -> str:
    """The one skill an expert's request holds: its instructions and its tools."""
    [name] = request.skills([ORDERS, ALARMS])
    return name


async def test_several_intents_run_experts_in_parallel_and_keep_their_facts(
    fan_out: Services, fake_llm: FakeLLM
) -> None:
    arrivals: dict[str, float] = {}
    lock = threading.Lock()

    def expert(request: RequestView) -> Reply:
        name = expert_for(request)
        with lock:
            arrivals.setdefault(name, time.monotonic())
        text = {
            "order-lookup": "ORD1234 shipped on 3 May.",
            "device-alarms": "CNC-001 has alarm E42 open.",
        }[name]
        return Reply(content=text, delay=0.6)

    fake_llm.script(
        expert,
        expert,
        lambda request: Reply(
            content="ORD1234 shipped on 3 May; CNC-001 has alarm E42 open."
            if request.system_contains("ORD1234 shipped on 3 May.")
            and request.system_contains("CNC-001 has alarm E42 open.")
            else "facts missing"
        ),
    )
    started = time.monotonic()
    events = await turn(fan_out, "check order ORD1234 and tell me if CNC-001 has open alarms")
    route = route_of(events)
    assert route.kind == "multi"
    assert set(route.skills) == {"order-lookup", "device-alarms"}
    # Both requests mapped to their own skill and neither refers to the other: the plan
    # needed no model call.
    assert all(v.forced_tool != "plan_tasks" for v in fake_llm.views)
    assert final(events).message.content == (
        "ORD1234 shipped on 3 May; CNC-001 has alarm E42 open."
    )
    assert abs(arrivals["order-lookup"] - arrivals["device-alarms"]) < 0.5  # overlapped
    assert time.monotonic() - started < 2 * 0.6 + 1.5
    state = await fan_out.conversations.state(final(events).thread_id)
    assert state["workspace"]["mode"] == "parallel"
    assert {t["status"] for t in state["workspace"]["tasks"].values()} == {"done"}
    tokens = "".join(e.text for e in events if isinstance(e, Token))
    assert tokens == final(events).message.content  # only the aggregator is streamed


async def test_skills_larger_than_the_joint_budget_get_an_expert_each(
    model_settings: Any, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    # Two small skills, but a budget smaller than their definitions: one expert per request.
    settings = model_settings.model_copy(
        update={
            "skills_dir": make_skills(tmp_path / "skills"),
            "skills_embeddings": True,
            "joint_expert_tokens": 40,
        }
    )
    answers = {"order-lookup": "ORD1234 shipped.", "device-alarms": "CNC-001 is quiet."}
    fake_llm.script(
        lambda request: Reply(content=answers[expert_for(request)]),
        lambda request: Reply(content=answers[expert_for(request)]),
        Reply(content="ORD1234 shipped; CNC-001 is quiet."),
    )
    async with open_services(settings) as services:
        events = await turn(services, "check order ORD1234 and tell me if CNC-001 has open alarms")
        state = await services.conversations.state(final(events).thread_id)
    assert state["workspace"]["mode"] == "parallel"
    assert "joint_expert" not in [e.node for e in events if isinstance(e, NodeStarted)]
    assert final(events).message.content == "ORD1234 shipped; CNC-001 is quiet."


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


async def test_a_failed_task_is_reported_and_the_others_complete(
    fan_out: Services, fake_llm: FakeLLM
) -> None:
    def expert(request: RequestView) -> Reply:
        if expert_for(request) == "device-alarms":
            return Reply(status=500)
        return Reply(content="ORD1234 shipped on 3 May.")

    fake_llm.script(
        *[expert] * 4,
        lambda request: Reply(content=request.system),  # echo the aggregator's prompt
    )
    events = await turn(fan_out, "check order ORD1234 and tell me if CNC-001 has open alarms")
    state = await fan_out.conversations.state(final(events).thread_id)
    tasks = state["workspace"]["tasks"]
    assert tasks["t1"]["status"] == "done"
    assert tasks["t2"]["status"] == "failed"
    assert "language model failed" in tasks["t2"]["error"]
    answer = str(final(events).message.content)
    assert "ORD1234 shipped on 3 May." in answer
    assert "t2 (device-alarms, failed)" in answer


async def test_dependent_tasks_run_in_order_with_the_earlier_result(
    fan_out: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(
            tool_calls=[
                ToolCall(
                    "plan_tasks",
                    {
                        "tasks": [
                            {
                                "id": "t1",
                                "skill": "order-lookup",
                                "instruction": "Which device is ORD1234 for?",
                            },
                            {
                                "id": "t2",
                                "skill": "device-alarms",
                                "instruction": "Alarms of that device",
                                "depends_on": ["t1"],
                            },
                        ]
                    },
                )
            ]
        ),
        Reply(content="ORD1234 is a spindle for CNC-001."),
        lambda request: Reply(
            content="E42 open"
            if request.system_contains("ORD1234 is a spindle for CNC-001.")
            else "no input"
        ),
        Reply(content="done"),
    )
    events = await turn(fan_out, "check order ORD1234 and tell me if its machine has alarms")
    assert "plan" in [e.node for e in events if isinstance(e, NodeStarted)]  # the planner's call
    state = await fan_out.conversations.state(final(events).thread_id)
    assert state["workspace"]["tasks"]["t2"]["result"] == "E42 open"


async def test_an_instruction_planted_in_a_tool_result_cannot_widen_the_expert(
    services: Services, fake_llm: FakeLLM
) -> None:
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
    assert not any(m.startswith("_skilldesk_skill_ticket") for m in __import__("sys").modules)


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


async def test_the_expert_stops_after_five_rounds(services: Services, fake_llm: FakeLLM) -> None:
    fake_llm.script(*[Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1"})])] * 5)
    events = await turn(services, "where is my order ORD1001?")
    assert "stopped after 5 rounds" in str(final(events).message.content)
    assert len(fake_llm.requests) == 5


async def test_a_model_failure_keeps_the_thread_usable(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(*[Reply(status=500)] * 3, Reply(content="Back."))
    failed = await turn(services, "where is my order ORD1001?", "flaky")
    assert isinstance(failed[-1], RunFailed)
    assert "language model failed" in failed[-1].message
    events = await turn(services, "are you there?", "flaky")
    assert final(events).message.content == "Back."
    history = await services.conversations.history("flaky")
    assert [m.text for m in history if isinstance(m, HumanMessage)] == [
        "where is my order ORD1001?",
        "are you there?",
    ]


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


async def test_two_turns_at_once_on_one_thread_both_keep_their_messages(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(content="first answer", delay=0.3), Reply(content="second answer", delay=0.3)
    )
    import asyncio

    await asyncio.gather(
        turn(services, "hi there, good morning", "both"),
        turn(services, "and good evening too", "both"),
    )
    history = await services.conversations.history("both")
    assert sorted(m.text for m in history if isinstance(m, HumanMessage)) == [
        "and good evening too",
        "hi there, good morning",
    ]
    assert sorted(m.text for m in history if isinstance(m, AIMessage)) == [
        "first answer",
        "second answer",
    ]


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


async def test_small_independent_requests_get_one_expert_and_two_model_calls(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(
            tool_calls=[
                ToolCall("get_order", {"order_id": "ORD-SLOW-1"}),
                ToolCall("list_alarms", {"device_id": "CNC-SLOW-1"}),
            ]
        ),
        Reply(content="ORD-SLOW-1 has shipped; CNC-SLOW-1 has alarm E42 open."),
    )
    events = await turn(services, "check order ORD-SLOW-1 and tell me if CNC-SLOW-1 has alarms")
    route = route_of(events)
    assert route.kind == "multi"
    assert final(events).message.content == (
        "ORD-SLOW-1 has shipped; CNC-SLOW-1 has alarm E42 open."
    )
    # One expert with both skills: no planner, no expert per request, no aggregator.
    assert len(fake_llm.requests) == 2
    first = fake_llm.views[0]
    assert first.tool_names == {"get_order", "list_alarms", "load_skill", "read_skill_reference"}
    assert first.holds(ORDERS)
    assert first.holds(ALARMS)
    assert "(skill device-alarms)" in first.system
    # The two handlers ran at the same time.
    returned = {e.tool: e.content for e in events if isinstance(e, ToolReturned)}
    order_ran = json.loads(returned["get_order"])["ran"]
    alarm_ran = json.loads(returned["list_alarms"])[0]["ran"]
    assert order_ran[0] < alarm_ran[1]
    assert alarm_ran[0] < order_ran[1]
    tokens = "".join(e.text for e in events if isinstance(e, Token))
    assert tokens == final(events).message.content
    nodes = [e.node for e in events if isinstance(e, NodeStarted)]
    assert nodes == ["route", "joint_expert"]  # the route step planned: no plan step
    state = await services.conversations.state(final(events).thread_id)
    assert state["workspace"]["mode"] == "joint"
    assert state["route"]["plan_id"] == state["workspace"]["plan_id"]
    tasks = sorted(state["workspace"]["tasks"].values(), key=lambda t: t["skill"])
    assert [(t["skill"], t["status"]) for t in tasks] == [
        ("device-alarms", "done"),
        ("order-lookup", "done"),
    ]
    assert "E42" in tasks[0]["result"]
    assert "shipped" in tasks[1]["result"]
    assert state["usage"]["model_calls"] == 2


async def test_one_experts_failed_tool_fails_its_request_and_the_other_is_answered(
    services: Services, fake_llm: FakeLLM
) -> None:
    def answer(request: RequestView) -> Reply:
        return Reply(
            content=f"ORD7 has shipped. Alarms unavailable: {len(request.results)} results"
        )

    fake_llm.script(
        Reply(
            tool_calls=[
                ToolCall("get_order", {"order_id": "ORD7"}),
                ToolCall("list_alarms", {"device_id": "CNC-BROKEN"}),
            ]
        ),
        answer,
    )
    events = await turn(services, "check order ORD7 and tell me if CNC-BROKEN has open alarms")
    assert final(events).message.content == "ORD7 has shipped. Alarms unavailable: 2 results"
    sent = fake_llm.views[1].results
    assert any("the alarm server did not answer" in m.text for m in sent)
    state = await services.conversations.state(final(events).thread_id)
    tasks = {t["skill"]: t for t in state["workspace"]["tasks"].values()}
    assert tasks["order-lookup"]["status"] == "done"
    assert tasks["device-alarms"]["status"] == "failed"
    assert "the alarm server did not answer" in tasks["device-alarms"]["error"]


async def test_requests_with_side_effecting_tools_keep_separate_experts(
    services: Services, fake_llm: FakeLLM
) -> None:
    def reply(request: RequestView) -> Reply:
        results = request.results
        if request.offers("get_order"):
            if not results:
                return Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1234"})])
            if len(results) == 1:  # the model "obeys" the text planted in the order
                return Reply(tool_calls=[ToolCall("create_ticket", {"title": "pwned"})])
            return Reply(content="ORD1234 has shipped.")
        if request.offers("create_ticket"):
            if not results:
                return Reply(tool_calls=[ToolCall("create_ticket", {"title": "laptop broken"})])
            return Reply(content="Ticket created.")
        return Reply(content="ORD1234 has shipped. Ticket created.")

    # Order expert: look-up, planted call, answer; ticket expert: call, answer; aggregator.
    fake_llm.script(*[reply] * 6)
    events = await turn(
        services, "check order ORD1234 and create a helpdesk ticket titled laptop broken"
    )
    assert route_of(events).kind == "multi"
    state = await services.conversations.state(final(events).thread_id)
    assert state["workspace"]["mode"] == "parallel"
    called = {e.call_id: e for e in events if isinstance(e, ToolCalled)}
    returned = [e for e in events if isinstance(e, ToolReturned) and e.tool == "create_ticket"]
    outcome = {called[e.call_id].arguments["title"]: e.ok for e in returned}
    assert outcome == {"laptop broken": True, "pwned": False}


async def test_a_model_failure_in_the_joint_expert_answers_and_records_it(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(
            tool_calls=[
                ToolCall("get_order", {"order_id": "ORD8"}),
                ToolCall("list_alarms", {"device_id": "CNC-008"}),
            ]
        ),
        *[Reply(status=500)] * 3,
        Reply(content="Hello."),
    )
    events = await turn(services, "check order ORD8 and tell me if CNC-008 has open alarms")
    assert "I could not answer this request" in str(final(events).message.content)
    state = await services.conversations.state(final(events).thread_id)
    assert state["workspace"]["mode"] == "joint"
    assert {t["status"] for t in state["workspace"]["tasks"].values()} == {"failed"}
    follow = await turn(services, "hello again", final(events).thread_id)
    assert isinstance(follow[-1], RunFinished)


async def test_a_thread_store_failure_ends_the_run_with_run_failed(
    services: Services, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def unreadable(config: Any) -> Any:
        raise OSError("disk I/O error")

    monkeypatch.setattr(services.conversations.graph, "aget_state", unreadable)
    events = await turn(services, "where is my order ORD1234", "store-down")
    assert isinstance(events[-1], RunFailed)
    assert events[-1].code == "internal_error"
    assert fake_llm.requests == []
    monkeypatch.undo()  # the store is back: the thread works
    fake_llm.script(Reply(content="ORD1234 shipped."))
    assert final(await turn(services, "where is my order ORD1234", "store-down")).message.text


async def test_callbacks_passed_to_a_run_see_its_model_calls(
    services: Services, fake_llm: FakeLLM
) -> None:
    from langchain_core.callbacks import AsyncCallbackHandler

    class Seen(AsyncCallbackHandler):
        def __init__(self) -> None:
            self.model_calls = 0

        async def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
            self.model_calls += 1

    seen = Seen()
    fake_llm.script(Reply(content="Hello."))
    events = [
        e
        async for e in services.conversations.stream(
            "callbacks", [HumanMessage("hello there")], callbacks=[seen]
        )
    ]
    assert final(events).message.text == "Hello."
    assert seen.model_calls == len(fake_llm.requests) == 1
