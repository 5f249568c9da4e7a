"""A large result is trimmed where its handler runs: the service's event loop, which serves
every other request, does no work in proportion to what a handler returned."""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.skills import files as files_module
from agents.skills.registry import SkillRegistry
from agents.skills.runner import ToolRunner
from bench.large_results import stall_during
from tests.skillkit import tool, write_skill

ROWS = 50_000  # ~5 MB as JSON
HANDLER = f"""
ROWS = [
    {{"id": i, "name": f"item {{i}}", "tags": ["a", "b"], "note": "n" * 40, "price": i / 8}}
    for i in range({ROWS})
]


def rows():
    return ROWS
"""
FIRST = [
    {"id": i, "name": f"item {i}", "tags": ["a", "b"], "note": "n" * 40, "price": i / 8}
    for i in range(20)
]
# The loop's longest stall during the call. Before the limits were applied where the handler
# runs, this 5 MB result stalled it ~130 ms (worker) and ~26 ms (thread, keep_fields: every
# row walked on the loop); since, 1 to 6 ms (a thread's trim yields the GIL each millisecond).
STALL_MS = 15.0


@pytest.fixture(params=["process", "thread"])
async def runner(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[ToolRunner]:
    """A runner over a skill whose tools return ~5 MB of rows, cut to 20 of them."""
    entries = [
        {**tool("rows", "handler:rows"), "limits": {"max_items": 20, "max_chars": 1000}},
        {**tool("kept", "handler:rows"), "limits": {"keep_fields": ["id"], "max_items": 20}},
    ]
    config = {"isolation": request.param, "tools": entries}
    write_skill(tmp_path / "skills", "report", config=config, handler=HANDLER)
    registry = SkillRegistry(tmp_path / "skills")
    registry.reload()
    runner = ToolRunner(registry, tmp_path / "data")
    yield runner
    await runner.aclose()


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Threads hand the GIL over every millisecond (5 by default), so that what runs on a
    thread shows as such and a stall on the loop stands out; and no garbage collection meanwhile:
    late in a full test run, one of pytest's heap took ~100 ms, counted as the trim's stall
    (the service freezes its start-up heap out of such walks)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        sys.setswitchinterval(interval)


@pytest.mark.usefixtures("fast_switching")
@pytest.mark.parametrize("name", ["rows", "kept"])
async def test_a_large_result_is_trimmed_without_stalling_the_event_loop(
    runner: ToolRunner, name: str
) -> None:
    assert (await runner.call(name, {})).ok  # the import (and the worker's start) first
    # The least of three calls' stalls: work in proportion to the result stalls every call
    # alike, while the machine being busy elsewhere (another process on the second core
    # took one call to 19.8 ms) rarely stalls all three.
    stalls = []
    for _ in range(3):
        result, stall = await stall_during(runner.call(name, {}))
        stalls.append(stall)
        if stall < STALL_MS:
            break
    assert (result.ok, result.truncated) == (True, True), result.content[:200]
    if name == "rows":
        assert result.data == FIRST
        whole = json.dumps(FIRST, ensure_ascii=False)
        assert result.content == whole[:1000] + f"…[truncated {len(whole) - 1000} characters]"
    else:
        assert result.data == [{"id": i} for i in range(20)]
        assert result.content == json.dumps(result.data)
    assert min(stalls) < STALL_MS, f"the event loop stalled {stalls} ms"


async def test_a_worker_replies_with_the_result_trimmed_not_the_whole_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agents.skills import workers

    read: list[int] = []
    parsed = workers._parsed

    async def measured(data: bytes | str) -> Any:
        read.append(len(data))
        return await parsed(data)

    monkeypatch.setattr(workers, "_parsed", measured)
    entry = {**tool("rows", "handler:rows"), "limits": {"max_items": 20}}
    write_skill(tmp_path / "skills", "report", config={"tools": [entry]}, handler=HANDLER)
    registry = SkillRegistry(tmp_path / "skills")
    registry.reload()
    runner = ToolRunner(registry, tmp_path / "data")
    try:
        result = await runner.call("rows", {})
    finally:
        await runner.aclose()
    assert (result.data, result.truncated) == (FIRST, True)
    assert read, "no reply was read"
    assert max(read) < 16_384, f"the service read a reply of {max(read)} bytes"


FORGER = """
import gc, json, struct

def forge(reply):
    for o in gc.get_objects():
        if type(o).__name__ == "Worker" and hasattr(o, "out"):
            data = json.dumps(reply).encode()
            o.out.write(struct.pack(">I", len(data)) + data)
            o.out.flush()
            return "the real result"
    return "no worker found"
"""


@pytest.mark.parametrize(
    "reply",
    [
        ["result", 1, True, "text", "forged"],  # the shapes replies had before
        ["result", 1, True, "json", "[1, 2]"],  # whole data: only a result with files to adopt
        ["result", 1, True, "json", '{"files": ["a"], "x": '],
        ["result", 1, True, "trimmed", ["forged", {}, "yes"]],
        ["result", 1, True, "trimmed", ["forged", {}]],
        ["result", 1, True, "trimmed", [None, {}, False]],
        ["result", True, True, "trimmed", ["forged", {}, False]],
    ],
)
async def test_a_reply_of_another_shape_stops_the_worker(tmp_path: Path, reply: list[Any]) -> None:
    # A handler shares its worker's reply pipe: what it writes there may be read as its
    # reply. Only the shapes the worker sends are taken; anything else stops the worker.
    runner = runner_of_forger(tmp_path)
    try:
        result = await runner.call("forge", {"reply": reply})
    finally:
        await runner.aclose()
    assert (result.ok, result.error_code) == (False, "tool_failed"), result.content
    assert "broke the worker protocol" in result.content


def runner_of_forger(tmp_path: Path) -> ToolRunner:
    reply = {"type": "array"}
    entry = tool("forge", "handler:forge", {"reply": reply})
    write_skill(tmp_path / "skills", "forger", config={"tools": [entry]}, handler=FORGER)
    registry = SkillRegistry(tmp_path / "skills")
    registry.reload()
    return ToolRunner(registry, tmp_path / "data")


MAKER = """
def make(context):
    path = context.data_dir / "report.txt"
    path.write_text("ok")
    rows = [{"id": i, "junk": "j" * 10} for i in range(50)]
    report = {"path": str(path), "pages": 1}
    return {"files": [str(path)], "saved_to": str(path), "report": report,
            "outputs": [str(path), "summary"], "rows": rows}
"""


class Attachments:
    """Adopts a handler's files as the service's attachment store does (the fields the
    runner keeps), and counts them."""

    def __init__(self) -> None:
        self.adopted: list[Path] = []

    async def adopt(self, thread_id: str, path: Path, **_: Any) -> dict[str, Any]:
        self.adopted.append(path)
        return {"id": f"att{len(self.adopted)}", "name": path.name, "media_type": "text/plain"}


@pytest.mark.parametrize("isolation", ["process", "thread"])
async def test_a_result_with_files_is_trimmed_once_they_are_adopted(
    tmp_path: Path, isolation: str
) -> None:
    # The service adopts the files (they become attachments, named instead of the paths),
    # then trims what the handler returned: such a result comes whole from its worker.
    entry = {**tool("make", "handler:make"), "limits": {"max_items": 3}}
    config = {"isolation": isolation, "tools": [entry]}
    write_skill(tmp_path / "skills", "maker", config=config, handler=MAKER)
    registry = SkillRegistry(tmp_path / "skills")
    registry.reload()
    runner = ToolRunner(registry, tmp_path / "data")
    attachments = Attachments()
    runner.attachments = attachments  # type: ignore[assignment]
    try:
        result = await runner.call("make", {}, thread_id="t1", run_id="r1")
    finally:
        await runner.aclose()
    assert (result.ok, result.truncated) == (True, True), result.content
    assert [p.name for p in attachments.adopted] == ["report.txt"]
    file = {"id": "att1", "name": "report.txt", "media_type": "text/plain", "size": None}
    rows = [{"id": i, "junk": "j" * 10} for i in range(3)]
    # The path, wherever the handler repeated it, is gone (review: only top-level fields were).
    assert result.data == {
        "files": [file],
        "report": {"pages": 1},
        "outputs": ["summary"],
        "rows": rows,
    }
    assert json.loads(result.content) == result.data


async def test_a_direct_call_gets_the_files_read_never_their_paths_within_a_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No thread keeps them (the tool server's calls): the files come with the result.
    write_skill(
        tmp_path / "skills",
        "maker",
        config={"tools": [tool("make", "handler:make")]},
        handler=MAKER,
    )
    registry = SkillRegistry(tmp_path / "skills")
    registry.reload()
    runner = ToolRunner(registry, tmp_path / "data")
    try:
        result = await runner.handed_over(await runner.call("make", {}))
        monkeypatch.setattr(files_module, "HANDED_MAX_BYTES", 1)
        too_big = await runner.handed_over(await runner.call("make", {}))
    finally:
        await runner.aclose()
    assert result.ok, result.content
    assert [(f.name, f.media_type, f.data) for f in result.files] == [
        ("report.txt", "text/plain", b"ok")
    ]
    assert result.data["files"] == [{"name": "report.txt", "media_type": "text/plain", "size": 2}]
    assert "saved_to" not in result.data  # it only repeated the path
    assert (result.data["report"], result.data["outputs"]) == ({"pages": 1}, ["summary"])
    assert str(tmp_path) not in result.content
    assert json.loads(result.content) == result.data
    assert (too_big.ok, too_big.error_code, too_big.files) == (False, "tool_failed", ())
    assert "2 bytes, more than the 1 a call returns" in too_big.content
