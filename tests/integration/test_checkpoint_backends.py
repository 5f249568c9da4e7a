"""The same conversation tests on every checkpoint backend: SQLite file and PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from agents.events import RunFinished
from agents.state.checkpointers import open_checkpointer
from app.services import open_services
from tests.fakellm import FakeLLM, Reply
from tests.pgkit import schema_url

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(params=["sqlite", "postgres"])
def backend_settings(request: pytest.FixtureRequest, model_settings: Any) -> Any:
    if request.param == "sqlite":
        return model_settings
    return model_settings.model_copy(update={"checkpoint_url": POSTGRES_URL})


async def test_conversation_survives_a_restart(backend_settings: Any, fake_llm: FakeLLM) -> None:
    thread = f"restart-{uuid.uuid4().hex}"
    fake_llm.script(Reply(content="Noted: blue."), Reply(content="You said blue."))
    async with open_services(backend_settings) as services:
        first = await services.conversations.run(thread, [HumanMessage("My colour is blue.")])
        assert isinstance(first, RunFinished)
    # A new process would open the store afresh; so do we.
    async with open_services(backend_settings) as services:
        second = await services.conversations.run(thread, [HumanMessage("What is my colour?")])
        assert isinstance(second, RunFinished)
        history = await services.conversations.history(thread)
    assert second.message.content == "You said blue."
    assert [m.content for m in history] == [
        "My colour is blue.",
        "Noted: blue.",
        "What is my colour?",
        "You said blue.",
    ]
    assert [m["content"] for m in fake_llm.requests[1]["messages"][1:3]] == [
        "My colour is blue.",
        "Noted: blue.",
    ]


async def test_usage_accumulates_per_thread(backend_settings: Any, fake_llm: FakeLLM) -> None:
    thread = f"usage-{uuid.uuid4().hex}"
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    fake_llm.script(Reply(content="a", usage=usage), Reply(content="b", usage=usage))
    async with open_services(backend_settings) as services:
        one = await services.conversations.run(thread, [HumanMessage("one")])
        await services.conversations.run(thread, [HumanMessage("two")])
        total = await services.conversations.usage(thread)
    assert isinstance(one, RunFinished)
    assert one.usage == {
        "input_tokens": 10,
        "output_tokens": 5,
        "total_tokens": 15,
        "model_calls": 1,
    }
    assert total == {"input_tokens": 20, "output_tokens": 10, "total_tokens": 30, "model_calls": 2}


async def test_unreachable_postgres_is_a_clear_config_error(model_settings: Any) -> None:
    from agents.errors import ConfigError

    bad = model_settings.model_copy(
        update={"checkpoint_url": "postgresql://postgres@127.0.0.1:1/test"}
    )
    with pytest.raises(ConfigError, match="cannot connect to PostgreSQL"):
        async with open_services(bad):
            pass


async def test_two_processes_on_postgres_never_run_one_thread_at_once(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    import asyncio

    settings = model_settings.model_copy(update={"checkpoint_url": POSTGRES_URL})
    thread = f"shared-{uuid.uuid4().hex}"
    fake_llm.script(Reply(content="answer one", delay=0.3), Reply(content="answer two", delay=0.3))
    # Two service instances stand for two processes behind a load balancer.
    async with open_services(settings) as first, open_services(settings) as second:
        await asyncio.gather(
            first.conversations.run(thread, [HumanMessage("question one")]),
            second.conversations.run(thread, [HumanMessage("question two")]),
        )
        history = await first.conversations.history(thread)
    assert sorted(m.text for m in history) == [
        "answer one",
        "answer two",
        "question one",
        "question two",
    ]


async def test_a_file_written_by_langgraphs_async_sqlite_saver_opens_and_continues(
    model_settings: Any, fake_llm: FakeLLM
) -> None:
    # Earlier versions wrote checkpoints through aiosqlite's AsyncSqliteSaver; their files
    # must keep working with the threaded saver.
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from agents.graph.builder import build_graph
    from agents.models import ModelGateway

    path = model_settings.resolved_checkpoint_url.removeprefix("sqlite:///")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fake_llm.script(Reply(content="Noted: green."), Reply(content="You said green."))
    gateway = ModelGateway(model_settings.models())
    async with AsyncSqliteSaver.from_conn_string(path) as old_saver:
        graph = build_graph(gateway, old_saver)
        await graph.ainvoke(
            {"messages": [HumanMessage("My colour is green.")]},
            {"configurable": {"thread_id": "old-file"}},
        )
    await gateway.aclose()
    async with open_services(model_settings) as services:
        answer = await services.conversations.run("old-file", [HumanMessage("My colour?")])
        history = await services.conversations.history("old-file")
    assert isinstance(answer, RunFinished)
    assert [m.content for m in history] == [
        "My colour is green.",
        "Noted: green.",
        "My colour?",
        "You said green.",
    ]


async def test_fifty_runs_hold_their_threads_at_once_without_emptying_the_pool() -> None:
    # A lease holds no connection: with a pool of 10, 50 runs of 50 threads hold their
    # threads together, and the store still answers while they do.
    from agents.state.checkpointers import open_checkpointer
    from agents.state.leases import thread_lock

    async with open_checkpointer(POSTGRES_URL) as saver:
        held = 0
        all_held = asyncio.Event()

        async def run(n: int) -> None:
            nonlocal held
            async with thread_lock(saver, f"lease-{uuid.uuid4().hex}-{n}"):
                held += 1
                if held == 50:
                    all_held.set()
                await asyncio.wait_for(all_held.wait(), 20)
                await saver.aget_tuple({"configurable": {"thread_id": f"probe-{n}"}})

        await asyncio.wait_for(asyncio.gather(*[run(n) for n in range(50)]), 30)
    assert held == 50


async def test_a_lease_waits_for_its_holder_and_an_expired_one_is_taken_over() -> None:
    from agents.state.checkpointers import open_checkpointer
    from agents.state.leases import LEASES, thread_lock

    thread = f"lease-{uuid.uuid4().hex}"
    async with open_checkpointer(POSTGRES_URL) as saver:
        async with thread_lock(saver, thread):
            with pytest.raises(TimeoutError):  # a live holder keeps the thread
                await asyncio.wait_for(_enter(saver, thread), 0.5)
        await asyncio.wait_for(_enter(saver, thread), 5)  # released: free at once
        async with saver.conn.connection() as conn:  # type: ignore[attr-defined]
            await conn.execute(  # a process that died mid-run: its lease expired
                f"INSERT INTO {LEASES} VALUES (%s, 'dead:1:x', "
                "extract(epoch from clock_timestamp()) - 1)",
                (thread,),
            )
        await asyncio.wait_for(_enter(saver, thread), 5)


async def _enter(saver: Any, thread: str) -> None:
    from agents.state.leases import thread_lock

    async with thread_lock(saver, thread):
        pass


async def test_postgres_checkpoint_operations_do_not_wait_for_each_other() -> None:
    """A write held up in the database (a table lock taken elsewhere) does not hold up a
    read of another thread: each operation has a pooled connection of its own."""
    with schema_url("cp") as url:
        async with open_checkpointer(url) as saver:
            config = {"configurable": {"thread_id": "a", "checkpoint_ns": ""}}
            stored = await saver.aput(config, empty_checkpoint(), {}, {})
            async with await psycopg.AsyncConnection.connect(url) as blocker:
                await blocker.execute("BEGIN")
                await blocker.execute("LOCK TABLE checkpoint_writes IN EXCLUSIVE MODE")
                held = asyncio.create_task(saver.aput_writes(stored, [("x", 1)], "task-1"))
                await asyncio.sleep(0.3)
                assert not held.done()  # waiting for the table lock in the database
                other = {"configurable": {"thread_id": "b", "checkpoint_ns": ""}}
                assert await asyncio.wait_for(saver.aget_tuple(other), timeout=3) is None
                await blocker.execute("ROLLBACK")
            await asyncio.wait_for(held, timeout=5)


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _answer(state: Chat) -> dict[str, Any]:
    return {"messages": [AIMessage(f"answer {len(state['messages'])}")]}


async def test_postgres_encodes_and_decodes_a_history_once_and_plain_savers_read_it() -> None:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    builder = StateGraph(Chat)
    builder.add_node("answer", _answer)
    builder.add_edge(START, "answer")
    config: Any = {"configurable": {"thread_id": "long"}}
    with schema_url("codec") as url:
        async with open_checkpointer(url) as saver:
            graph = builder.compile(checkpointer=saver)
            for n in range(6):
                await graph.ainvoke({"messages": [HumanMessage(f"question {n}")]}, config)
            serde, seen = saver.serde, []
            dumps, loads = serde.dumps_typed, serde.loads_typed

            def dumped(value: Any) -> Any:
                long = isinstance(value, list) and len(value) > 2
                seen.append(("dump", "history" if long else type(value).__name__))
                return dumps(value)

            def loaded(data: Any) -> Any:
                value = loads(data)
                seen.append(("load", type(value).__name__))
                return value

            serde.dumps_typed, serde.loads_typed = dumped, loaded  # type: ignore[method-assign]
            await graph.ainvoke({"messages": [HumanMessage("question 6")]}, config)
            # Each new message encoded once, the 14-message history never whole...
            assert ("dump", "history") not in seen
            assert seen.count(("dump", "HumanMessage")) == 1
            assert seen.count(("dump", "AIMessage")) == 1
            assert ("load", "list") not in seen  # ...nor decoded: the bytes it wrote
        async with AsyncPostgresSaver.from_conn_string(url) as plain:
            state = await builder.compile(checkpointer=plain).aget_state(config)
    texts = [m.text for m in state.values["messages"]]
    assert texts[-2:] == ["question 6", "answer 13"]
    assert len(texts) == 14
