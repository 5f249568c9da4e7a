"""A run that waits for its thread is kept in the store until it begins (no Redis), and a
cancelled one is forgotten there too: its message is never answered after a restart."""

from __future__ import annotations

import asyncio

from langchain_core.messages import HumanMessage

from agents.queued_runs import QUEUED
from app.services import Services
from tests.fakellm import FakeLLM, Reply


async def _kept(services: Services) -> set[str]:
    documents = services.conversations.queued.documents  # type: ignore[union-attr]
    return {d["run_id"] for d in await documents.find(QUEUED, limit=None)}


async def test_a_waiting_run_is_kept_until_it_begins_and_a_cancelled_one_forgotten(
    services: Services, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="One.", delay=0.6), Reply(content="Two."))
    conversations = services.conversations
    first = conversations.start("kept-q", [HumanMessage("one")])
    second = conversations.start("kept-q", [HumanMessage("two")])
    third = conversations.start("kept-q", [HumanMessage("three")])
    await asyncio.sleep(0.3)
    assert await _kept(services) == {second.run_id, third.run_id}
    conversations.cancel(third.run_id)
    async for _ in second.read():
        pass
    assert await _kept(services) == set()
    assert first.done
    assert third.done
    history = await conversations.history("kept-q")
    assert [m.content for m in history] == ["one", "One.", "two", "Two."]
