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
from agents.events import RunFailed, RunFinished
from agents.state.leases import LEASES
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


async def test_a_run_whose_thread_another_process_took_over_stops_and_says_so(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    # Its lease lapsed under it (renewals failed a whole lease) and another process took the
    # thread: the run went on writing the thread beside the other's run, unnoticed.
    thread = f"lost-{uuid.uuid4().hex[:8]}"
    fake_llm.script(Reply(content="slow", delay=5), Reply(content="hi"), Reply(content="yes"))
    with schema_url() as url:
        update = {"checkpoint_url": url, "run_lease_s": 1}
        settings = model_settings.model_copy(update=update)
        async with open_services(settings, background=False) as services:
            feed = services.conversations.start(thread, [HumanMessage("hello")])
            saver = services.threads.saver
            async with saver.conn.connection() as conn:
                for _ in range(200):  # until its run holds the thread
                    cursor = await conn.execute(
                        f"UPDATE {LEASES} SET holder = %s, "
                        "expires = extract(epoch from clock_timestamp()) + 60 "
                        "WHERE thread_id = %s",
                        ("elsewhere:1:aaaa", thread),
                    )
                    if cursor.rowcount:
                        break
                    await asyncio.sleep(0.02)
            events = await asyncio.wait_for(_read(feed), 3)  # not the model's 5 s
            assert isinstance(events[-1], RunFailed)
            assert events[-1].code == "thread_taken_over"
            assert "another process took the thread over" in events[-1].message
            assert feed.status == "failed"
            async with saver.conn.connection() as conn:  # the other's lease left as it is
                await conn.execute(f"DELETE FROM {LEASES} WHERE thread_id = %s", (thread,))
            # The thread's next run takes the one stopped up first (its record says running).
            again = services.conversations.start(thread, [HumanMessage("again")])
            assert isinstance((await _read(again))[-1], RunFinished)
            history = await services.conversations.history(thread)
            assert [m.content for m in history] == ["hello", "hi", "again", "yes"]


async def _read(feed: Any) -> list[Any]:
    return [e async for e in feed.read()]
