"""Cost of one tool call by where its handler runs: a thread of the service (``isolation:
thread``) or a worker process (``isolation: process``, the default), same run, same handler.

Also the first call of a skill in a worker (the process starts and imports the handler) and
a call after a timeout killed the worker. Run: .venv/bin/python -m bench.tool_isolation
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from agents.skills.service import SkillService, SkillsOptions
from app.logging import configure_logging

ROUNDS = 400
HANDLER = '''"""A small lookup, as most skills' tools are."""

RECORDS = {f"R{i}": {"id": f"R{i}", "status": "ok", "value": i} for i in range(1000)}


def lookup(record_id: str) -> dict[str, object]:
    return RECORDS[record_id]


def spin() -> None:
    while True:
        pass
'''


def _skill(root: Path, name: str, isolation: str) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: Looks records up.\n---\n\nLook it up.\n"
    )
    params = {"type": "object", "properties": {"record_id": {"type": "string"}}}
    tools = [
        {
            "name": f"{name}_lookup".replace("-", "_"),
            "description": "Look a record up.",
            "handler": "handler:lookup",
            "parameters": params,
        },
        {
            "name": f"{name}_spin".replace("-", "_"),
            "description": "Spin.",
            "handler": "handler:spin",
            "timeout_s": 0.2,
            "parameters": {"type": "object", "properties": {}},
        },
    ]
    (folder / "skill.yaml").write_text(yaml.safe_dump({"isolation": isolation, "tools": tools}))
    (folder / "handler.py").write_text(HANDLER)


async def _per_call_ms(service: SkillService, tool: str) -> list[float]:
    out = []
    for i in range(ROUNDS):
        started = time.perf_counter()
        result = await service.call(tool, {"record_id": f"R{i % 1000}"})
        out.append((time.perf_counter() - started) * 1000)
        assert result.ok, result.content
    return out


async def _first_ms(service: SkillService, tool: str) -> float:
    started = time.perf_counter()
    result = await service.call(tool, {"record_id": "R1"})
    assert result.ok, result.content
    return (time.perf_counter() - started) * 1000


async def measure() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _skill(root / "skills", "in-thread", "thread")
        _skill(root / "skills", "in-worker", "process")
        service = SkillService(
            SkillsOptions(directory=root / "skills", data_dir=root / "data", embeddings=False)
        )
        service.reload()
        try:
            figures = {
                "thread first call": await _first_ms(service, "in_thread_lookup"),
                "worker first call": await _first_ms(service, "in_worker_lookup"),
            }
            thread: list[float] = []
            worker: list[float] = []
            for _ in range(3):  # interleaved, so both see the machine's same moments
                thread += await _per_call_ms(service, "in_thread_lookup")
                worker += await _per_call_ms(service, "in_worker_lookup")
            figures["thread median"] = statistics.median(thread)
            figures["worker median"] = statistics.median(worker)
            figures["thread p90"] = statistics.quantiles(thread, n=10)[-1]
            figures["worker p90"] = statistics.quantiles(worker, n=10)[-1]
            timed_out = await service.call("in_worker_spin", {})
            assert timed_out.error_code == "timeout", timed_out.content
            figures["worker call after a kill"] = await _first_ms(service, "in_worker_lookup")
        finally:
            await service.aclose()
    return figures


def main() -> dict[str, float]:
    configure_logging("warning")
    figures = asyncio.run(measure())
    print(f"tool call by isolation, ms ({ROUNDS * 3} calls each, interleaved)")
    for key, value in figures.items():
        print(f"  {key:<26} {value:8.3f}")
    ratio = figures["worker median"] / figures["thread median"]
    print(f"  worker / thread (median)   {ratio:8.2f}x")
    return figures


if __name__ == "__main__":
    main()
