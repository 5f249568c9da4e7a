"""Several small requests in one message: one joint expert holding their skills."""

from __future__ import annotations

import json

from agents.events import NodeStarted, RunFinished, Token, ToolCalled, ToolReturned
from app.services import Services
from tests.fakellm import FakeLLM, Reply, RequestView, ToolCall
from tests.integration.conversation.kit import ALARMS, ORDERS, final, route_of, turn


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
    # The two handlers ran at the same time (a SLOW handler waits for the other one).
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
