"""The call journal behaves the same on every store: the SQLite file, PostgreSQL, memory."""

from __future__ import annotations

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
    assert await journal.begin(key, thread_id="t", run_id="r1", tool="file_claim") is None
    again = await journal.begin(key, thread_id="t", run_id="r2", tool="file_claim")
    assert again == CallRecord(key, "started")  # cut off: the retry runs it with its key
    await journal.finish(key, '{"claim": "C1"}', True)
    done = await journal.begin(key, thread_id="t", run_id="r3", tool="file_claim")
    assert done == CallRecord(key, "done", '{"claim": "C1"}', True)


async def test_keys_are_independent(journal: CallJournal) -> None:
    first, second = uuid.uuid4().hex, uuid.uuid4().hex
    await journal.begin(first, thread_id=None, run_id=None, tool="a")
    await journal.finish(first, "one", True)
    assert await journal.begin(second, thread_id=None, run_id=None, tool="a") is None
