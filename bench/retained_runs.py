"""Ended runs kept for their retention, and the garbage collector: a full collection's time
with ten minutes of ended runs kept at 43 turns a second (25,800 runs; `bench.load`'s
realistic rate), their events as objects (as they were) against packed (``RunFeed.pack``),
in the same process, with what packing costs a run and what the kept runs take in memory.

Each run carries the events of a skill turn of the load benchmark (route, expert, a tool
call and its result, 20 tokens, the answer). The service's own heap is frozen at start
(``freeze_startup_heap``), so a collection walks what came after: mostly these runs.
Run: .venv/bin/python -m bench.retained_runs [--runs 25800]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc

from langchain_core.messages import AIMessage

from agents.events import (
    NodeFinished,
    NodeStarted,
    RouteDecided,
    RunFinished,
    Token,
    ToolCalled,
    ToolReturned,
)
from agents.feed import RunFeed


def ended_run(n: int) -> RunFeed:
    """A skill turn's run, ended."""
    thread, run = f"thread-{n}", f"run-{n}"
    feed = RunFeed(f"where is my order ORD{n}?", run_id=run, thread_id=thread)
    feed.begin()
    feed.put(NodeStarted(node="route"))
    feed.put(RouteDecided(kind="skill", target="orders", by="retrieval", skills=["orders"]))
    feed.put(NodeFinished(node="route", ms=1.2))
    feed.put(NodeStarted(node="expert"))
    call = f"call-{n}"
    feed.put(ToolCalled(tool="orders__lookup", arguments={"order_id": f"ORD{n}"}, call_id=call))
    status = f'{{"order_id": "ORD{n}", "status": "shipped", "eta": "2026-12-09"}}'
    feed.put(ToolReturned(tool="orders__lookup", call_id=call, ok=True, content=status))
    words = [f"word{i} " for i in range(20)]
    for word in words:
        feed.put(Token(text=word, node="expert"))
    feed.put(NodeFinished(node="expert", ms=1003.0))
    usage = {"input_tokens": 812, "output_tokens": 40, "total_tokens": 852, "model_calls": 2}
    answer = AIMessage(content="".join(words), id=f"msg-{n}")
    feed.put(RunFinished(thread, run, answer, usage=usage))
    feed.close()
    return feed


def full_collection_ms(repeat: int = 5) -> float:
    """The median time of a full collection."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure(count: int) -> None:
    gc.collect()
    gc.freeze()  # as the service does after start-up
    empty = full_collection_ms()
    tracemalloc.start()
    runs = [ended_run(n) for n in range(count)]
    loose_mb = tracemalloc.get_traced_memory()[0] / 2**20
    tracemalloc.stop()
    loose = full_collection_ms()
    started = time.perf_counter()
    for feed in runs:
        feed.pack()
    pack_us = (time.perf_counter() - started) / count * 1e6
    gc.collect()
    tracemalloc.start()
    packed_mb_before = tracemalloc.get_traced_memory()[0]
    again = [ended_run(n) for n in range(count)]  # measured the same way, then packed
    for feed in again:
        feed.pack()
    packed_mb = (tracemalloc.get_traced_memory()[0] - packed_mb_before) / 2**20
    tracemalloc.stop()
    del runs
    packed = full_collection_ms()
    print(
        f"{count:,} ended runs kept: a full collection {loose:.0f} ms with their events as "
        f"objects, {packed:.0f} ms packed ({loose / max(packed, 0.01):.0f}x; "
        f"{empty:.0f} ms with none); packing {pack_us:.0f} us a run; "
        f"memory {loose_mb:.0f} MB as objects, {packed_mb:.0f} MB packed"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=25_800, help="ended runs kept")
    measure(parser.parse_args().runs)


if __name__ == "__main__":
    main()
