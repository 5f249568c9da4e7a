"""How long the service's event loop stalls while a tool returns a large result (a list of
60,000 dicts, ~6 MB as JSON), by where its handler runs and by the limits that trim it. The
stall is the longest gap seen by a coroutine that wakes every millisecond during the call:
every other request waits that long. Run: .venv/bin/python -m bench.large_results
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from agents.skills.service import SkillService, SkillsOptions
from app.logging import configure_logging

T = TypeVar("T")

ROUNDS = 5
HANDLER = '''"""Rows of a report, built once at import."""

ROWS = [
    {"id": i, "name": f"item {i}", "tags": ["a", "b"], "note": "n" * 40, "price": i / 7}
    for i in range(60_000)
]


def rows() -> list[dict[str, object]]:
    return ROWS
'''
LIMITS: dict[str, dict[str, Any]] = {  # the tool's limits, by the name of the case
    "max_items 20, max_chars 4000": {"max_items": 20, "max_chars": 4000},
    "keep_fields, max_items 20": {"keep_fields": ["id", "name"], "max_items": 20},
    "max_chars 4000 (the data stays whole)": {"max_chars": 4000},
}


def _skill(root: Path, isolation: str) -> None:
    folder = root / f"rows-{isolation}"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        f"---\nname: rows-{isolation}\ndescription: Reports rows.\n---\n\nReport rows.\n"
    )
    tools = [
        {
            "name": f"rows_{isolation}_{n}",
            "description": "Report rows.",
            "handler": "handler:rows",
            "timeout_s": 30,
            "limits": limits,
            "parameters": {"type": "object", "properties": {}},
        }
        for n, limits in enumerate(LIMITS.values())
    ]
    (folder / "skill.yaml").write_text(yaml.safe_dump({"isolation": isolation, "tools": tools}))
    (folder / "handler.py").write_text(HANDLER)


async def stall_during(call: Awaitable[T]) -> tuple[T, float]:
    """``call``'s result and the event loop's longest stall while it ran, in ms (a ticker
    that should wake every millisecond; also used by tests/integration/test_large_results.py)."""
    gaps: list[float] = []

    async def tick() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last - 0.001)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.005)
    result = await call
    await asyncio.sleep(0.005)  # the ticker wakes once more: a stall at the call's end counts
    ticker.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await ticker
    return result, max(gaps) * 1000


async def lag_of_call(service: SkillService, tool: str) -> tuple[float, float]:
    """The event loop's longest stall during one call of ``tool`` and the call's time, ms."""
    started = time.perf_counter()
    result, stall = await stall_during(service.call(tool, {}))
    took = time.perf_counter() - started - 0.010  # less the ticker's two waits
    assert (result.ok, result.truncated) == (True, True), result.content[:200]
    return stall, took * 1000


async def measure() -> dict[str, tuple[float, float]]:
    figures: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for isolation in ("process", "thread"):
            _skill(root / "skills", isolation)
        service = SkillService(
            SkillsOptions(directory=root / "skills", data_dir=root / "data", embeddings=False)
        )
        service.reload()
        try:
            for isolation in ("process", "thread"):
                for n, case in enumerate(LIMITS):
                    tool = f"rows_{isolation}_{n}"
                    await service.call(tool, {})  # the import, and the worker's start
                    runs = [await lag_of_call(service, tool) for _ in range(ROUNDS)]
                    lag = statistics.median(r[0] for r in runs)
                    took = statistics.median(r[1] for r in runs)
                    figures[f"{isolation:<7} {case}"] = (lag, took)
        finally:
            await service.aclose()
    return figures


def main() -> dict[str, tuple[float, float]]:
    configure_logging("warning")
    figures = asyncio.run(measure())
    print(f"a 6 MB result: event-loop stall and call time, ms (median of {ROUNDS})")
    for key, (lag, took) in figures.items():
        print(f"  {key:<44} stall {lag:7.1f}   call {took:7.1f}")
    return figures


if __name__ == "__main__":
    main()
