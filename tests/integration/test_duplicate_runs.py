"""The same message sent again while it is answered joins the run under way: one run, one
stored message, one answer for both requests; a run goes on when its reader leaves."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from langchain_core.messages import HumanMessage

from agents.errors import KeyReused
from agents.events import RunFailed, RunFinished
from agents.turns import ClientTurn
from app.main import create_app
from app.services import Services, open_services
from tests.fakellm import FakeLLM, Reply


@pytest.fixture
async def services(model_settings: Any) -> AsyncIterator[Services]:
    async with open_services(model_settings) as opened:
        yield opened


def turn(text: str) -> ClientTurn:
    return ClientTurn([{"role": "user", "content": text}])


async def test_two_identical_requests_at_once_make_one_run_and_get_one_answer(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="The pump is fine.", delay=0.5))
    conversations = services.conversations
    first, second = await asyncio.gather(
        conversations.run("dup-1", turn("how is the pump?")),
        conversations.run("dup-1", turn("how is the pump?")),
    )
    assert isinstance(first, RunFinished)
    assert isinstance(second, RunFinished)
    assert first.run_id == second.run_id
    assert first.message.content == second.message.content == "The pump is fine."
    assert len(fake_llm.scripted_requests) == 1
    history = await conversations.history("dup-1")
    assert [m.type for m in history] == ["human", "ai"]


async def test_a_different_message_at_once_waits_its_turn_and_runs(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="First.", delay=0.3), Reply(content="Second."))
    conversations = services.conversations
    first, second = await asyncio.gather(
        conversations.run("dup-2", turn("one")), conversations.run("dup-2", turn("two"))
    )
    assert isinstance(first, RunFinished)
    assert isinstance(second, RunFinished)
    assert first.run_id != second.run_id
    history = await conversations.history("dup-2")
    assert [m.content for m in history] == ["one", "First.", "two", "Second."]


async def test_a_retry_with_the_same_key_after_the_end_gets_the_same_answer(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Booked."))
    conversations = services.conversations
    first = await conversations.run("dup-3", turn("book it"), idempotency_key="k-1")
    again = await conversations.run("dup-3", turn("book it"), idempotency_key="k-1")
    assert isinstance(first, RunFinished)
    assert isinstance(again, RunFinished)
    assert again.run_id == first.run_id
    assert len(fake_llm.scripted_requests) == 1
    # The key with another message: refused, not answered with the first one's answer.
    with pytest.raises(KeyReused, match="another message"):
        await conversations.run("dup-3", turn("cancel it"), idempotency_key="k-1")
    # Without the key, the same words later are a new question.
    fake_llm.script(Reply(content="Booked again."))
    third = await conversations.run("dup-3", turn("book it"))
    assert isinstance(third, RunFinished)
    assert third.message.content == "Booked again."


async def test_a_key_sent_again_with_the_same_message_for_another_skill_is_refused(
    services: Services, fake_llm: FakeLLM
) -> None:
    # QA: the fingerprint held the message only: the same words for another skill under the
    # same key got the first run's answer, its skill never asked.
    fake_llm.script(Reply(content="ORD1 ships today."))
    conversations = services.conversations
    first = await conversations.run("dup-5", turn("where is ORD1?"), idempotency_key="k-5")
    assert isinstance(first, RunFinished)
    with pytest.raises(KeyReused, match="another skill"):
        await conversations.run(
            "dup-5", turn("where is ORD1?"), idempotency_key="k-5", skill="returns-policy"
        )
    async with open_services(services.settings) as after:  # restarted: the record's key
        with pytest.raises(KeyReused, match="another skill"):
            await after.conversations.begin(
                "dup-5", turn("where is ORD1?"), idempotency_key="k-5", profile="fast"
            )
    assert len(fake_llm.scripted_requests) == 1


async def test_a_run_goes_on_when_its_reader_leaves(services: Services, fake_llm: FakeLLM) -> None:
    fake_llm.script(Reply(content="Done in the background.", delay=0.3))
    stream = services.conversations.stream("dup-4", [HumanMessage("do it")])
    await anext(stream)  # the run has started
    await stream.aclose()  # the client went away
    for _ in range(100):
        history = await services.conversations.history("dup-4")
        if len(history) == 2:
            break
        await asyncio.sleep(0.05)
    assert [m.content for m in history] == ["do it", "Done in the background."]


def test_a_chat_request_retried_with_its_idempotency_key_gets_the_first_answer(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Ticket T-1 opened."))
    body = {"model": "skilldesk", "messages": [{"role": "user", "content": "open a ticket"}]}
    headers = {"X-Thread-Id": "dup-http", "Idempotency-Key": "req-42"}
    with TestClient(create_app(model_settings)) as client:
        first = client.post("/v1/chat/completions", json=body, headers=headers)
        again = client.post("/v1/chat/completions", json=body, headers=headers)
        history = client.get("/v1/threads/dup-http").json()["messages"]
    assert first.status_code == again.status_code == 200
    assert again.json()["choices"][0]["message"]["content"] == "Ticket T-1 opened."
    assert len(fake_llm.scripted_requests) == 1
    assert [m["content"] for m in history] == ["open a ticket", "Ticket T-1 opened."]


async def test_a_retry_with_its_key_after_a_restart_gets_the_answer_the_thread_holds(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    # QA: without Redis a restart forgot the key: the retry ran a second turn (the message
    # stored twice, the model asked again, a skill's side effect made twice).
    fake_llm.script(Reply(content="Booked."), Reply(content="Cancelled."))
    async with open_services(model_settings) as before:
        first = await before.conversations.run("dup-9", turn("book it"), idempotency_key="k-9")
    async with open_services(model_settings) as after:  # its runs in memory are gone
        with pytest.raises(KeyReused, match="another message"):
            await after.conversations.run("dup-9", turn("cancel it"), idempotency_key="k-9")
        again = await after.conversations.run("dup-9", turn("book it"), idempotency_key="k-9")
        history = await after.conversations.history("dup-9")
        # Another key: a new turn, kept in turn.
        other = await after.conversations.run("dup-9", turn("cancel it"), idempotency_key="k-10")
        traces = after.conversations.traces
        trace = await traces.runs("dup-9") if traces is not None else None
    assert isinstance(first, RunFinished)
    assert isinstance(again, RunFinished)
    assert again.message.id == first.message.id
    assert again.message.content == "Booked."
    assert [m.content for m in history] == ["book it", "Booked."]
    assert isinstance(other, RunFinished)
    assert other.message.content == "Cancelled."
    assert len(fake_llm.scripted_requests) == 2
    assert trace is not None
    assert trace.answers[str(first.message.id)] == first.run_id  # still the first run's trace


def test_a_chat_request_retried_with_its_key_after_a_restart_is_not_answered_twice(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Ticket T-2 opened."))
    body = {"model": "skilldesk", "messages": [{"role": "user", "content": "open a ticket"}]}
    headers = {"X-Thread-Id": "dup-restart", "Idempotency-Key": "req-43"}
    with TestClient(create_app(model_settings)) as client:
        first = client.post("/v1/chat/completions", json=body, headers=headers)
    with TestClient(create_app(model_settings)) as client:  # the process restarted
        again = client.post("/v1/chat/completions", json=body, headers=headers)
        streamed = client.post(
            "/v1/chat/completions", json={**body, "stream": True}, headers=headers
        )
        history = client.get("/v1/threads/dup-restart").json()["messages"]
    assert first.status_code == again.status_code == streamed.status_code == 200
    assert again.json()["choices"][0]["message"]["content"] == "Ticket T-2 opened."
    assert "Ticket T-2 opened." in streamed.text
    assert len(fake_llm.scripted_requests) == 1
    assert [m["content"] for m in history] == ["open a ticket", "Ticket T-2 opened."]


async def test_a_key_whose_turn_ended_unanswered_before_others_is_refused_not_run_again(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    # Review: a keyed turn with no answer in the thread, others after it: answered again it
    # was a new turn (its message appended, its side effects made again).
    fake_llm.allow_unscripted()  # the first turn's model fails
    async with open_services(model_settings) as before:
        failed = await before.conversations.run("dup-11", turn("book it"), idempotency_key="k-11")
        fake_llm.script(Reply(content="Hi."))
        await before.conversations.run("dup-11", turn("hello"))
    assert isinstance(failed, RunFailed)
    asked = len(fake_llm.scripted_requests)
    async with open_services(model_settings) as after:
        with pytest.raises(KeyReused, match="has ended, and the thread has gone on"):
            await after.conversations.run("dup-11", turn("book it"), idempotency_key="k-11")
        history = await after.conversations.history("dup-11")
    assert [m.content for m in history] == ["book it", "hello", "Hi."]
    assert len(fake_llm.scripted_requests) == asked


def test_a_run_request_reusing_a_kept_key_after_a_restart_is_refused_before_it_is_accepted(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    # QA: the key found in the thread's record only by the run: the client had its 202, then
    # the run failed `idempotency_key_reused`.
    fake_llm.script(Reply(content="Booked."))
    headers = {"Idempotency-Key": "req-44"}
    with TestClient(create_app(model_settings)) as client:
        first = client.post("/v1/threads/dup-12/runs", json={"message": "book it"}, headers=headers)
        run_id = first.json()["id"]
        for _ in range(200):
            if client.get(f"/v1/threads/dup-12/runs/{run_id}").json()["status"] == "succeeded":
                break
            time.sleep(0.02)
    with TestClient(create_app(model_settings)) as client:  # the process restarted
        other = client.post(
            "/v1/threads/dup-12/runs", json={"message": "cancel it"}, headers=headers
        )
        streamed = client.post(
            "/v1/threads/dup-12/runs",
            json={"message": "cancel it", "stream": True},
            headers=headers,
        )
        history = client.get("/v1/threads/dup-12").json()["messages"]
    assert first.status_code == 202, first.text
    for refused in (other, streamed):
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "idempotency_key_reused"
    assert [m["content"] for m in history] == ["book it", "Booked."]
    assert len(fake_llm.scripted_requests) == 1
