"""What a worker's handlers print, relayed to the log (``agents.skills.output``): each line
under the call under way when it was printed, read from the worker's marks."""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs

from agents.skills.output import relay_output
from agents.skills.worker import OUTPUT_MARK


async def test_each_printed_line_is_logged_with_the_ids_of_its_call_and_none_between() -> None:
    stream = asyncio.StreamReader()
    stream.feed_data(
        b"before\n" + OUTPUT_MARK + b"start 1\ninside\n" + OUTPUT_MARK + b"end 1\nafter\nunended"
    )
    stream.feed_eof()
    calls = {1: {"event": "the caller's", "request_id": "r-1"}}
    with capture_logs() as logs:
        await relay_output(stream, "stock", 42, calls)
    said = [(e["line"], e.get("request_id")) for e in logs if e["event"] == "skill.output"]
    assert said == [("before", None), ("inside", "r-1"), ("after", None), ("unended", None)]
    assert all(e["skill"] == "stock" and e["pid"] == 42 for e in logs)
    assert calls == {}  # an ended call's ids are let go
