"""A run as its caller sees it: failures that end it, turns at once on one thread,
callbacks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage

from agents.events import RunFailed
from app.services import Services
from tests.fakellm import FakeLLM, Reply
from tests.integration.conversation.kit import final, turn


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


async def test_two_turns_at_once_on_one_thread_both_keep_their_messages(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        Reply(content="first answer", delay=0.3), Reply(content="second answer", delay=0.3)
    )
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
