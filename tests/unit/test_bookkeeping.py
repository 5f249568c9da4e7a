"""A run's bookkeeping: the thread's record says how the run ended, whatever else fails."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage

from agents.bookkeeping import RunBooks
from agents.run import RunContext
from agents.state.documents.memory import MemoryDocuments
from agents.state.records import ThreadRecords, title_from


class UnreadableThread:
    """A graph whose thread cannot be read (its store down, a checkpoint damaged)."""

    checkpointer = None

    async def aget_state(self, config: Any) -> Any:
        raise RuntimeError("the checkpoint cannot be read")


async def test_a_failed_run_marks_its_thread_failed_though_its_state_cannot_be_read() -> None:
    # Review: counting the failed thread's messages read its state first, and a failed read
    # left the record "running": resumed as an orphan at the next start.
    records = ThreadRecords(MemoryDocuments())
    books = RunBooks(UnreadableThread(), records)  # type: ignore[arg-type]
    await books.opened("thr_x", "r1", [], [], owner="u")
    assert (await records.get("thr_x") or {})["status"] == "running"
    await books.closed(RunContext(thread_id="thr_x", run_id="r1"), None, failed=True)
    assert (await records.get("thr_x") or {})["status"] == "failed"


def test_a_title_from_a_first_message_is_one_line_of_text() -> None:
    # Review: an escape or a NUL in the first message reached `skilldesk threads list`.
    assert title_from("order status\x1b[2J\x07 please\x00") == "order status [2J please"
    assert title_from("first line\u2028second") == "first line"
    assert title_from(" \x00 ") == "New conversation"


async def test_a_title_set_after_the_record_was_read_for_a_run_stays() -> None:
    # Review: the record read at the turn's start was written back whole, and a title set
    # in the milliseconds between (PATCH /v1/threads/{id}) was lost.
    records = ThreadRecords(MemoryDocuments())
    await records.create("thr_t", owner="u", title="First question")
    read = await records.get("thr_t")
    await records.update("thr_t", title="Renamed by the user")
    books = RunBooks(UnreadableThread(), records)  # type: ignore[arg-type]
    await books.opened("thr_t", "r2", [], [], owner="u", record=read)
    after = await records.get("thr_t") or {}
    assert (after["title"], after["status"], after["run_id"]) == (
        "Renamed by the user",
        "running",
        "r2",
    )


async def test_a_title_set_after_the_read_of_an_empty_thread_is_not_named_over() -> None:
    # QA: a thread made empty, renamed while its first message's run opened, got the first
    # message's title: the run had decided to name it from the record as read before.
    records = ThreadRecords(MemoryDocuments())
    await records.create("thr_n", owner="u")
    read = await records.get("thr_n")
    await records.update("thr_n", title="MY TITLE")
    books = RunBooks(UnreadableThread(), records)  # type: ignore[arg-type]
    first = [HumanMessage("auto title here")]
    await books.opened("thr_n", "r3", [], first, owner="u", record=read)
    assert (await records.get("thr_n") or {})["title"] == "MY TITLE"
    await records.create("thr_m", owner="u")  # not renamed: named by its first message
    await books.opened("thr_m", "r4", [], first, owner="u", record=await records.get("thr_m"))
    assert (await records.get("thr_m") or {})["title"] == "auto title here"
