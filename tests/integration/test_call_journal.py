"""The call journal behaves the same on every store: the SQLite file, PostgreSQL, memory."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agents.state.calls import (
    CallJournal,
    CallRecord,
    MemoryCallJournal,
    PostgresCallJournal,
    SqliteCallJournal,
    call_journal,
)
from agents.state.checkpointers import open_checkpointer
from agents.state.sqlite_saver import ThreadedSqliteSaver

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(params=["sqlite", "postgres", "memory"])
async def journal(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[CallJournal]:
    if request.param == "memory":
        yield MemoryCallJournal()
        return
    url = f"sqlite:///{tmp_path / 'calls.sqlite'}" if request.param == "sqlite" else POSTGRES_URL
    async with open_checkpointer(url) as saver:
        made = call_journal(saver)
        kind = SqliteCallJournal if request.param == "sqlite" else PostgresCallJournal
        assert isinstance(made, kind)
        yield made


async def test_a_call_is_recorded_once_and_its_result_found_again(journal: CallJournal) -> None:
    key = uuid.uuid4().hex
    before = time.time()
    assert await journal.begin(key, thread_id="t", run_id="r1", tool="file_claim") is None
    again = await journal.begin(key, thread_id="t", run_id="r2", tool="file_claim")
    assert again is not None
    assert (again.status, again.request) == ("started", None)  # cut off: run again, same key
    assert before <= again.created <= time.time()
    await journal.finish(key, '{"claim": "C1"}', True)
    done = await journal.begin(key, thread_id="t", run_id="r3", tool="file_claim")
    assert done == CallRecord(key, "done", '{"claim": "C1"}', True, None, again.created)
    assert await journal.get(key) == done


async def test_a_call_names_its_request_and_a_failure_is_recorded(journal: CallJournal) -> None:
    key = uuid.uuid4().hex
    assert await journal.get(key) is None
    await journal.begin(key, thread_id=None, run_id=None, tool="pay", request="pay:abc")
    found = await journal.get(key)
    assert found is not None
    assert (found.status, found.request) == ("started", "pay:abc")
    await journal.fail(key)
    failed = await journal.begin(key, thread_id=None, run_id=None, tool="pay", request="pay:abc")
    assert failed is not None
    assert (failed.status, failed.content, failed.ok) == ("failed", None, None)


async def test_a_journal_from_before_requests_were_kept_is_read_and_written(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'calls.sqlite'}"
    async with open_checkpointer(url) as saver:
        assert isinstance(saver, ThreadedSqliteSaver)
        with saver.conn as conn:  # the table as the journal made it before
            conn.execute(
                "CREATE TABLE skilldesk_calls (key TEXT PRIMARY KEY, status TEXT NOT NULL,"
                " content TEXT, ok INTEGER, thread_id TEXT, run_id TEXT, tool TEXT NOT NULL,"
                " created REAL NOT NULL, updated REAL NOT NULL)"
            )
            conn.execute(
                "INSERT INTO skilldesk_calls VALUES ('k', 'done', 'C1', 1, 't', 'r', 'a', 1, 2)"
            )
        journal = call_journal(saver)
        assert await journal.get("k") == CallRecord("k", "done", "C1", True, None, 1.0)
        await journal.begin("k2", thread_id=None, run_id=None, tool="a", request="a:1")
        found = await journal.get("k2")
        assert found is not None
        assert found.request == "a:1"


async def test_keys_are_independent(journal: CallJournal) -> None:
    first, second = uuid.uuid4().hex, uuid.uuid4().hex
    await journal.begin(first, thread_id=None, run_id=None, tool="a")
    await journal.finish(first, "one", True)
    assert await journal.begin(second, thread_id=None, run_id=None, tool="a") is None
