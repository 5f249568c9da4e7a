"""A skill worker in a cgroup of its own: whatever its handlers do (a new session, a double
fork, its subreaper killed), every process they start ends with the worker."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agents.skills.cgroups import WorkerGroups, sweep
from agents.skills.registry import SkillRegistry
from agents.skills.runner import ToolRunner
from tests.skillkit import still_runs, tool, write_skill

GROUPS = WorkerGroups.find()
pytestmark = pytest.mark.skipif(
    GROUPS is None, reason="needs a cgroup v2 this process can make cgroups under (root)"
)

# Starts a process in a session of its own, then kills the worker's subreaper: the serving
# process dies with it, and the process it started was handed to the machine's init.
_ESCAPE = """
import os, signal, subprocess, time

def escape(path):
    daemon = subprocess.Popen(['sleep', '300'], start_new_session=True)
    with open(path, 'w') as out:
        out.write(str(daemon.pid))
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(30)
"""

_WHERE = """
import os

def where():
    with open(f'/proc/{os.getpid()}/cgroup') as groups:
        return {'cgroup': groups.read()}
"""


def _runner(tmp_path: Path, name: str, entry: dict[str, Any], handler: str) -> ToolRunner:
    write_skill(tmp_path / "skills", name, config={"tools": [entry]}, handler=handler)
    registry = SkillRegistry(tmp_path / "skills")
    registry.reload()
    return ToolRunner(registry, tmp_path / "data")


async def test_a_handler_that_kills_its_subreaper_leaves_nothing_running(tmp_path: Path) -> None:
    runner = _runner(
        tmp_path,
        "escaper",
        tool("escape", "handler:escape", {"path": {"type": "string"}}, ["path"], timeout_s=10),
        _ESCAPE,
    )
    path = tmp_path / "pid"
    try:
        result = await asyncio.wait_for(runner.call("escape", {"path": str(path)}), 20)
    finally:
        await asyncio.wait_for(runner.aclose(), 10)
    assert not result.ok
    assert result.error_code == "tool_failed", result
    pid = int(path.read_text())
    assert not await still_runs(pid), f"process {pid} still runs"


async def test_a_worker_runs_in_a_cgroup_of_its_own_removed_when_it_ends(tmp_path: Path) -> None:
    runner = _runner(tmp_path, "where", tool("where", "handler:where"), _WHERE)
    try:
        first = await runner.call("where", {})
        assert first.ok, first
        line = next(g for g in first.data["cgroup"].splitlines() if g.startswith("0::"))
        group = Path(str(GROUPS.mount) + line.removeprefix("0::"))  # type: ignore[union-attr]
        assert group.parent.name == f"skilldesk-{os.getpid()}"
        assert _is_dir(group)
    finally:
        await asyncio.wait_for(runner.aclose(), 10)
    assert not _is_dir(group)


async def test_a_pool_closed_removes_its_services_cgroup(tmp_path: Path) -> None:
    # A graceful stop left the service's own (empty) cgroup behind (QA).
    assert GROUPS is not None
    groups = WorkerGroups(GROUPS.mount, GROUPS.base.parent / f"skilldesk-{os.getpid()}-test")
    runner = _runner(tmp_path, "where", tool("where", "handler:where"), _WHERE)
    runner._workers.groups = groups  # this test's own, apart from the other tests' workers
    try:
        first = await runner.call("where", {})
        assert first.ok, first
        assert f"skilldesk-{os.getpid()}-test/worker-" in first.data["cgroup"]
    finally:
        await asyncio.wait_for(runner.aclose(), 10)
    assert not _is_dir(groups.base)


def _is_dir(path: Path) -> bool:
    return path.is_dir()


def test_what_a_service_killed_before_it_cleaned_up_left_is_ended_at_the_next_start() -> None:
    # A service process killed outright leaves its workers' cgroups, and any process a
    # handler started in one still runs there.
    assert GROUPS is not None
    stale = GROUPS.base.parent / f"skilldesk-{_dead_pid()}"
    worker = stale / "worker-left"
    worker.mkdir(parents=True)
    enter = f"open('{worker}/cgroup.procs', 'w').write(str(__import__('os').getpid()))"
    left = subprocess.Popen([sys.executable, "-c", f"{enter}; import time; time.sleep(300)"])
    try:
        for _ in range(50):
            if str(left.pid) in (worker / "cgroup.procs").read_text():
                break
            time.sleep(0.02)
        sweep(GROUPS.base.parent)
        assert left.wait(timeout=5) == -signal.SIGKILL
        assert not stale.exists()
    finally:
        left.kill()


def _dead_pid() -> int:
    """The pid of a process that has ended (waited for)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


# Forks (the child keeps the worker's pipes open), then kills the worker's subreaper.
_FORK_AND_KILL = """
import os, signal, time

def escape(path):
    child = os.fork()
    if child == 0:
        os.setsid()
        time.sleep(300)
        os._exit(0)
    with open(path, 'w') as out:
        out.write(str(child))
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(60)
"""


async def test_a_worker_that_dies_is_told_though_a_fork_holds_its_pipe(tmp_path: Path) -> None:
    # Found by QA: the worker's end was told only by its pipe closing, which the fork held:
    # the call waited its whole timeout (30 s here), and the fork lived as long.
    runner = _runner(
        tmp_path,
        "forker",
        tool("escape", "handler:escape", {"path": {"type": "string"}}, ["path"], timeout_s=30),
        _FORK_AND_KILL,
    )
    path = tmp_path / "pid"
    started = time.monotonic()
    try:
        result = await asyncio.wait_for(runner.call("escape", {"path": str(path)}), 40)
        took = time.monotonic() - started
    finally:
        await asyncio.wait_for(runner.aclose(), 10)
    assert result.error_code == "tool_failed", result
    assert "SIGKILL" in result.content
    assert took < 5, took
    pid = int(path.read_text())
    assert not await still_runs(pid), f"process {pid} still runs"
