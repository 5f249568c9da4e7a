"""The originals of summarised messages (agents/state/transcript.py), on the in-memory store."""

from __future__ import annotations

import asyncio

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from agents.state.documents import MemoryDocuments
from agents.state.transcript import Transcript


def turn(n: int) -> list[BaseMessage]:
    call = {"id": f"c{n}", "name": "get_order", "args": {"order_id": f"ORD{n}"}}
    return [
        HumanMessage(f"where is ORD{n}?", id=f"h{n}"),
        AIMessage("", tool_calls=[call], id=f"a{n}", response_metadata={"logprobs": [0.1] * 500}),
        ToolMessage("shipped", tool_call_id=f"c{n}", name="get_order", id=f"t{n}"),
        AIMessage(f"ORD{n} has shipped.", id=f"b{n}"),
    ]


def test_batches_are_read_back_in_order_with_their_indices_and_calls() -> None:
    transcript = Transcript(MemoryDocuments())

    async def go() -> None:
        await transcript.keep("t", 4, turn(2))  # written out of order, and once again
        await transcript.keep("t", 0, turn(1))
        await transcript.keep("t", 4, turn(2))  # a step run again after a crash
        read = await transcript.read("t")
        assert [i for i, _ in read] == list(range(8))
        assert [m.text for _, m in read][::4] == ["where is ORD1?", "where is ORD2?"]
        call = read[5][1]
        assert isinstance(call, AIMessage)
        assert call.tool_calls[0]["args"] == {"order_id": "ORD2"}
        assert isinstance(read[6][1], ToolMessage)
        assert read[6][1].tool_call_id == "c2"
        assert call.response_metadata == {}  # the provider's metadata is not kept
        assert [i for i, _ in await transcript.read("t", below=6)] == list(range(6))
        assert await transcript.read("other") == []

    asyncio.run(go())


def test_prune_keeps_the_newest_whole_batches_and_copy_gives_a_fork_its_part() -> None:
    transcript = Transcript(MemoryDocuments())

    async def go() -> None:
        for n in range(3):
            await transcript.keep("t", 4 * n, turn(n))
        await transcript.copy("t", "fork", below=6)
        assert [i for i, _ in await transcript.read("fork")] == list(range(6))
        assert await transcript.prune("t", keep=5) == 4  # the batch holding #7 stays
        assert [i for i, _ in await transcript.read("t")] == list(range(4, 12))
        await transcript.delete_thread("t")
        assert await transcript.read("t") == []
        assert len(await transcript.read("fork")) == 6

    asyncio.run(go())
