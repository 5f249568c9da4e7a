"""The call journal behaves the same on every store: the SQLite file, PostgreSQL, memory."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

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
    assert again is not None  # under way, and heard of: not taken over
    assert (again.status, again.request) == ("started", None)
    assert before <= again.created == again.updated <= time.time()
    await journal.finish(key, '{"claim": "C1"}', True)
    done = await journal.begin(key, thread_id="t", run_id="r3", tool="file_claim")
    assert done is not None
    assert (done.status, done.content, done.ok) == ("done", '{"claim": "C1"}', True)
    assert await journal.get(key) == done


async def test_a_failed_or_silent_call_is_taken_over_by_one_claimant(journal: CallJournal) -> None:
    key = uuid.uuid4().hex
    asked: dict[str, Any] = {"thread_id": None, "run_id": None, "tool": "pay"}
    assert await journal.begin(key, **asked, request="pay:a") is None
    found = await journal.get(key)
    assert found is not None
    assert (found.status, found.request) == ("started", "pay:a")
    await journal.fail(key)
    other = await journal.begin(key, **asked, request="pay:b")  # another request: not its
    assert other is not None
    assert other.status == "failed"
    claims = [await journal.begin(key, **asked, request="pay:a") for _ in range(2)]
    assert claims[0] is None  # the first takes it over
    assert claims[1] is not None  # the second finds it under way
    assert claims[1].status == "started"
    # Silent since a time (its process died): taken over; heard of since: not.
    taken = await journal.get(key)
    assert taken is not None
    mine = {**asked, "request": "pay:a"}
    assert await journal.begin(key, **mine, stale_before=taken.updated - 1) is not None
    assert await journal.begin(key, **mine, stale_before=taken.updated + 1) is None
    await journal.touch(key)
    touched = await journal.get(key)
    assert touched is not None
    assert touched.updated >= taken.updated


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
        assert await journal.get("k") == CallRecord("k", "done", "C1", True, None, 1.0, 2.0)
        await journal.begin("k2", thread_id=None, run_id=None, tool="a", request="a:1")
        found = await journal.get("k2")
        assert found is not None
        assert found.request == "a:1"


async def test_keys_are_independent(journal: CallJournal) -> None:
    first, second = uuid.uuid4().hex, uuid.uuid4().hex
    await journal.begin(first, thread_id=None, run_id=None, tool="a")
    await journal.finish(first, "one", True)
    assert await journal.begin(second, thread_id=None, run_id=None, tool="a") is None
