"""A thread one process is answering is busy for every process on the same PostgreSQL
database: ``if_busy="reject"`` and a delete are refused by the others too, not queued."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import AsyncExitStack
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from agents.errors import ThreadBusy
from agents.events import RunFinished
from app.services import open_services
from tests.fakellm import FakeLLM, Reply
from tests.pgkit import schema_url

pytestmark = pytest.mark.integration


async def test_a_thread_answered_by_one_process_is_busy_for_another(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    thread = f"busy-{uuid.uuid4().hex[:8]}"
    fake_llm.script(
        Reply(content="zero"), Reply(content="first", delay=1.5), Reply(content="second")
    )
    with schema_url() as url:
        settings = model_settings.model_copy(update={"checkpoint_url": url})
        async with AsyncExitStack() as stack:
            one = await stack.enter_async_context(open_services(settings, background=False))
            other = await stack.enter_async_context(open_services(settings, background=False))
            await one.conversations.run(thread, [HumanMessage("hello")])  # the thread exists
            feed = one.conversations.start(thread, [HumanMessage("and now?")])
            for _ in range(100):  # until its run holds the thread
                if await other.conversations.busy_anywhere(thread):
                    break
                await asyncio.sleep(0.02)
            assert not other.conversations.busy(thread)  # not a run of its own

            with pytest.raises(ThreadBusy):
                await other.conversations.begin(thread, [HumanMessage("hi")], if_busy="reject")
            with pytest.raises(ThreadBusy):
                await other.threads.delete(thread)

            assert isinstance([e async for e in feed.read()][-1], RunFinished)
            second = await other.conversations.begin(
                thread, [HumanMessage("again")], if_busy="reject"
            )
            assert isinstance([e async for e in second.read()][-1], RunFinished)
            await other.threads.delete(thread)
