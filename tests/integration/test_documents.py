"""The documents store, alike in memory, in the SQLite file and on PostgreSQL: found by the
start of their id through the primary key, and every one of a kind when asked for all."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agents.state.checkpointers import open_checkpointer, sqlite_url
from agents.state.documents import Documents, MemoryDocuments, documents_for
from tests.pgkit import schema_url


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def documents(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Documents]:
    if request.param == "memory":
        yield MemoryDocuments()
        return
    if request.param == "sqlite":
        async with open_checkpointer(sqlite_url(tmp_path / "store.sqlite")) as saver:
            yield documents_for(saver)
        return
    with schema_url("docs") as url:
        async with open_checkpointer(url) as saver:
            store = documents_for(saver)
            assert type(store).__name__ == "PostgresDocuments"
            yield store


async def test_documents_are_found_by_the_start_of_their_id(documents: Documents) -> None:
    ids = ["ab12", "ab1f", "ab1", "ab2", "ab0z", "zz", "Ab1f", "ab9", "ab9f", "aba"]
    for n, doc_id in enumerate(ids):
        await documents.put("key", doc_id, {"id": doc_id}, updated=n + 1)
    await documents.put("other", "ab1f9", {"id": "ab1f9"})

    def found(docs: list[dict[str, str]]) -> list[str]:
        return sorted(d["id"] for d in docs)

    assert found(await documents.find("key", id_prefix="ab1")) == ["ab1", "ab12", "ab1f"]
    assert found(await documents.find("key", id_prefix="ab1f")) == ["ab1f"]
    assert found(await documents.find("key", id_prefix="ab")) == [
        "ab0z", "ab1", "ab12", "ab1f", "ab2", "ab9", "ab9f", "aba",
    ]  # fmt: skip
    assert await documents.find("key", id_prefix="ab3") == []
    assert found(await documents.find("key", id_prefix="ab9")) == ["ab9", "ab9f"]
    for wrong in ["", "ab%", "a_", "ab/", "ab\uffff"]:
        with pytest.raises(ValueError, match="ASCII letters and digits"):
            await documents.find("key", id_prefix=wrong)
    assert found(await documents.find("key", id_prefix="ab1", limit=1)) == ["ab1"]  # newest


async def test_a_kind_is_read_whole_when_no_limit_is_given(documents: Documents) -> None:
    for n in range(130):
        await documents.put("run", f"r{n:03d}", {"id": n}, status="RUNNING", updated=n + 1)
    await documents.put("run", "done", {"id": -1}, status="SUCCEEDED", updated=500)
    assert len(await documents.find("run", status="RUNNING")) == 100  # the default page
    every = await documents.find("run", status="RUNNING", limit=None)
    assert [d["id"] for d in every] == list(range(129, -1, -1))  # newest first
    assert await documents.count("run", status="RUNNING") == 130
    assert await documents.count("run") == 131
    assert await documents.count("key") == 0


async def test_ids_are_found_by_their_start_in_byte_order_whatever_the_collation() -> None:
    # A database whose text sorts by a language's rules (ICU en-US: ":" before the digits,
    # "A" beside "a") has "ab9f" outside ["ab9", "ab:") and "Ab1f" inside ["ab1", "ab2"):
    # a key whose id ends in 9 could not be revoked.
    with schema_url("docs") as url:
        async with open_checkpointer(url) as saver:
            async with saver.conn.connection() as conn:  # the table as such a database has it
                await conn.execute(
                    "CREATE TABLE skilldesk_documents (kind TEXT NOT NULL, "
                    'id TEXT COLLATE "en-US-x-icu" NOT NULL, owner TEXT, status TEXT, '
                    "updated DOUBLE PRECISION NOT NULL, body TEXT NOT NULL, PRIMARY KEY (kind, id))"
                )
            documents = documents_for(saver)
            for doc_id in ["ab9", "ab9f", "Ab1f", "ab1", "ab:"]:
                await documents.put("key", doc_id, {"id": doc_id})
            ids = sorted(d["id"] for d in await documents.find("key", id_prefix="ab9"))
            assert ids == ["ab9", "ab9f"]
            ids = sorted(d["id"] for d in await documents.find("key", id_prefix="ab1"))
            assert ids == ["ab1"]


async def test_pages_neither_skip_nor_repeat_documents_saved_at_the_same_time(
    documents: Documents,
) -> None:
    # 25 documents at 5 instants: pages of 4 cut through each group of the same time.
    for n in range(25):
        await documents.put("run", f"r{n:02d}", {"id": n}, status="DONE", updated=100 + n // 5)
    await documents.put("run", "other", {"id": -1}, status="WAITING", updated=500)
    seen: list[int] = []
    cursor: str | None = None
    pages = 0
    more = True
    while more:
        page, more = await documents.find_page("run", status="DONE", limit=4, after=cursor)
        seen += [d["id"] for _, d in page]
        cursor = page[-1][0]
        pages += 1
    assert pages == 7
    assert sorted(seen) == list(range(25))
    assert len(seen) == 25
    assert seen[:5] == [24, 23, 22, 21, 20]  # newest first, then by id (descending)
    whole, more = await documents.find_page("run", limit=100)
    assert (len(whole), more) == (26, False)
    middle, _ = await documents.find_page("run", status="DONE", limit=2, after=whole[3][0])
    assert [d for _, d in middle] == [whole[4][1], whole[5][1]]  # each row's cursor
    for wrong in ["yesterday r01", "nan r01", "100.0", "100.0 "]:
        with pytest.raises(ValueError, match="not a page cursor"):
            await documents.find_page("run", after=wrong)
    with pytest.raises(ValueError, match="at least one"):
        await documents.find_page("run", limit=0)


INDEXES = ["skilldesk_documents_id_c", "skilldesk_documents_owner", "skilldesk_documents_status"]


async def _valid_indexes(conn: Any) -> list[str]:
    cursor = await conn.execute(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE i.indrelid = to_regclass('skilldesk_documents') AND i.indisvalid "
        "AND c.relname <> 'skilldesk_documents_pkey' ORDER BY c.relname"
    )
    return [row["relname"] for row in await cursor.fetchall()]


async def test_an_index_is_built_while_other_processes_keep_writing() -> None:
    # A new version that adds an index starts beside processes still serving: a plain
    # CREATE INDEX queues for a lock that stops every write behind it (here, behind a
    # transaction still open) until the build is done; CONCURRENTLY lets them write.
    with schema_url("docs") as url:
        async with open_checkpointer(url) as saver:
            await documents_for(saver).put("key", "k0", {"id": "k0"})  # the table, indexed
            pool = saver.conn
            async with pool.connection() as conn:
                await conn.execute("DROP INDEX skilldesk_documents_status")
            async with await psycopg.AsyncConnection.connect(url) as open_one:
                await open_one.execute(  # a write in a transaction not yet committed
                    "INSERT INTO skilldesk_documents VALUES ('key', 'k1', NULL, NULL, 1, '{}')"
                )
                upgrade = asyncio.create_task(documents_for(saver).count("key"))
                await asyncio.sleep(0.5)  # the new version is building its index by now
                async with await psycopg.AsyncConnection.connect(url, autocommit=True) as other:
                    await other.execute("SET statement_timeout = '3s'")
                    await other.execute(
                        "INSERT INTO skilldesk_documents VALUES ('key', 'k2', NULL, NULL, 2, '{}')"
                    )  # not held up (a plain CREATE INDEX: canceled after 3 s)
                assert not upgrade.done()  # the build waits for the open transaction
                await open_one.commit()
            assert await upgrade == 3  # then it reads, every write there
            async with pool.connection() as conn:
                assert await _valid_indexes(conn) == INDEXES


async def test_an_index_whose_build_was_cut_off_is_built_again() -> None:
    with schema_url("docs") as url:
        async with open_checkpointer(url) as saver:
            await documents_for(saver).put("key", "k0", {"id": "k0"})
            async with saver.conn.connection() as conn:  # as a build killed half-way leaves it
                await conn.execute(
                    "UPDATE pg_index SET indisvalid = false "
                    "WHERE indexrelid = to_regclass('skilldesk_documents_owner')"
                )
                assert "skilldesk_documents_owner" not in await _valid_indexes(conn)
            assert await documents_for(saver).count("key") == 1  # a new process's first use
            async with saver.conn.connection() as conn:
                assert await _valid_indexes(conn) == INDEXES


async def test_the_first_requests_at_once_set_the_table_up_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each first request checked (and could build) every index again, concurrently.
    from agents.state.documents import postgres as module

    built: list[str] = []
    build = module._build_index

    async def counted(conn: Any, name: str, columns: str) -> None:
        built.append(name)
        await build(conn, name, columns)

    monkeypatch.setattr(module, "_build_index", counted)
    with schema_url("docs") as url:
        async with open_checkpointer(url) as saver:
            store = documents_for(saver)
            assert await asyncio.gather(*(store.count("key") for _ in range(5))) == [0] * 5
    assert sorted(built) == INDEXES


async def test_of_callers_adding_one_new_document_at_once_one_writes_it(
    documents: Documents,
) -> None:
    added = await asyncio.gather(
        *(
            documents.add("thread", "t-new", {"owner": who}, owner=who)
            for who in ("ana", "bo", "cy")
        )
    )
    assert sorted(added) == [False, False, True]
    kept = await documents.get("thread", "t-new")
    assert kept is not None
    winner = ("ana", "bo", "cy")[added.index(True)]
    assert kept["owner"] == winner
    assert [d["owner"] for d in await documents.find("thread", owner=winner)] == [winner]
    assert await documents.add("thread", "t-new", {"owner": "dee"}) is False
    assert (await documents.get("thread", "t-new") or {})["owner"] == winner


async def test_merges_at_once_each_keep_their_change_and_bring_back_nothing_deleted(
    documents: Documents,
) -> None:
    # Review: a merge was a read then a write: a change made in between (a title set while a
    # run ended) was written over, and a record deleted in between was written back.
    await documents.put("thread", "t", {"status": "idle"}, status="idle")
    fields = [f"f{n}" for n in range(12)]
    await asyncio.gather(*(documents.merge("thread", "t", {f: True}) for f in fields))
    kept = await documents.get("thread", "t")
    assert kept is not None
    assert sorted(k for k in kept if k.startswith("f")) == sorted(fields)

    # A change made from the document as stored when written: each sees the one before.
    counting = [
        documents.merge("thread", "t", lambda d: {"n": d.get("n", 0) + 1}) for _ in range(8)
    ]
    await asyncio.gather(*counting)
    assert (await documents.get("thread", "t") or {})["n"] == 8

    merging = [documents.merge("thread", "t", {"status": "running"}) for _ in range(6)]
    done = await asyncio.gather(*merging, documents.delete("thread", "t"))
    assert done[-1] is True
    assert await documents.get("thread", "t") is None  # whenever the merges ran
    assert await documents.find("thread", status="running") == []
    assert await documents.merge("thread", "t", {"x": 1}) is None


def test_merges_from_two_processes_at_once_each_see_the_others_change(shared_store: str) -> None:
    # Review: on SQLite a merge read, then wrote in a transaction begun at its write: another
    # process's change in between was written over (two decisions of one approval both taken).
    async def first() -> None:
        async with open_checkpointer(shared_store) as saver:
            await documents_for(saver).put("thread", "t", {"n": 0}, status="idle")

    asyncio.run(first())
    both = threading.Barrier(2)

    def count(_: int) -> None:
        def more(stored: dict[str, Any]) -> dict[str, Any]:
            time.sleep(0.005)  # between the read and the write: room for the other one's
            return {"n": stored["n"] + 1}

        async def merges() -> None:
            async with open_checkpointer(shared_store) as saver:
                documents = documents_for(saver)
                await asyncio.to_thread(both.wait, 30)
                for _ in range(15):
                    await documents.merge("thread", "t", more)

        asyncio.run(merges())

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(count, range(2)))

    async def last() -> dict[str, Any] | None:
        async with open_checkpointer(shared_store) as saver:
            return await documents_for(saver).get("thread", "t")

    assert (asyncio.run(last()) or {})["n"] == 30


async def test_a_merge_whose_change_refuses_writes_nothing_and_one_may_set_its_index(
    documents: Documents,
) -> None:
    await documents.put("run", "r", {"status": "WAITING", "thread_id": "t"}, owner="t")

    def refuse(stored: dict[str, Any]) -> dict[str, Any]:
        raise LookupError(f"not waiting: {stored['status']}")

    with pytest.raises(LookupError, match="not waiting: WAITING"):
        await documents.merge("run", "r", refuse)
    assert await documents.get("run", "r") == {"status": "WAITING", "thread_id": "t"}
    # The store goes on (no transaction left open, no lock held).
    written = await documents.merge("run", "r", {"status": "RUNNING"}, owner="t")
    assert written == {"status": "RUNNING", "thread_id": "t"}
    assert [d["status"] for d in await documents.find("run", owner="t")] == ["RUNNING"]
    assert await documents.count("run", status="RUNNING") == 1


async def test_one_owners_documents_of_a_status_are_read_by_the_owners_index(
    tmp_path: Path,
) -> None:
    # A thread's waiting approvals (every thread view asks): by the status index SQLite
    # walked every run waiting in the store, 42-50 ms with 20,000, on the event loop.
    from agents.state.documents.sql import TABLE, page_query

    async with open_checkpointer(sqlite_url(tmp_path / "store.sqlite")) as saver:
        documents = documents_for(saver)
        for n in range(50):
            await documents.put(
                "run", f"r{n}", {"thread_id": f"t{n % 5}"}, owner=f"t{n % 5}", status="WAITING"
            )
        sql, args = page_query("run", "t1", "WAITING", 100, None, "?")
        plan = " ".join(str(row) for row in saver.conn.execute(f"EXPLAIN QUERY PLAN {sql}", args))
        assert f"{TABLE}_owner" in plan, plan
        page, _ = await documents.find_page("run", owner="t1", status="WAITING", limit=100)
        assert sorted(body["thread_id"] for _, body in page) == ["t1"] * 10
