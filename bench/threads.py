"""Long threads: checkpoint size and write time per step, framework time per turn, and the
storage a thread takes, at turns 10, 50 and 100 of one scripted conversation.

Each turn looks an order up (a tool call, its result, an answer) through the service's own
path; an attachment is uploaded at turn 1. Run on the SQLite file and on PostgreSQL (the
machine's server, a schema of its own), with summaries (the defaults: past 20 messages,
keeping 6) and without, and with retention (the newest 20 checkpoints kept, applied every
ten turns, the originals of the newest 100 summarised messages kept) beside the thread
without it; "transcript" is what the originals of summarised messages take. Framework
time is wall time minus the scripted model server's answering time, and CPU time is this
process's (the service's code, SQLite included; the model server is a process of its own),
each the median of the nine turns up to each mark (and "x turn 10" the median of the nine
rounds' ratios of a mark's turn to that round's turn of the youngest thread): CPU time is
the figure that holds on a busy machine. The marks come from three threads of the same
conversation run in lockstep, so that all three are measured in the same last ten rounds
(``one_thread``).
Goals (issue #14): framework time at turn 100 within 1.2x of turn 10; under 16 KB written
per checkpoint at turn 100; storage per thread that stops growing once retention applies.
Run: .venv/bin/python -m bench.threads [--store sqlite|postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage

from agents.events import RunFinished
from agents.state.retention import thread_bytes
from app.services import Services, freeze_startup_heap, open_services, warm_up
from app.settings import Settings
from bench.common import ROOT
from bench.conversation import covered
from bench.replies import thread_turn_reply
from tests.fakellm.process import FakeLLMProcess
from tests.pgkit import schema_url

TURNS = 100
MARKS = (10, 50, 100)
KEEP = 20
KEEP_SUMMARISED = 100  # summarised messages whose originals retention keeps
WINDOW = 9  # turns up to each mark whose median is reported


class WriteTimer:
    """Time spent in the checkpointer's writes (checkpoints and pending writes)."""

    def __init__(self, saver: Any) -> None:
        self.seconds = 0.0
        self.puts = 0
        for name in ("aput", "aput_writes"):
            setattr(saver, name, self._timed(getattr(saver, name), name == "aput"))

    def _timed(self, method: Any, counts: bool) -> Any:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started
                self.puts += counts

        return timed


async def one_thread(
    fake: FakeLLMProcess, settings: Settings, *, retention: bool
) -> dict[int, dict[str, float]]:
    """Figures at each mark of one scripted conversation of TURNS turns.

    Three threads of it run in lockstep rounds (a turn of each per round), started so that
    the last rounds hold turns up to 100 of the first, up to 50 of the second and up to 10
    of the third: the three marks are measured in the same minute, so a change in the
    machine's load (other processes) moves them alike and leaves their ratio.
    """
    async with open_services(settings, watch=False, background=False) as services:
        await warm_up(services)
        freeze_startup_heap()  # as `skilldesk serve` does
        saver = services.checkpointer
        writes = WriteTimer(saver)
        threads = {mark: f"bench-{mark}-{uuid.uuid4().hex[:8]}" for mark in MARKS}
        rows: dict[int, list[dict[str, float]]] = {mark: [] for mark in MARKS}
        for round_ in range(1, TURNS + 1):
            for mark, thread in threads.items():
                turn = round_ - (TURNS - mark)
                if turn >= 1:
                    row = await one_turn(services, fake, writes, thread, turn, retention)
                    rows[mark].append(row)
    last = {mark: rows[mark][mark - WINDOW : mark] for mark in MARKS}  # the same rounds
    return {
        mark: {
            **{
                key: statistics.median(r[key] for r in last[mark])
                for key in ("framework_ms", "cpu_ms", "kb_per_checkpoint", "write_ms")
            },
            # Each round's turn over the same round's turn 10, the median of those ratios:
            # a burst of load from elsewhere falls on both sides of a ratio.
            **{
                f"{key}_ratio": statistics.median(
                    r[key] / max(base[key], 1e-9)
                    for r, base in zip(last[mark], last[MARKS[0]], strict=True)
                )
                for key in ("framework_ms", "cpu_ms")
            },
            "stored_kb": rows[mark][mark - 1]["stored_kb"],
            "transcript_kb": rows[mark][mark - 1]["transcript_kb"],
            "checkpoints": rows[mark][mark - 1]["checkpoints"],
        }
        for mark in MARKS
    }


async def one_turn(
    services: Services,
    fake: FakeLLMProcess,
    writes: WriteTimer,
    thread: str,
    turn: int,
    retention: bool,
) -> dict[str, float]:
    """Turn ``turn`` of ``thread`` (an attachment after the first; retention applied every
    tenth), and its figures."""
    saver = services.checkpointer
    fake.reset()
    fake.script(*[partial(thread_turn_reply, turn)] * 3)
    before = await thread_bytes(saver, thread)
    seconds, puts = writes.seconds, writes.puts
    started, cpu = time.perf_counter(), time.process_time()
    events = [
        e
        async for e in services.conversations.stream(
            thread,
            [HumanMessage(f"Where is my order ORD{1000 + turn}?")],
            skill="order-lookup",
        )
    ]
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu
    assert isinstance(events[-1], RunFinished), events[-1]
    if turn == 1:
        await services.threads.attach(
            thread,
            name="invoice.txt",
            media_type="text/plain",
            chunks=_chunks(b"Invoice ORD1001: 2 pumps, 1 bearing.\n" * 20),
            caption="invoice of the first order",
        )
    if retention and turn % 10 == 0:  # every thread of the lockstep is at the same phase
        await services.threads.prune()
    after = await thread_bytes(saver, thread)
    written = max(after["checkpoints"] - before["checkpoints"], 1)
    assert services.threads.transcript is not None
    kept = await services.threads.transcript.size(thread)  # summarised messages' originals
    return {
        "framework_ms": (wall - covered(fake.answering)) * 1000,
        "cpu_ms": cpu * 1000,
        "kb_per_checkpoint": max(after["bytes"] - before["bytes"], 0) / written / 1024,
        "write_ms": (writes.seconds - seconds) * 1000 / max(writes.puts - puts, 1),
        "stored_kb": after["bytes"] / 1024,
        "transcript_kb": kept / 1024,
        "checkpoints": after["checkpoints"],
    }


async def _chunks(data: bytes) -> Any:
    yield data


def _settings(root: Path, fake: FakeLLMProcess, url: str, *, summaries: bool) -> Settings:
    skills = root / "skills"
    if not skills.exists():
        shutil.copytree(
            ROOT / "tests" / "fixtures" / "skills" / "storefront" / "order-lookup",
            skills / "order-lookup",
        )
    summary: dict[str, Any] = (
        {} if summaries else {"summary_after_messages": 0, "summary_after_tokens": 0}
    )
    return Settings(
        skills_write_examples=False,  # the scripted model only answers turns here
        data_dir=root / "data",
        skills_dir=skills,
        workflows_dir=root / "no-workflows",
        skills_watch=False,
        skills_embeddings=False,
        model="openai/fake",
        model_api_base=fake.base_url,
        checkpoint_url=url,
        retention_keep_checkpoints=KEEP,
        retention_keep_summarised=KEEP_SUMMARISED,
        retention_interval_s=0,
        **summary,
    )


async def amain(only: str | None = None) -> list[tuple[str, dict[int, dict[str, float]]]]:
    results = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeLLMProcess() as fake,
        schema_url("bench") as postgres,
    ):
        root = Path(tmp)
        stores = {"sqlite": f"sqlite:///{root / 'threads.sqlite'}", "postgres": postgres}
        for store, url in stores.items():
            if only and store != only:
                continue
            for summaries, retention in ((False, False), (True, False), (True, True)):
                settings = _settings(root, fake, url, summaries=summaries)
                figures = await one_thread(fake, settings, retention=retention)
                label = (
                    f"{store}, {'summaries' if summaries else 'no summaries'}"
                    f"{', retention' if retention else ''}"
                )
                results.append((label, figures))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("sqlite", "postgres"), help="only this store")
    results = asyncio.run(amain(parser.parse_args().store))
    print(f"one thread of {TURNS} turns (tool call, result, answer; an attachment at turn 1)")
    print(
        f"{'store':<36}{'turn':>5}{'framework ms':>14}{'x turn 10':>11}{'CPU ms':>8}"
        f"{'x turn 10':>11}{'KB/checkpoint':>15}"
        f"{'write ms':>10}{'stored KB':>11}{'transcript KB':>15}{'checkpoints':>13}"
    )
    for label, figures in results:
        for mark, row in figures.items():
            print(
                f"{label if mark == MARKS[0] else '':<36}{mark:>5}{row['framework_ms']:>14.1f}"
                f"{row['framework_ms_ratio']:>10.2f}x{row['cpu_ms']:>8.1f}"
                f"{row['cpu_ms_ratio']:>10.2f}x{row['kb_per_checkpoint']:>15.1f}"
                f"{row['write_ms']:>10.2f}{row['stored_kb']:>11.0f}{row['transcript_kb']:>15.0f}"
                f"{row['checkpoints']:>13.0f}"
            )


if __name__ == "__main__":
    main()
