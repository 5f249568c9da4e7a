"""Several requests with an expert each, in parallel or in dependency order, and the
aggregator that composes their results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents.events import NodeStarted, Token
from app.services import Services, open_services
from tests.fakellm import FakeLLM, Reply, RequestView, ToolCall
from tests.integration.conversation.kit import (
    ALARMS,
    ORDERS,
    expert_for,
    final,
    make_skills,
    route_of,
    turn,
)


async def test_several_intents_run_experts_in_parallel_and_keep_their_facts(
    fan_out: Services, fake_llm: FakeLLM
) -> None:
    def expert(request: RequestView) -> Reply:
        text = {
            "order-lookup": "ORD1234 shipped on 3 May.",
            "device-alarms": "CNC-001 has alarm E42 open.",
        }[expert_for(request)]
        # Answered once both experts are asking (or after a few seconds, if they never are).
        return Reply(content=text, together=2)

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
    # Each expert asked before the other was answered: they ran at the same time.
    first, second = [e for e in fake_llm.exchanges if e.request.skills([ORDERS, ALARMS])]
    assert {expert_for(first.request), expert_for(second.request)} == set(route.skills)
    assert first.overlaps(second)
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


async def test_a_new_message_after_a_stop_between_parallel_experts_counts_only_its_own_usage(
    fan_out: Services, fake_llm: FakeLLM
) -> None:
    # Stopped while one expert had answered and the other had not: the thread's last
    # checkpoint holds the finished expert's writes, which a new message does not take up;
    # its usage was counted from a total that included them, and came out negative.
    import asyncio

    from langchain_core.messages import HumanMessage

    from agents.events import RunFailed

    def expert(request: RequestView) -> Reply:
        if expert_for(request) == "order-lookup":
            return Reply(
                content="ORD1234 shipped on 3 May.",
                usage={"prompt_tokens": 500, "completion_tokens": 50, "total_tokens": 550},
            )
        return Reply(content="never", delay=30)

    fake_llm.script(expert, expert, Reply(content="Hello again."))
    fake_llm.allow_leftovers()
    conversations = fan_out.conversations
    feed = conversations.start(
        "stopped", [HumanMessage("check order ORD1234 and tell me if CNC-001 has open alarms")]
    )
    for _ in range(100):  # the quick expert has answered, the slow one has not
        if any(e.answered is not None for e in fake_llm.exchanges):
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    conversations.cancel(feed.run_id)
    ended = [e async for e in feed.read()][-1]
    assert isinstance(ended, RunFailed)
    again = await turn(fan_out, "hello", "stopped")
    used = final(again).usage
    assert all(v >= 0 for v in used.values()), used
    assert used["model_calls"] == 1, used
