"""Processes started together on an empty PostgreSQL database all set its schema up: the
checkpoint tables and their migrations, the leases, the documents and their indexes, the
call journal."""

from __future__ import annotations

import asyncio
import contextlib

import psycopg
import pytest
from structlog.testing import capture_logs

from agents.errors import ConfigError
from agents.state import schema_lock
from agents.state.calls import call_journal
from agents.state.checkpointers import open_checkpointer
from agents.state.documents import documents_for
from tests.pgkit import POSTGRES, schema_url

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


async def test_a_schema_lock_held_by_a_stuck_process_is_warned_of_then_given_up_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(schema_lock, "WARN_AFTER_S", 0.2, raising=False)
    monkeypatch.setattr(schema_lock, "GIVE_UP_AFTER_S", 1.0, raising=False)
    with schema_url() as url, psycopg.connect(url, autocommit=True) as stuck:
        # A process hung mid set-up: it holds the schema's lock and never lets go.
        stuck.execute(
            "SELECT pg_advisory_lock(hashtext(%s || current_schema()))", (schema_lock._KEY,)
        )
        schema = url.rpartition("%3D")[2]
        with capture_logs() as logs, pytest.raises(ConfigError) as raised:
            await asyncio.wait_for(_start(url), timeout=10)  # not forever
    error = str(raised.value)
    assert "SKILLDESK_CHECKPOINT_URL" in error
    assert schema in error
    assert "pg_locks" in error
    assert "advisory" in error
    waiting = [e for e in logs if e["event"] == "schema.setup_waiting"]
    assert len(waiting) == 1
    assert waiting[0]["log_level"] == "warning"
    assert waiting[0]["schema"] == schema
    assert "another process" in waiting[0]["reason"]


async def test_a_search_path_naming_no_schema_stops_start_up_at_once_saying_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # current_schema() was NULL, so the lock (keyed by it) was never taken: start-up waited
    # the whole give-up time, then blamed "another process" holding it.
    monkeypatch.setattr(schema_lock, "GIVE_UP_AFTER_S", 5.0, raising=False)
    url = f"{POSTGRES}?options=-csearch_path%3Dno_such_schema_here"
    with pytest.raises(ConfigError) as raised:
        await asyncio.wait_for(_start(url), timeout=3)
    error = str(raised.value)
    assert "SKILLDESK_CHECKPOINT_URL" in error
    assert "no_such_schema_here" in error
    assert "names no schema that exists" in error
