"""The call journal behaves the same on every store: the SQLite file, PostgreSQL, memory."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agents.state.call_stores import PostgresCallJournal, SqliteCallJournal, call_journal
from agents.state.calls import CallJournal, CallRecord, Claim, MemoryCallJournal
from agents.state.checkpointers import open_checkpointer
from tests.pgkit import schema_url

# The journal's clock (SQLite's, to the millisecond) against this process's.
CLOCK_S = 0.002
# The table as the first journals made it (no request, no owner).
OLD_TABLE = (
    "CREATE TABLE skilldesk_calls (key TEXT PRIMARY KEY, status TEXT NOT NULL,"
    " content TEXT, ok {ok}, thread_id TEXT, run_id TEXT, tool TEXT NOT NULL,"
    " created {time} NOT NULL, updated {time} NOT NULL)"
)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with schema_url("calls") as url:
        yield url


def store_url(store: str, tmp_path: Path, postgres_url: str) -> str:
    """The checkpoint URL of ``store`` ("sqlite" or "postgres") for a test."""
    return f"sqlite:///{tmp_path / 'calls.sqlite'}" if store == "sqlite" else postgres_url


@asynccontextmanager
async def opened(store: str, tmp_path: Path) -> AsyncIterator[CallJournal]:
    """The journal of ``store``: "sqlite", "postgres" (a schema of its own) or "memory"."""
    if store == "memory":
        yield MemoryCallJournal()
        return
    with schema_url("calls") as postgres:
        async with open_checkpointer(store_url(store, tmp_path, postgres)) as saver:
            made = call_journal(saver)
            assert isinstance(made, SqliteCallJournal if store == "sqlite" else PostgresCallJournal)
            yield made


@pytest.fixture(params=["sqlite", "postgres", "memory"])
async def journal(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[CallJournal]:
    async with opened(request.param, tmp_path) as made:
        yield made


@pytest.fixture(params=["sqlite", "postgres"])
async def database_journal(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[CallJournal]:
    """A journal in a database (whose clock is not the caller's)."""
    async with opened(request.param, tmp_path) as made:
        yield made


def claimed(found: Claim | CallRecord) -> Claim:
    assert isinstance(found, Claim), found
    return found


def standing(found: Claim | CallRecord) -> CallRecord:
    assert isinstance(found, CallRecord), found
    return found


async def test_a_call_is_recorded_once_and_its_result_found_again(journal: CallJournal) -> None:
    key = uuid.uuid4().hex
    before = time.time()
    mine = claimed(await journal.begin(key, thread_id="t", run_id="r1", tool="file_claim"))
    assert (mine.key, len(mine.owner)) == (key, 32)
    again = standing(await journal.begin(key, thread_id="t", run_id="r2", tool="file_claim"))
    # Under way, and heard of: not taken over.
    assert (again.status, again.request, again.owner) == ("started", None, mine.owner)
    assert before - CLOCK_S <= again.created == again.updated <= time.time() + CLOCK_S
    assert await journal.finish(mine, '{"claim": "C1"}', True)
    done = standing(await journal.begin(key, thread_id="t", run_id="r3", tool="file_claim"))
    assert (done.status, done.content, done.ok) == ("done", '{"claim": "C1"}', True)
    assert await journal.get(key) == done


async def test_a_failed_or_silent_call_is_taken_over_by_one_claimant(journal: CallJournal) -> None:
    key = uuid.uuid4().hex
    asked: dict[str, Any] = {"thread_id": None, "run_id": None, "tool": "pay"}
    first = claimed(await journal.begin(key, **asked, request="pay:a"))
    found = await journal.get(key)
    assert found is not None
    assert (found.status, found.request, found.owner) == ("started", "pay:a", first.owner)
    assert await journal.fail(first)
    other = standing(await journal.begin(key, **asked, request="pay:b"))  # another request
    assert other.status == "failed"
    claims = [await journal.begin(key, **asked, request="pay:a") for _ in range(2)]
    second = claimed(claims[0])  # the first takes it over
    assert standing(claims[1]).status == "started"  # the second finds it under way
    assert second.owner != first.owner
    # Silent for a while (its process died): taken over; heard of since: not.
    mine = {**asked, "request": "pay:a"}
    assert isinstance(await journal.begin(key, **mine, silent_s=60), CallRecord)
    await asyncio.sleep(0.05)
    third = claimed(await journal.begin(key, **mine, silent_s=0.01))
    taken = await journal.get(key)
    assert taken is not None
    assert (taken.status, taken.owner) == ("started", third.owner)
    await asyncio.sleep(0.01)
    assert await journal.touch(third)
    touched = await journal.get(key)
    assert touched is not None
    assert touched.updated > taken.updated


@pytest.mark.parametrize("late_end", ["fail", "finish"])
async def test_a_late_end_from_a_call_taken_over_leaves_the_new_claims_record(
    journal: CallJournal, late_end: str
) -> None:
    # The first claimant's beats were lost (a saturated pool, a database blip) for long
    # enough that another process took its call over; its end, when it comes, must not
    # write over the claim that stands (a "failed" there let a third run happen).
    key = uuid.uuid4().hex
    asked: dict[str, Any] = {"thread_id": "t", "run_id": None, "tool": "pay", "request": "pay:a"}
    first = claimed(await journal.begin(key, **asked))
    await asyncio.sleep(0.05)
    second = claimed(await journal.begin(key, **asked, silent_s=0.01))

    async def late(claim: Claim) -> bool:
        if late_end == "fail":
            return await journal.fail(claim, "error (tool_failed): the bank timed out")
        return await journal.finish(claim, '{"paid": "by the first"}', True)

    assert not await journal.touch(first)  # its beat finds the call taken over
    assert not await late(first)
    under_way = await journal.get(key)
    assert under_way is not None
    assert (under_way.status, under_way.content, under_way.owner) == (
        "started",
        None,
        second.owner,
    )
    assert await journal.finish(second, '{"paid": "by the second"}', True)
    assert not await late(first)  # after the second's end, too
    done = standing(await journal.begin(key, **asked, silent_s=0.01))
    assert (done.status, done.content, done.ok, done.owner) == (
        "done",
        '{"paid": "by the second"}',
        True,
        second.owner,
    )
    assert not await journal.touch(second)  # ended: nothing left to beat


async def test_times_are_the_databases_clock_not_the_callers(
    database_journal: CallJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hosts whose clocks are a minute apart: a call under way on the one behind was taken
    # over at once by the other, as if silent for a minute.
    journal, key = database_journal, uuid.uuid4().hex
    asked: dict[str, Any] = {"thread_id": None, "run_id": None, "tool": "pay"}
    right = time.time()
    with monkeypatch.context() as behind:
        behind.setattr(time, "time", lambda: right - 60)
        mine = claimed(await journal.begin(key, **asked))
        assert await journal.touch(mine)
    found = await journal.get(key)
    assert found is not None
    assert right - 1 <= found.created <= found.updated <= time.time() + CLOCK_S
    with monkeypatch.context() as ahead:  # and a host a minute ahead does not take it over
        ahead.setattr(time, "time", lambda: right + 60)
        assert standing(await journal.begin(key, **asked, silent_s=6)).owner == mine.owner


async def test_keys_are_independent(journal: CallJournal) -> None:
    first, second = uuid.uuid4().hex, uuid.uuid4().hex
    mine = claimed(await journal.begin(first, thread_id=None, run_id=None, tool="a"))
    assert await journal.finish(mine, "one", True)
    assert isinstance(await journal.begin(second, thread_id=None, run_id=None, tool="a"), Claim)


async def test_forgotten_keys_are_deleted_and_the_others_kept(journal: CallJournal) -> None:
    for key in ("a", "b", "c"):
        claim = claimed(await journal.begin(key, thread_id="t", run_id="r", tool="x"))
        assert await journal.finish(claim, key, True)
    await journal.forget(["a", "c", "never-recorded"])
    await journal.forget([])
    assert await journal.get("a") is None
    assert await journal.get("c") is None
    kept = await journal.get("b")
    assert kept is not None
    assert kept.content == "b"
    # A key forgotten is new again: the next claim on it makes the call.
    assert isinstance(await journal.begin("a", thread_id="t", run_id="r", tool="x"), Claim)


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
async def test_a_journal_from_before_requests_and_owners_were_kept_is_read_and_fenced(
    store: str, tmp_path: Path, postgres_url: str
) -> None:
    async with open_checkpointer(store_url(store, tmp_path, postgres_url)) as saver:
        old = [
            OLD_TABLE.format(ok="INTEGER", time="REAL"),
            "INSERT INTO skilldesk_calls VALUES ('k', 'done', 'C1', 1, 't', 'r', 'a', 1, 2)",
            "INSERT INTO skilldesk_calls VALUES ('s', 'started', NULL, NULL, 't', 'r', 'a', 1, 2)",
        ]
        if store == "sqlite":
            with saver.conn as conn:  # type: ignore[attr-defined]
                for statement in old:
                    conn.execute(statement)
        else:
            with psycopg.connect(postgres_url, autocommit=True) as conn:
                old[0] = OLD_TABLE.format(ok="BOOLEAN", time="DOUBLE PRECISION")
                old[1] = old[1].replace("1, 't'", "true, 't'")
                for statement in old:
                    conn.execute(statement)
        journal = call_journal(saver)
        assert await journal.get("k") == CallRecord("k", "done", "C1", True, None, 1.0, 2.0)
        mine = claimed(
            await journal.begin("k2", thread_id=None, run_id=None, tool="a", request="a:1")
        )
        found = await journal.get("k2")
        assert found is not None
        assert (found.request, found.owner) == ("a:1", mine.owner)
        # A call under way when the journal was older, silent since: taken over, fenced.
        taken = claimed(await journal.begin("s", thread_id=None, run_id=None, tool="a", silent_s=6))
        assert not await journal.fail(Claim("s", "not its owner"))
        assert await journal.finish(taken, "C2", True)
        ended = await journal.get("s")
        assert ended is not None
        assert (ended.status, ended.content, ended.owner) == ("done", "C2", taken.owner)
