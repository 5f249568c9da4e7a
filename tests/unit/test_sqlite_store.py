"""The SQLite store: a short operation runs on the event loop, at once when the store's thread
has nothing in hand, once the thread is through what it has otherwise, and lets other tasks
run after it; the WAL is copied into the file by a thread and a connection of its own (no
operation waits for it), completed on the store's thread, never by a commit on the event loop,
and stays short."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from agents.state.checkpointers import open_checkpointer, sqlite_url
from agents.state.documents import SqliteDocuments
from agents.state.sqlite_saver import ThreadedSqliteSaver


async def test_a_short_operation_runs_on_the_loop_once_the_thread_is_through_its_work(
    tmp_path: Path,
) -> None:
    async with open_checkpointer(sqlite_url(tmp_path / "store.sqlite")) as saver:
        assert isinstance(saver, ThreadedSqliteSaver)
        where: list[tuple[str, str]] = []

        def note(what: str) -> None:
            where.append((what, threading.current_thread().name))

        await saver.run(note, "idle")
        gate = threading.Event()
        long = asyncio.ensure_future(saver.run_long(lambda: (gate.wait(5), note("long"))))
        behind = [asyncio.ensure_future(saver.run(note, f"behind {n}")) for n in range(3)]
        await asyncio.sleep(0.02)
        assert [w for w, _ in where] == ["idle"]  # the short ones wait for the long one
        gate.set()
        await asyncio.gather(long, *behind)
        await saver.run(note, "after")
    loop_thread = threading.current_thread().name
    assert where == [
        ("idle", loop_thread),
        ("long", "skilldesk-sqlite"),
        *[(f"behind {n}", loop_thread) for n in range(3)],  # in the order they came
        ("after", loop_thread),
    ]


def wal_frames(path: Path) -> int:
    """How many frames the WAL holds since it last started from its beginning."""
    with closing(sqlite3.connect(path)) as conn:
        (_, frames, _) = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(frames)


async def test_the_wal_is_copied_on_a_thread_of_its_own_completed_by_the_store_and_starts_again(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.sqlite"
    ran: list[tuple[str, str]] = []
    async with open_checkpointer(sqlite_url(path)) as saver:
        assert isinstance(saver, ThreadedSqliteSaver)
        (autocheckpoint,) = saver.conn.execute("PRAGMA wal_autocheckpoint").fetchone()
        assert autocheckpoint == 0  # no commit on the event loop copies the WAL
        copy, complete = saver._copy_wal, saver._complete_wal

        def copying() -> None:
            ran.append(("copy", threading.current_thread().name))
            copy()

        def completing() -> None:
            ran.append(("complete", threading.current_thread().name))
            complete()

        saver._copy_wal, saver._complete_wal = copying, completing  # type: ignore[method-assign]
        saver.wal_every_s = 3600.0  # a copy only where the test asks for one
        documents = SqliteDocuments(saver)
        body = {"text": "x" * 8000}
        for n in range(20):
            await documents.put("note", f"n{n}", body)
        # Writes that come while a copy is under way: the copy cannot take them (here a reader
        # holds the snapshot from before them, as the store's own reads do meanwhile).
        with closing(sqlite3.connect(path)) as reader:
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM sqlite_master").fetchall()
            for n in range(20):
                await documents.put("note", f"m{n}", body)
            saver.wal_every_s = 0.0
            await documents.put("note", "copy", body)  # a copy is due: the WAL thread's
            saver.wal_every_s = 3600.0
            await saver._wal_worker.drained()
            reader.rollback()
        assert ran == [("copy", "skilldesk-sqlite-wal")]
        await documents.put("note", "seen", body)  # the copy is through: the store completes it
        await documents.put("note", "after", body)  # the WAL starts again from its beginning
        frames = wal_frames(path)
    assert ran[1:] == [("complete", "skilldesk-sqlite")]
    # Never completed, the WAL would hold all 43 writes and keep growing while writes go on
    # during every copy (9.8 MB over 300 writes); started again, it holds the last write only.
    assert frames < 20, f"the WAL holds {frames} frames: it did not start again"


async def test_a_store_operation_does_not_wait_for_the_wal_being_copied(tmp_path: Path) -> None:
    async with open_checkpointer(sqlite_url(tmp_path / "store.sqlite")) as saver:
        assert isinstance(saver, ThreadedSqliteSaver)
        gate = threading.Event()
        saver._copy_wal = lambda: (gate.wait(5), None)[1]  # type: ignore[method-assign]
        saver.wal_every_s = 0.0
        documents = SqliteDocuments(saver)
        try:
            await documents.put("note", "a", {"text": "first"})  # its copy starts, and hangs
            assert saver._wal_worker.in_hand == 1
            await asyncio.wait_for(documents.put("note", "b", {"text": "second"}), 1)
            assert await documents.get("note", "b") is not None
        finally:
            gate.set()
            await saver._wal_worker.drained()


async def test_a_loop_of_short_operations_lets_other_tasks_run_between_them(
    tmp_path: Path,
) -> None:
    async with open_checkpointer(sqlite_url(tmp_path / "store.sqlite")) as saver:
        documents = SqliteDocuments(saver)
        ticks = 0
        stop = False

        async def other() -> None:
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0)

        beside = asyncio.ensure_future(other())
        await asyncio.sleep(0)
        before = ticks
        for n in range(100):  # as a fork copies a long thread's traces
            await documents.put("trace", f"t{n}", {"n": n})
        during = ticks - before
        stop = True
        await beside
    assert during >= 50, f"the other task ran {during} times during 100 operations"


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def answer(state: Chat) -> dict[str, Any]:
    return {"messages": [AIMessage(f"answer {len(state['messages'])}")]}


async def test_a_history_this_process_wrote_is_not_decoded_when_read(tmp_path: Path) -> None:
    builder = StateGraph(Chat)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    path = tmp_path / "store.sqlite"
    config: Any = {"configurable": {"thread_id": "t1"}}
    async with open_checkpointer(sqlite_url(path)) as saver:
        assert isinstance(saver, ThreadedSqliteSaver)
        graph = builder.compile(checkpointer=saver)
        decoded: list[str] = []
        loads = saver.serde.loads_typed

        def counted(data: Any) -> Any:
            value = loads(data)
            decoded.append(type(value).__name__)
            return value

        saver.serde.loads_typed = counted  # type: ignore[method-assign]
        said = [f"question {n}: {'details ' * 40}" for n in range(6)]  # a history of 6 KB
        for text in said:
            decoded.clear()
            await graph.ainvoke({"messages": [HumanMessage(text)]}, config)
        state = await graph.aget_state(config)
        assert decoded  # the checkpoints themselves (small) are decoded...
        assert "list" not in decoded  # ...not the history (10 messages, 2 KB): as written
        texts = [m.text for m in state.values["messages"]]
        assert texts == [t for n, text in enumerate(said) for t in (text, f"answer {2 * n + 1}")]
        await saver.adelete_thread("t1")
        assert (await graph.aget_state(config)).values == {}
    async with open_checkpointer(sqlite_url(path)) as fresh:  # another process: from blobs
        graph = builder.compile(checkpointer=fresh)
        await graph.ainvoke({"messages": [HumanMessage("three")]}, config)
    async with open_checkpointer(sqlite_url(path)) as fresh:
        graph = builder.compile(checkpointer=fresh)
        texts = [m.text for m in (await graph.aget_state(config)).values["messages"]]
        assert texts == ["three", "answer 1"]


async def test_a_history_is_encoded_as_serde_does_its_new_messages_only(tmp_path: Path) -> None:
    async with open_checkpointer(sqlite_url(tmp_path / "store.sqlite")) as saver:
        assert isinstance(saver, ThreadedSqliteSaver)
        serde = saver.serde
        history: list[Any] = [
            AIMessage(f"answer {n}") if n % 2 else HumanMessage(f"question {n}", id=f"h{n}")
            for n in range(20)
        ]
        for length in (8, 15, 16, 20):  # both sides of msgpack's short array header
            assert saver._dumps(history[:length]) == serde.dumps_typed(history[:length])
        encoded: list[Any] = []
        dumps = serde.dumps_typed

        def counted(value: Any) -> Any:
            encoded.append(value)
            return dumps(value)

        serde.dumps_typed = counted  # type: ignore[method-assign]
        longer = [*history, HumanMessage("one more")]
        assert saver._dumps(longer) == dumps(longer)
        assert encoded == [longer[-1]]  # the others' encodings were kept
        plain = list(range(10))  # not messages: encoded as a whole
        assert saver._dumps(plain) == dumps(plain)


def test_msgpack_array_headers_are_what_msgpack_writes() -> None:
    import ormsgpack

    from agents.state.codec import _msgpack_array

    for length in (0, 1, 15, 16, 65535, 65536, 70000):
        packed = ormsgpack.packb([0] * length)
        assert packed == _msgpack_array(length) + b"\x00" * length


async def test_a_deleted_threads_messages_are_not_kept_by_the_codec(tmp_path: Path) -> None:
    # Left from before: the codec kept a deleted thread's messages (their encodings, its
    # decoded histories) until newer ones pushed them out.
    from langgraph.graph import START, StateGraph

    from agents.state.schema import ThreadState

    async with open_checkpointer(sqlite_url(tmp_path / "store.sqlite")) as saver:
        assert isinstance(saver, ThreadedSqliteSaver)
        builder = StateGraph(ThreadState)
        builder.add_node("noop", lambda state: {})
        builder.add_edge(START, "noop")
        graph = builder.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "secret"}}
        padding = "x" * 300  # a history past the size whose decoded value is kept
        history = [HumanMessage(f"my secret {n} {padding}", id=f"s{n}") for n in range(12)]
        await graph.ainvoke({"messages": history}, config)
        await graph.aget_state(config)
        kept = [m.text for m, _ in saver._encoded.values()]
        assert any(text.startswith("my secret 3") for text in kept)
        assert saver._blobs  # its decoded history too
        await saver.adelete_thread("secret")
        assert not any("secret" in m.text for m, _ in saver._encoded.values())
        assert not saver._blobs
