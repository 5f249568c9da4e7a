"""Workflow engines of several processes on one PostgreSQL database: a run under way is its
process's alone (a lease it renews); a run whose process died is resumed by exactly one of
the others."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import psycopg
import pytest

from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.state.checkpointers import open_checkpointer
from agents.state.documents import documents_for
from agents.workflows.engine import WorkflowEngine
from agents.workflows.leases import LEASES, RunLeases
from tests.fakellm import FakeLLM, Reply
from tests.pgkit import schema_url
from tests.workflowkit import Workflows

GREET = """
name: greet
description: One model call.
nodes:
  - {id: write, kind: llm, prompt: Say hello.}
outputs: {message: "{{ nodes.write.output }}"}
"""
GREET_THEN_NOTE = """
name: greet-then-note
description: One model call, then a note of it.
nodes:
  - {id: write, kind: llm, prompt: Say hello., next: note}
  - {id: note, kind: set, values: {said: "{{ nodes.write.output }}"}}
"""


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with schema_url("leases") as url:
        yield url


@asynccontextmanager
async def process(url: str, gateway: ModelGateway, lease_s: float) -> AsyncIterator[WorkflowEngine]:
    """The workflow engine of one service process (a checkpointer of its own)."""
    async with open_checkpointer(url) as saver:
        engine = WorkflowEngine(
            Workflows(GREET, GREET_THEN_NOTE),
            saver,
            skills=None,
            gateway=gateway,
            prompts=Prompts(),
            documents=documents_for(saver),
            lease_s=lease_s,
        )
        try:
            yield engine
        finally:
            engine.leases.abandon()


async def model_asked(fake_llm: FakeLLM, times: int) -> None:
    deadline = time.monotonic() + 20
    while len(fake_llm.requests) < times:
        assert time.monotonic() < deadline, "the model was never asked"
        await asyncio.sleep(0.05)


async def test_a_run_under_way_is_left_to_its_process_past_its_first_lease(
    postgres_url: str, gateway: ModelGateway, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Hello.", delay=3))
    async with (
        process(postgres_url, gateway, lease_s=1) as a,
        process(postgres_url, gateway, lease_s=1) as b,
    ):
        running = asyncio.create_task(a.run("greet", {}))
        await model_asked(fake_llm, 1)
        for _ in range(5):  # 2.5 s: the lease of 1 s holds, renewed
            assert await b.orphans() == []
            assert await b.resume_orphans() == []
            await asyncio.sleep(0.5)
        record = await running
    assert record["status"] == "SUCCEEDED"
    assert record["outputs"] == {"message": "Hello."}
    assert len(fake_llm.requests) == 1  # B never ran it again


async def test_a_run_whose_process_died_is_resumed_by_exactly_one_of_the_others(
    postgres_url: str, gateway: ModelGateway, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Too late.", delay=10), Reply(content="Hello."))
    async with (
        process(postgres_url, gateway, lease_s=1) as a,
        process(postgres_url, gateway, lease_s=1) as b,
        process(postgres_url, gateway, lease_s=1) as c,
    ):
        running = asyncio.create_task(a.run("greet", {}))
        await model_asked(fake_llm, 1)
        (run_id,) = [r["id"] for r in await b.list_runs(status="RUNNING")]
        running.cancel()  # A dies mid-call: its record says RUNNING, its lease is left
        await asyncio.gather(running, return_exceptions=True)
        a.leases.abandon()
        resumed = await asyncio.gather(b.resume_orphans(), c.resume_orphans())
        record = await b.get_run(run_id)
    assert sorted(resumed) == [[], [run_id]]
    assert record["status"] == "SUCCEEDED"
    assert record["outputs"] == {"message": "Hello."}
    assert len(fake_llm.requests) == 2  # A's call, cut off, and one survivor's


async def test_a_run_whose_driver_was_cancelled_is_let_go_and_resumed(
    postgres_url: str, gateway: ModelGateway, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Too late.", delay=10), Reply(content="Hello."))
    async with (
        process(postgres_url, gateway, lease_s=1) as a,
        process(postgres_url, gateway, lease_s=1) as b,
    ):
        running = asyncio.create_task(a.run("greet", {}))  # as a request's task
        await model_asked(fake_llm, 1)
        running.cancel()  # the request went away; the process lives on
        await asyncio.gather(running, return_exceptions=True)
        deadline = time.monotonic() + 5
        while not (resumed := await b.resume_orphans()):
            assert time.monotonic() < deadline, "the run was never let go"
            await asyncio.sleep(0.2)
        (run_id,) = resumed
        record = await b.get_run(run_id)
    assert record["status"] == "SUCCEEDED"
    assert len(fake_llm.requests) == 2


async def test_a_run_held_on_another_machine_is_resumed_once_its_lease_expires(
    postgres_url: str, gateway: ModelGateway, fake_llm: FakeLLM
) -> None:
    fake_llm.script(Reply(content="Too late.", delay=10))
    async with (
        process(postgres_url, gateway, lease_s=1) as a,
        process(postgres_url, gateway, lease_s=1) as b,
    ):
        running = asyncio.create_task(a.run("greet", {}))
        await model_asked(fake_llm, 1)
        a.leases.abandon()  # A stops renewing, its lease left behind
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        # As if A ran on another machine (its pid says nothing here), for 1.5 s more.
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(
                f"UPDATE {LEASES} SET holder = 'elsewhere:1:abcd1234', "
                "expires = extract(epoch from clock_timestamp()) + 1.5"
            )
        (run_id,) = [r["id"] for r in await b.list_runs(status="RUNNING")]
        assert await b.orphans() == []
        assert await b.resume_orphans([run_id]) == []  # a claim fails too
        await asyncio.sleep(2)
        fake_llm.script(Reply(content="Hello."))
        assert await b.resume_orphans() == [run_id]
        record = await b.get_run(run_id)
    assert record["status"] == "SUCCEEDED"
    assert len(fake_llm.requests) == 2


async def test_a_driver_whose_lease_another_process_claimed_is_cancelled(
    postgres_url: str,
) -> None:
    async with (
        open_checkpointer(postgres_url) as saver_a,
        open_checkpointer(postgres_url) as saver_b,
    ):
        a, b = RunLeases(saver_a, lease_s=0.6), RunLeases(saver_b, lease_s=0.6)
        holding = asyncio.Event()

        async def drive() -> None:
            await a.take("run-1")
            holding.set()
            await asyncio.sleep(30)  # the run under way

        driver = asyncio.create_task(drive())
        await holding.wait()
        # A was silent past its lease (a long pause): B claimed the run meanwhile.
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"UPDATE {LEASES} SET expires = 0")
        assert await b.claim("run-1")
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(driver, 5)  # A's next renewal finds it lost
        assert not a.holds("run-1")
        assert await a.live(["run-1"]) == {"run-1"}  # B's
        a.abandon()
        b.abandon()


async def test_a_run_another_process_cancels_stops_at_its_next_node(
    postgres_url: str, gateway: ModelGateway, fake_llm: FakeLLM
) -> None:
    # QA: a run under way could not be cancelled, in its process or any other.
    fake_llm.script(Reply(content="Hello.", delay=2))
    async with (
        process(postgres_url, gateway, lease_s=30) as a,  # no look at cancels meanwhile
        process(postgres_url, gateway, lease_s=30) as b,
    ):
        running = asyncio.create_task(a.run("greet-then-note", {}))
        await model_asked(fake_llm, 1)
        (run_id,) = [r["id"] for r in await b.list_runs(status="RUNNING")]
        stopped = await b.stop(run_id, "cancelled by ann")
        ran = await running
    assert stopped["status"] == "CANCELLED"
    assert stopped["error"] == "cancelled by ann"
    assert stopped["nodes"]["write"]["output"] == "Hello."  # the node under way ended
    assert "note" not in stopped["nodes"]  # the next one never began
    assert ran == stopped
    assert len(fake_llm.requests) == 1
