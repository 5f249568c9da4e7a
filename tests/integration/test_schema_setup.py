"""Processes started together on an empty PostgreSQL database all set its schema up: the
checkpoint tables and their migrations, the leases, the documents and their indexes, the
call journal."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from agents.state.calls import call_journal
from agents.state.checkpointers import open_checkpointer
from agents.state.documents import documents_for
from tests.pgkit import schema_url

pytestmark = pytest.mark.integration

PROCESSES = 4


async def _start(url: str) -> None:
    """What a service process does to its store at start."""
    async with open_checkpointer(url) as saver:
        await documents_for(saver).get("probe", "none")
        await call_journal(saver).get("none")


@pytest.mark.parametrize("attempt", range(3))
async def test_processes_started_together_on_an_empty_database_all_start(attempt: int) -> None:
    with schema_url() as url:
        results = await asyncio.gather(
            *(_start(url) for _ in range(PROCESSES)), return_exceptions=True
        )
        assert [r for r in results if r is not None] == []
        async with open_checkpointer(url) as saver:  # and the schema is whole
            pool = saver.conn  # type: ignore[attr-defined]
            async with pool.connection() as conn:
                cursor = await conn.execute(
                    "SELECT count(*) AS n FROM pg_index JOIN pg_class c ON c.oid = indexrelid"
                    " WHERE c.relnamespace = current_schema()::regnamespace AND NOT indisvalid"
                )
                assert (await cursor.fetchone())["n"] == 0


@pytest.mark.parametrize("attempt", range(3))
async def test_processes_setting_documents_up_together_all_build_the_indexes(attempt: int) -> None:
    with schema_url() as url:
        async with contextlib.AsyncExitStack() as stack:
            savers = [await stack.enter_async_context(open_checkpointer(url)) for _ in range(4)]
            results = await asyncio.gather(
                *(documents_for(s).get("probe", "none") for s in savers), return_exceptions=True
            )
        assert [r for r in results if r is not None] == []
