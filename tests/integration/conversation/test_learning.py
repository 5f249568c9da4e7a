"""Routing that learns from use: a message whose skill the model chose becomes an example of
that skill, so the next such message routes with no model choosing; the cap holds, learning
off stores nothing, the examples are in the checkpoint database and survive a restart."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.services import Services, open_services
from tests.fakellm import FakeLLM, Reply, RequestView, ToolCall
from tests.integration.conversation.kit import (
    PUMP,
    PUMP_AGAIN,
    final,
    make_skills,
    order_lookup,
    route_of,
    turn,
)
from tests.pgkit import schema_url


@pytest.fixture
def learn_settings(model_settings: Any, tmp_path: Path) -> Any:
    return model_settings.model_copy(
        update={"skills_dir": make_skills(tmp_path / "skills"), "skills_embeddings": True}
    )


@pytest.fixture
async def learning(learn_settings: Any) -> AsyncIterator[Services]:
    async with open_services(learn_settings) as opened:
        yield opened


async def test_a_message_the_model_routed_teaches_the_router_its_paraphrase(
    learning: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(order_lookup, order_lookup)
    events = await turn(learning, PUMP)
    assert route_of(events).kind == "candidates"
    assert final(events).usage["model_calls"] == 2
    assert learning.learned is not None
    [example] = await learning.learned.examples("order-lookup")
    assert (example.text, example.how, example.status) == (PUMP, "candidates", "learned")
    assert example.run_id == final(events).run_id
    assert example.thread_id == final(events).thread_id

    def expert(request: RequestView) -> Reply:
        # One skill's expert: the router decided alone, the other candidate is not offered.
        assert request.offers("get_order")
        assert "list_alarms" not in request.tool_names
        return order_lookup(request)

    fake_llm.script(expert, expert)
    events = await turn(learning, PUMP_AGAIN)
    route = route_of(events)
    assert (route.kind, route.target, route.by) == ("skill", "order-lookup", "retrieval")
    assert "like an example learned from use" in route.reason
    assert fake_llm.forced_requests == []
    # Routed by retrieval: nothing more is learned from it.
    assert len(await learning.learned.examples("order-lookup")) == 1


async def test_a_tie_break_teaches_and_a_turn_the_router_decided_does_not(
    learning: Services, fake_llm: FakeLLM
) -> None:
    from tests.skillkit import router_picks

    router_picks(fake_llm, "order-lookup")
    fake_llm.script(Reply(content="Your order has shipped."))
    events = await turn(learning, "my order is broken, I need a ticket")
    assert (route_of(events).by, route_of(events).target) == ("model", "order-lookup")
    assert learning.learned is not None
    [example] = await learning.learned.examples("order-lookup")
    assert example.how == "tie-break"

    fake_llm.script(order_lookup, order_lookup)
    events = await turn(learning, "where is my order ORD1001 right now")
    assert route_of(events).by == "retrieval"
    assert len(await learning.learned.examples("order-lookup")) == 1


async def test_the_cap_keeps_the_newest_examples_of_a_skill(
    learn_settings: Any, fake_llm: FakeLLM
) -> None:
    settings = learn_settings.model_copy(update={"learn_examples_per_skill": 2})
    texts = [
        "status of the delivery for the broken pump",
        "delivery status of the pump that broke",
        "has the replacement pump delivery left yet",
    ]
    async with open_services(settings) as services:
        assert services.learned is not None
        for text in texts:
            await services.learned.learn(
                "order-lookup", text, thread_id="t", run_id=uuid.uuid4().hex, how="candidates"
            )
        kept = await services.learned.examples("order-lookup")
        assert [e.text for e in kept] == texts[:0:-1]  # newest first, the oldest gone
        assert services.skills.index.learned("order-lookup") == tuple(texts[1:])


async def test_with_learning_off_nothing_is_stored(learn_settings: Any, fake_llm: FakeLLM) -> None:
    settings = learn_settings.model_copy(update={"learn_examples": False})
    async with open_services(settings) as services:
        fake_llm.script(order_lookup, order_lookup)
        events = await turn(services, PUMP)
        assert route_of(events).kind == "candidates"
        assert services.learned is not None
        assert await services.learned.examples("order-lookup") == []
        fake_llm.script(order_lookup, order_lookup)
        assert route_of(await turn(services, PUMP_AGAIN)).kind == "candidates"

        def answer(request: RequestView) -> Reply:
            assert "note_skill" not in request.tool_names  # nothing to learn it for
            return Reply(content="You have 12 days left.")

        fake_llm.script(answer)
        assert route_of(await turn(services, LEAVE_TEXT)).kind == "candidates"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty store of each kind (PostgreSQL: a schema of its own, dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.sqlite'}"
        return
    with schema_url() as url:
        yield url


async def test_learned_examples_survive_a_restart(
    learn_settings: Any, store_url: str, fake_llm: FakeLLM
) -> None:
    learn_settings = learn_settings.model_copy(update={"checkpoint_url": store_url})
    async with open_services(learn_settings) as services:
        fake_llm.script(order_lookup, order_lookup)
        await turn(services, PUMP)
    async with open_services(learn_settings) as services:
        assert services.skills.index.learned("order-lookup") == (PUMP,)
        fake_llm.script(order_lookup, order_lookup)
        route = route_of(await turn(services, PUMP_AGAIN))
        assert (route.kind, route.target) == ("skill", "order-lookup")


LEAVE_TEXT = "how many days can I still take off before the holidays"
LEAVE_AGAIN = "how many days off can I still take before the holidays"


async def test_an_instruction_only_skill_the_model_notes_beside_its_answer_is_learned(
    learning: Services, fake_llm: FakeLLM
) -> None:
    def answer(request: RequestView) -> Reply:
        # Close candidates with no tools: the model says which it followed, in its answer.
        assert request.offers("note_skill"), request.describe()
        enum = request.tool("note_skill").parameters["properties"]["name"]["enum"]
        assert set(enum) == {"leave-balance", "holiday-calendar"}
        return Reply(
            content="You have 12 days left.",
            tool_calls=[ToolCall("note_skill", {"name": "leave-balance"})],
        )

    fake_llm.script(answer)
    events = await turn(learning, LEAVE_TEXT)
    assert route_of(events).kind == "candidates"
    assert final(events).usage["model_calls"] == 1  # noting costs no call
    assert final(events).message.content == "You have 12 days left."
    state = await learning.conversations.state(final(events).thread_id)
    assert state["route"]["target"] == "leave-balance"
    assert learning.learned is not None
    [example] = await learning.learned.examples("leave-balance")
    assert (example.text, example.how) == (LEAVE_TEXT, "candidates")

    def expert(request: RequestView) -> Reply:
        assert "note_skill" not in request.tool_names  # one skill: nothing to choose
        return Reply(content="You have 12 days left.")

    fake_llm.script(expert)
    route = route_of(await turn(learning, LEAVE_AGAIN))
    assert (route.kind, route.target, route.by) == ("skill", "leave-balance", "retrieval")


async def test_a_note_sent_alone_gets_its_answer_in_the_next_call(
    learning: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCall("note_skill", {"name": "holiday-calendar"})]),
        Reply(content="The office is closed on 1 May."),
    )
    events = await turn(learning, LEAVE_TEXT)
    assert final(events).usage["model_calls"] == 2
    assert final(events).message.content == "The office is closed on 1 May."
    assert learning.learned is not None
    [example] = await learning.learned.examples("holiday-calendar")
    assert example.text == LEAVE_TEXT


async def test_a_skill_the_candidates_expert_loaded_instead_is_learned_and_a_refused_one_not(
    learning: Services, fake_llm: FakeLLM
) -> None:
    def first(request: RequestView) -> Reply:
        return Reply(
            tool_calls=[
                ToolCall("load_skill", {"name": "leave-balance"}, id="c1"),  # not listed
                ToolCall("load_skill", {"name": "holiday-calendar"}, id="c2"),  # listed next
            ]
        )

    fake_llm.script(first, Reply(content="Closed on 1 May."))
    events = await turn(learning, PUMP)
    assert route_of(events).kind == "candidates"
    assert learning.learned is not None
    [example] = await learning.learned.examples("holiday-calendar")
    assert (example.text, example.how) == (PUMP, "candidates")
    assert await learning.learned.examples("leave-balance") == []


async def test_a_turn_whose_tool_failed_teaches_nothing(
    learning: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCall("get_order", {})]),  # no order id: refused
        Reply(content="I could not look that order up."),
    )
    events = await turn(learning, PUMP)
    assert route_of(events).kind == "candidates"
    assert learning.learned is not None
    assert await learning.learned.examples("order-lookup") == []


async def test_what_one_process_learns_or_deletes_reaches_another_on_the_same_store(
    learn_settings: Any, fake_llm: FakeLLM
) -> None:
    async with open_services(learn_settings) as one, open_services(learn_settings) as other:
        assert one.learned is not None
        fake_llm.script(order_lookup, order_lookup)
        await turn(one, PUMP)
        await until(lambda: other.skills.index.learned("order-lookup") == (PUMP,))
        fake_llm.script(order_lookup, order_lookup)
        route = route_of(await turn(other, PUMP_AGAIN))
        assert (route.kind, route.target) == ("skill", "order-lookup")
        [example] = await one.learned.examples("order-lookup")
        assert await one.learned.delete("order-lookup", example.id)
        await until(lambda: other.skills.index.learned("order-lookup") == ())


async def until(condition: Any, timeout_s: float = 30.0) -> None:
    """Wait for ``condition()`` (another process's refresh runs every five seconds)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "not picked up in time"
        await asyncio.sleep(0.1)
