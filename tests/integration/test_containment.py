"""A bad skill cannot hurt anyone else: handlers that spin, block, sleep or leak, run by a
real service process, with the service and another skill timed beside them."""

from __future__ import annotations

import os
import shutil
import statistics
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.test_server_process import Service

FIXTURES = Path(__file__).parents[1] / "fixtures" / "skills" / "containment"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """One service process serving the misbehaving skill and a well-behaved one."""
    root = tmp_path_factory.mktemp("containment")
    for name in ("runaway", "quick"):
        shutil.copytree(FIXTURES / name, root / "skills" / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env.update(
        SKILLDESK_SKILLS_DIR=str(root / "skills"),
        SKILLDESK_SKILLS_EMBEDDINGS="false",
        SKILLDESK_LOG_FORMAT="json",
    )
    started = Service(env, root / "data")
    yield started
    started.stop()


def call(service: Service, skill: str, tool: str, **arguments: Any) -> tuple[dict[str, Any], float]:
    """A direct tool call: its body and how long it took (seconds)."""
    started = time.perf_counter()
    response = httpx.post(
        f"{service.url}/v1/skills/{skill}/tools/{tool}",
        json={"arguments": arguments},
        timeout=60,
    )
    return response.json(), time.perf_counter() - started


def health_ms(service: Service, n: int = 10) -> float:
    """Median time of ``/healthz``, in milliseconds."""
    times = []
    for _ in range(n):
        started = time.perf_counter()
        assert httpx.get(f"{service.url}/healthz", timeout=10).status_code == 200
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def cpu_seconds(pid: int) -> float:
    """CPU seconds a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def workers_cpu(service: Service) -> dict[int, float]:
    """CPU seconds used so far by each worker of the service: its process (the one the
    service started, a subreaper) and every process below it (the one serving the calls)."""
    cpu: dict[int, float] = {}
    parents: dict[int, int] = {}
    workers: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        cpu[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        if parents[pid] == service.proc.pid and b"agents.skills.worker" in cmdline:
            workers.add(pid)

    def worker_of(pid: int) -> int | None:
        while pid in parents and pid not in workers:
            pid = parents[pid]
        return pid if pid in workers else None

    out = dict.fromkeys(workers, 0.0)
    for pid, seconds in cpu.items():
        worker = worker_of(pid)
        if worker is not None:
            out[worker] += seconds
    return out


def test_a_spinning_handler_is_stopped_at_its_timeout_and_spins_no_more(
    service: Service,
) -> None:
    before = health_ms(service)
    with ThreadPoolExecutor(1) as pool:
        spinning = pool.submit(call, service, "runaway", "spin")
        time.sleep(0.4)
        early = workers_cpu(service)
        time.sleep(0.4)
        late = workers_cpu(service)
        # The handler spins in a worker process: the one whose CPU grew meanwhile (other
        # skills' idle workers may be there too)...
        during = {pid for pid, cpu in late.items() if cpu - early.get(pid, cpu) > 0.1}
        body, seconds = spinning.result()
    assert body["error"]["code"] == "timeout", body
    assert seconds < 5
    assert during, "the handler did not run in a worker process"
    assert not during & set(workers_cpu(service))  # ...which is gone now
    body, _ = call(service, "runaway", "spin")  # and the next call gets a fresh one
    assert body["error"]["code"] == "timeout", body
    # Nothing of ours spins any more: neither the service nor a worker uses the CPU.
    first, service_first = workers_cpu(service), cpu_seconds(service.proc.pid)
    time.sleep(1.0)
    second, service_second = workers_cpu(service), cpu_seconds(service.proc.pid)
    used = {pid: second[pid] - cpu for pid, cpu in first.items() if pid in second}
    assert all(seconds < 0.3 for seconds in used.values()), used
    assert service_second - service_first < 0.3
    assert health_ms(service) < max(before * 5, 50)
    body, seconds = call(service, "quick", "ping")
    assert body["ok"] is True
    assert seconds < 1


def test_an_async_handler_that_blocks_does_not_stall_the_service_and_times_out(
    service: Service,
) -> None:
    with ThreadPoolExecutor(1) as pool:
        blocked = pool.submit(call, service, "runaway", "block", seconds=4)
        time.sleep(0.3)  # the handler is blocking its loop now
        during = health_ms(service, n=5)
        ping, ping_s = call(service, "quick", "ping")
        body, seconds = blocked.result()
    assert body["ok"] is False
    assert body["error"]["code"] == "timeout", body
    assert seconds < 3.5  # cut at its 1 s timeout, not after the 4 s it blocks
    assert during < 200
    assert ping["ok"] is True
    assert ping_s < 1


def test_one_slow_skill_cannot_make_another_skill_busy(service: Service) -> None:
    results: list[dict[str, Any]] = []
    lock = threading.Lock()

    def nap() -> None:
        body, _ = call(service, "runaway", "nap", seconds=30)
        with lock:
            results.append(body)

    with ThreadPoolExecutor(20) as pool:
        for _ in range(20):
            pool.submit(nap)
        time.sleep(0.5)  # the skill's four workers are asleep, the rest were refused
        pings = [call(service, "quick", "ping") for _ in range(5)]
    assert all(body["ok"] for body, _ in pings), pings
    assert max(seconds for _, seconds in pings) < 1
    codes = sorted(r["error"]["code"] for r in results)
    assert codes == ["busy"] * 16 + ["timeout"] * 4


def test_a_handler_that_leaks_memory_hits_its_limit_and_the_service_lives_on(
    service: Service,
) -> None:
    body, seconds = call(service, "runaway", "hog")
    assert body["ok"] is False
    assert body["error"]["code"] == "tool_failed"
    assert "MemoryError: the handler ran out of memory (memory_mb: 256 MB)" in body["content"], body
    assert seconds < 10
    assert call(service, "quick", "ping")[0]["ok"] is True
    assert httpx.get(f"{service.url}/healthz", timeout=5).status_code == 200


def test_a_worker_is_reused_between_calls_and_replaced_after_a_kill(service: Service) -> None:
    first, _ = call(service, "quick", "ping")
    again, _ = call(service, "quick", "ping")
    assert first["result"]["pid"] == again["result"]["pid"]  # one worker kept the module
    os.kill(first["result"]["pid"], 9)
    time.sleep(0.2)
    after, _ = call(service, "quick", "ping")
    assert after["ok"] is True
    assert after["result"]["pid"] != first["result"]["pid"]
