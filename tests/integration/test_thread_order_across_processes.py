"""Queued messages of one thread sent to several processes on one PostgreSQL database are
answered in the order they came, whichever process each came to (QA: sent alternately to
two processes, they were stored 1, 4, 2, 5, 3, 6)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from agents.events import RunFinished
from app.services import Services, open_services
from tests.fakellm import FakeLLM, Reply
from tests.pgkit import schema_url

pytestmark = pytest.mark.integration


@asynccontextmanager
async def two_processes(model_settings: Any) -> AsyncIterator[tuple[Services, Services]]:
    """Two services on one fresh PostgreSQL schema (as two processes are), summaries off: every
    message stays in the state, in its order."""
    with schema_url() as url:
        update = {"checkpoint_url": url, "summary_after_messages": 1000}
        settings = model_settings.model_copy(update=update)
        async with AsyncExitStack() as stack:
            one = await stack.enter_async_context(open_services(settings, background=False))
            other = await stack.enter_async_context(open_services(settings, background=False))
            yield one, other


async def asked(services: Services, thread: str) -> list[str]:
    state = await services.conversations.state(thread)
    return [m.text for m in state["messages"] if m.type == "human"]


async def test_queued_messages_sent_to_two_processes_are_answered_in_the_order_they_came(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    thread = f"order-{uuid.uuid4().hex[:8]}"
    fake_llm.script(*[Reply(content=f"answer {n}") for n in range(7)])
    async with two_processes(model_settings) as (one, other):
        await one.conversations.run(thread, [HumanMessage("hello")])  # the thread exists
        held, release = asyncio.Event(), asyncio.Event()

        async def answering_another() -> None:  # the thread is busy while they come
            async with one.conversations.hold(thread):
                held.set()
                await release.wait()

        holder = asyncio.create_task(answering_another())
        await held.wait()
        feeds = []
        for n in range(1, 7):  # 1, 3, 5 to one process; 2, 4, 6 to the other
            to = one if n % 2 else other
            feeds.append(to.conversations.start(thread, [HumanMessage(f"message {n}")]))
            await asyncio.sleep(0.3)  # each waits for the thread before the next comes
        release.set()
        await holder
        for feed in feeds:
            assert isinstance([e async for e in feed.read()][-1], RunFinished)
        said = await asked(other, thread)
    assert said == ["hello", *[f"message {n}" for n in range(1, 7)]]


async def test_runs_accepted_back_to_back_by_two_processes_are_answered_in_that_order(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    # QA: the next request, sent the moment the one before was accepted (202), reached the
    # line first: the run was accepted before its task had joined the thread's line.
    thread = f"order-{uuid.uuid4().hex[:8]}"
    fake_llm.script(*[Reply(content=f"answer {n}") for n in range(11)])
    async with two_processes(model_settings) as (one, other):
        await one.conversations.run(thread, [HumanMessage("hello")])
        feeds = []
        for n in range(1, 11):
            to = one if n % 2 else other
            feeds.append(await to.conversations.begin(thread, [HumanMessage(f"m{n}")]))
        for feed in feeds:
            assert isinstance([e async for e in feed.read()][-1], RunFinished)
        said = await asked(other, thread)
    assert said == ["hello", *[f"m{n}" for n in range(1, 11)]]
