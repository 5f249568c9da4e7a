"""A run that waits for its thread is kept in the store until it begins (no Redis), and a
cancelled one is forgotten there too: its message is never answered after a restart."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from agents.queued_runs import QUEUED, QueuedRuns
from agents.state.documents import MemoryDocuments
from agents.turns import ClientTurn
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


async def test_a_run_cancelled_while_it_is_being_kept_ends_and_frees_its_thread(
    services: Services, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Review: the write was awaited outside the run's handling: a cancel during it left the
    # run unended and its thread busy for good.
    keep = QueuedRuns.keep

    async def slow_keep(self: QueuedRuns, *args: Any) -> None:
        await asyncio.sleep(0.3)
        await keep(self, *args)

    monkeypatch.setattr(QueuedRuns, "keep", slow_keep)
    fake_llm.script(Reply(content="One.", delay=0.6))
    conversations = services.conversations
    first = conversations.start("kept-c", [HumanMessage("one")])
    second = conversations.start("kept-c", [HumanMessage("two")])
    await asyncio.sleep(0.05)  # its write under way
    conversations.cancel(second.run_id)
    async for _ in first.read():
        pass
    await asyncio.sleep(0.4)
    assert second.done
    assert not conversations.busy("kept-c")
    assert await _kept(services) == set()
    assert [m.content for m in await conversations.history("kept-c")] == ["one", "One."]


async def test_a_deleted_thread_s_waiting_runs_are_forgotten_with_it() -> None:
    queued = QueuedRuns(MemoryDocuments())
    for run_id, thread in (("r1", "a"), ("r2", "a"), ("r3", "b")):
        await queued.keep(thread, run_id, ClientTurn([{"role": "user", "content": "hi"}]), {})
    await queued.forget_thread("a")
    left = await queued.documents.find(QUEUED, limit=None)
    assert [run["run_id"] for run in left] == ["r3"]
    assert await queued.forget("r3") is True
    assert await queued.forget("r3") is False  # taken once
