"""What the service logs about skill calls: a worker's output under the call that printed it,
and timed-out, refused and killed calls, each with the skill and the tool."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from agents.skills.registry import SkillRegistry
from agents.skills.results import ToolResult
from agents.skills.runner import ToolRunner
from tests.skillkit import tool, write_skill

SAY = {"text": {"type": "string"}}


def runner_of(tmp_path: Path, config: dict[str, Any], handler: str) -> ToolRunner:
    """A runner over one skill, "talker", with ``config`` and ``handler``."""
    write_skill(tmp_path / "skills", "talker", config=config, handler=handler)
    registry = SkillRegistry(tmp_path / "skills")
    registry.reload()
    return ToolRunner(registry, tmp_path / "data", cgroups=False)


async def as_request(ids: dict[str, str], call: Callable[[], Awaitable[ToolResult]]) -> ToolResult:
    """``call`` from a request of its own, its ids bound as the API's middleware binds them."""

    async def request() -> ToolResult:
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(**ids)
        return await call()

    return await asyncio.create_task(request())


async def test_a_workers_output_is_logged_with_the_ids_of_the_call_that_printed_it(
    tmp_path: Path,
) -> None:
    # Every line a worker printed was logged with the ids of the request that started the
    # worker, for its whole life: a later call by another user was logged as the first's.
    runner = runner_of(
        tmp_path,
        {"tools": [tool("say", "handler:say", SAY, ["text"])]},
        "def say(text):\n    print(text)\n    return {'ok': True}\n",  # not flushed
    )
    alice = {"request_id": "req-alice", "user": "alice", "key_id": "k-alice", "thread_id": "t-1"}
    bob = {"request_id": "req-bob", "thread_id": "t-2"}  # no key: nothing of alice's either
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        try:
            first = await as_request(alice, lambda: runner.call("say", {"text": "from alice"}))
            second = await as_request(bob, lambda: runner.call("say", {"text": "from bob"}))
            for _ in range(100):
                if sum(e["event"] == "skill.output" for e in logs) >= 2:
                    break
                await asyncio.sleep(0.05)
        finally:
            await runner.aclose()
    assert first.ok, first
    assert second.ok, second
    said = {e["line"]: e for e in logs if e["event"] == "skill.output"}
    assert set(said) == {"from alice", "from bob"}, logs
    assert said["from alice"]["pid"] == said["from bob"]["pid"] != os.getpid()  # one worker
    assert said["from alice"] == {**said["from alice"], **alice, "skill": "talker"}
    assert said["from bob"] == {**said["from bob"], **bob, "skill": "talker"}
    assert not {"user", "key_id"} & set(said["from bob"]), said["from bob"]


async def test_output_between_calls_is_logged_with_no_calls_ids(tmp_path: Path) -> None:
    # A handler's thread printing after its call has ended is no later call's.
    runner = runner_of(
        tmp_path,
        {"tools": [tool("later", "handler:later"), tool("wait", "handler:wait")]},
        (
            "import sys, threading, time\n\n"
            "def _print():\n    time.sleep(0.3)\n    print('after the call', flush=True)\n\n"
            "def later():\n    threading.Thread(target=_print).start()\n    return 1\n\n"
            "def wait():\n    return 2\n"
        ),
    )
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        try:
            await as_request(
                {"request_id": "req-1", "user": "alice"}, lambda: runner.call("later", {})
            )
            for _ in range(100):
                if any(e["event"] == "skill.output" for e in logs):
                    break
                await asyncio.sleep(0.05)
            await as_request(
                {"request_id": "req-2", "user": "bob"}, lambda: runner.call("wait", {})
            )
        finally:
            await runner.aclose()
    [line] = [e for e in logs if e["event"] == "skill.output"]
    assert line["line"] == "after the call"
    assert not {"request_id", "user"} & set(line), line


@pytest.mark.parametrize("isolation", ["process", "thread"])
async def test_a_timed_out_call_is_logged_with_its_skill_tool_and_limit(
    tmp_path: Path, isolation: str
) -> None:
    # A timeout came back to the model as a tool error, and the log said nothing of it.
    runner = runner_of(
        tmp_path,
        {
            "isolation": isolation,
            "tools": [tool("hang", "handler:hang", timeout_s=0.3)],
        },
        "import time\n\ndef hang():\n    time.sleep(2)\n    return 1\n",
    )
    with capture_logs() as logs:
        try:
            result = await runner.call("hang", {})
        finally:
            await runner.aclose()
    assert result.error_code == "timeout", result
    [timeout] = [e for e in logs if e["event"] == "tool.timeout"]
    assert timeout["log_level"] == "warning"
    assert (timeout["skill"], timeout["tool"], timeout["timeout_s"]) == ("talker", "hang", 0.3)
    killed = [e for e in logs if e["event"] == "skill.worker_killed"]
    if isolation == "process":  # the worker is killed, and says so
        [kill] = killed
        assert kill["skill"] == "talker"
        assert kill["pid"] != os.getpid()
        assert "0.3 s" in kill["why"]
    else:
        assert not killed


async def test_a_call_refused_as_busy_is_logged(tmp_path: Path) -> None:
    runner = runner_of(
        tmp_path,
        {"concurrency": 1, "tools": [tool("nap", "handler:nap", timeout_s=10)]},
        "import time\n\ndef nap():\n    time.sleep(1)\n    return 1\n",
    )
    with capture_logs() as logs:
        try:
            napping = asyncio.create_task(runner.call("nap", {}))
            for _ in range(100):  # until the first call holds the skill's one worker
                if runner._workers.size:
                    break
                await asyncio.sleep(0.01)
            refused = await runner.call("nap", {})
            assert (await napping).ok
        finally:
            await runner.aclose()
    assert refused.error_code == "busy", refused
    [busy] = [e for e in logs if e["event"] == "tool.busy"]
    assert (busy["skill"], busy["tool"], busy["log_level"]) == ("talker", "nap", "warning")
    assert "limit" in busy["error"]
