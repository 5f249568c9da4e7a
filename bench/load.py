"""Load: N concurrent conversations against real `skilldesk serve` processes.

The scripted model server runs in a process of its own, answering every call after a set
latency. The service has the bundled skills and workflows; of every five turns, two ask for
an order (an order expert: the model calls the order tool, then answers), one asks for an
order overview (the `order-overview` workflow: two tools, one in parallel with an expert's
model call, then its summary), two are answered directly. Conversations start spread over
one cycle, wait a think time (0.5-1.5x the mean) between their turns and keep their threads;
each turn carries an Idempotency-Key, and one that failed in transit is sent once more.
Reported per setup: completed turns per second, the service's CPU ms per turn (user +
system time of its processes) with the load client's and the model server's beside it,
p50/p99 latency added over the model's and added time to the first token, errors, lost or
duplicated messages (every thread's history is checked afterwards), the routes taken and
the service's memory. One process on the SQLite file and, in the same run, one and two
processes on PostgreSQL (two: the client alternates between them, as a load balancer
would), and two sharing Redis as well (the deployment of `deploy/`: every run event also
written to a Redis stream, Idempotency-Keys claimed there); last, the ratio of two
processes' turns per second to one's at saturation.
Threads are not summarised (a summary would take scripted replies and move the earliest
messages out of the history the check reads).
Run: .venv/bin/python -m bench.load [--quick] [--setup SQLite] [--load saturation]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import psycopg

from agents.skills.worker import descendants
from bench.common import ROOT
from bench.replies import load_reply
from tests.fakellm.process import FakeLLMProcess

POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"
SKILLDESK = str(Path(sys.executable).with_name("skilldesk"))
TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Load:
    """One load: how many conversations, turns each, the model's latency, the think time."""

    name: str
    conversations: int
    turns: int
    latency_s: float
    think_s: float


@dataclass
class Outcome:
    """What one load against one setup measured."""

    turns: int = 0
    errors: list[str] = field(default_factory=list)
    added_ms: list[float] = field(default_factory=list)
    first_token_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0
    cpu_ms: float = 0.0
    client_cpu_ms: float = 0.0
    model_cpu_ms: float = 0.0
    rss_mb: float = 0.0
    lost: int = 0
    duplicated: int = 0
    retried: list[str] = field(default_factory=list)
    by_route: dict[str, list[float]] = field(default_factory=dict)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _gone_too(read: Any, pid: int) -> float:
    """``read(pid)``, or 0 for a process that ended meanwhile."""
    try:
        return float(read(pid))
    except (OSError, ValueError, IndexError):
        return 0.0


def _with_ended(pid: int) -> float:
    """``cpu_s``, with the CPU of the process's children that ended and were waited for."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICK


def _pss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Server:
    """One `skilldesk serve` process."""

    def __init__(self, env: dict[str, str], data: Path) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (data.parent / f"serve-{self.port}.log").open("w")
        self.proc = subprocess.Popen(
            [SKILLDESK, "serve", "--port", str(self.port), "--data-dir", str(data)],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError(f"the service did not start; see {self.log.name}")

    def cpu_s(self) -> float:
        """The server's CPU seconds, with its child processes' (skill workers), those that
        ended too (a process's waited-for children are in its own count)."""
        return sum(
            _gone_too(_with_ended, pid) for pid in [self.proc.pid, *descendants(self.proc.pid)]
        )

    def rss_mb(self) -> float:
        """The server's memory, with its child processes' (proportional set size: a page
        shared by several is shared out, not counted in each)."""
        return sum(_gone_too(_pss_mb, pid) for pid in [self.proc.pid, *descendants(self.proc.pid)])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


WARM_UP = Load("warm-up", 20, 5, 0.05, 0.0)


def message(conversation: int, turn: int) -> str:
    order = f"ORD{1001 + (conversation + turn) % 40}"
    # The kind of turn by chat and turn together: at any moment the chats are at different
    # points of the mix (by turn alone, every chat would ask for its overview in one wave).
    kind = (conversation + turn) % 5
    if kind in (1, 4):
        return f"where is my order {order}? (chat {conversation}, turn {turn})"
    if kind == 3:
        return f"Give me an overview of order {order} (chat {conversation}, turn {turn})"
    return f"thanks, that helps (chat {conversation}, turn {turn})"


async def one_turn(
    client: aiohttp.ClientSession,
    url: str,
    thread: str,
    key: str,
    text: str,
    started: float,
    load: Load,
    out: Outcome,
) -> None:
    """Send one message and read its run's events to the end."""
    first_token, route = None, None
    async with client.post(
        f"{url}/v1/threads/{thread}/runs/stream",
        json={"message": text},
        headers={"Idempotency-Key": key},
    ) as response:
        if response.status != 200:
            out.errors.append(f"HTTP {response.status}")
            return
        event, ended = "", False
        try:
            async for raw in response.content:  # read to its end: the connection is reused
                line = raw.decode().rstrip("\r\n")
                if ended:
                    continue
                if line.startswith("event: "):
                    event = line[7:]
                    if event == "token" and first_token is None:
                        first_token = time.perf_counter()
                elif line.startswith("data: ") and event == "route_decided":
                    route = json.loads(line[6:])["kind"]
                elif line.startswith("data: ") and event in ("run_finished", "run_failed"):
                    ended = True
                    data = json.loads(line[6:])
                    if event == "run_failed":
                        out.errors.append(data.get("code", "run_failed"))
                        continue
                    model_s = data["usage"].get("model_calls", 1) * load.latency_s
                    out.added_ms.append((time.perf_counter() - started - model_s) * 1000)
                    out.by_route.setdefault(route or "?", []).append(out.added_ms[-1])
                    if first_token is not None:
                        out.first_token_ms.append((first_token - started - model_s) * 1000)
                    out.turns += 1
        except (aiohttp.ClientError, TimeoutError, ValueError):
            if not ended:
                raise  # sent again by the caller; after the end, the turn is counted
        if not ended:
            out.errors.append("stream ended before the run did")


async def conversation(
    client: aiohttp.ClientSession, urls: list[str], number: int, load: Load, out: Outcome
) -> str:
    """One user's turns; the latency each added over the model's."""
    thread = f"load-{number}-{uuid.uuid4().hex[:6]}"
    rng = random.Random(number)
    # Users do not arrive at once nor think in step: a start spread over one cycle, and
    # think times of half to one and a half times the mean.
    await asyncio.sleep(rng.uniform(0, load.think_s + load.latency_s) if load.think_s else 0)
    for turn in range(load.turns):
        started = time.perf_counter()
        # As a careful client does: each turn with an Idempotency-Key, and a request that
        # failed in transit sent once more (through the other process, when there are two),
        # which gets the same run's events from the first rather than a second run.
        key = f"{thread}-{turn}"
        for attempt in range(2):
            url = urls[(number + turn + attempt) % len(urls)]
            try:
                await one_turn(client, url, thread, key, message(number, turn), started, load, out)
                break
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                (out.errors if attempt else out.retried).append(type(exc).__name__)
        await asyncio.sleep(load.think_s * rng.uniform(0.5, 1.5))
    return thread


async def check_histories(urls: list[str], threads: list[str], load: Load, out: Outcome) -> None:
    """Every thread holds each message sent, once, in order."""
    async with httpx.AsyncClient(timeout=60) as client:
        for number, thread in enumerate(threads):
            response = await client.get(f"{urls[0]}/v1/threads/{thread}")
            said = [
                m["content"] for m in response.json().get("messages", []) if m["role"] == "human"
            ]
            sent = [message(number, turn) for turn in range(load.turns)]
            out.lost += len([m for m in sent if m not in said])
            out.duplicated += len(said) - len(set(said))


async def run_load(servers: list[Server], model_pid: int, load: Load) -> Outcome:
    # The load client's own full garbage collections (15-40 ms here) would count as latency
    # the service added, as would the model server's (``FakeLLMProcess``): run between loads.
    gc.collect()
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(thresholds[0], thresholds[1], 2**31 - 1)
    try:
        return await _run_load(servers, model_pid, load)
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


async def _run_load(servers: list[Server], model_pid: int, load: Load) -> Outcome:
    out = Outcome()
    urls = [s.url for s in servers]
    cpu = [s.cpu_s() for s in servers]
    client_cpu, model_cpu = time.process_time(), cpu_s(model_pid)
    # aiohttp, not httpx: httpx's pool walks every connection for each request, and at a few
    # hundred connections the load client spent more CPU per turn than the service.
    connector = aiohttp.TCPConnector(limit=load.conversations * 2)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:
        started = time.perf_counter()
        threads = await asyncio.gather(
            *[conversation(client, urls, n, load, out) for n in range(load.conversations)]
        )
        out.seconds = time.perf_counter() - started
    out.cpu_ms = sum(s.cpu_s() - c for s, c in zip(servers, cpu, strict=True)) * 1000
    out.client_cpu_ms = (time.process_time() - client_cpu) * 1000
    out.model_cpu_ms = (cpu_s(model_pid) - model_cpu) * 1000
    out.rss_mb = sum(s.rss_mb() for s in servers)
    await check_histories(urls, list(threads), load, out)
    return out


def environment(fake: FakeLLMProcess, skills: Path, url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env.update(
        SKILLDESK_SKILLS_DIR=str(skills),
        SKILLDESK_WORKFLOWS_DIR=str(ROOT / "workflows"),
        SKILLDESK_SKILLS_WATCH="false",
        SKILLDESK_MODEL="openai/fake-model",
        SKILLDESK_MODEL_API_BASE=fake.base_url,
        SKILLDESK_MODEL_API_KEY="sk-bench",
        SKILLDESK_LOG_LEVEL="warning",
        SKILLDESK_LOG_FORMAT="json",
        SKILLDESK_SUMMARY_AFTER_MESSAGES="0",
        SKILLDESK_SUMMARY_AFTER_TOKENS="0",
    )
    if url:
        env["SKILLDESK_CHECKPOINT_URL"] = url
    return env


def measure(loads: list[Load], only: str = "") -> list[tuple[str, Load, Outcome]]:
    results: list[tuple[str, Load, Outcome]] = []
    schema = f"load_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp, FakeLLMProcess() as fake:
        root = Path(tmp)
        skills = root / "skills"
        shutil.copytree(ROOT / "skills", skills)  # the bundled skills, as `serve` has them
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        pg = f"{POSTGRES}?options=-csearch_path%3D{schema}"
        setups = [
            ("1 process, SQLite", None, 1, False),
            ("1 process, PostgreSQL", pg, 1, False),
            ("2 processes, PostgreSQL", pg, 2, False),
            ("2 processes, PG + Redis", pg, 2, True),
        ]
        setups = [s for s in setups if only.lower() in s[0].lower()]
        try:
            for label, url, count, redis in setups:
                data = root / f"data-{len(results)}"
                env = environment(fake, skills, url)
                if redis:  # run events, keys, cancels and limits shared through Redis
                    env.update(SKILLDESK_REDIS_URL=REDIS, SKILLDESK_REDIS_PREFIX=schema)
                servers = [Server(env, data) for _ in range(count)]
                try:
                    # Not measured: the first turns of a process (the skills' vectors, the
                    # query encoder's first passes, the workflow's first compile).
                    fake.reset()
                    fake.script(*[partial(load_reply, WARM_UP.latency_s)] * 400)
                    asyncio.run(run_load(servers, fake.pid, WARM_UP))
                    for load in loads:
                        fake.reset()
                        calls = load.conversations * load.turns * 2
                        fake.script(*[partial(load_reply, load.latency_s)] * calls)
                        outcome = asyncio.run(run_load(servers, fake.pid, load))
                        results.append((label, load, outcome))
                        report(label, load, outcome)
                finally:
                    for server in servers:
                        server.stop()
        finally:
            with psycopg.connect(POSTGRES, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")
    return results


def report(label: str, load: Load, out: Outcome) -> None:
    added = sorted(out.added_ms) or [0.0]
    first = sorted(out.first_token_ms) or [0.0]
    p99 = added[min(len(added) - 1, int(len(added) * 0.99))]
    print(
        f"{label:<24} {load.name:<12} {out.turns:>5} turns {out.turns / out.seconds:>7.1f}/s "
        f"cpu {out.cpu_ms / max(out.turns, 1):>5.1f} ms/turn  added p50 "
        f"{statistics.median(added):>6.1f} p99 {p99:>7.1f} ms  first token p50 "
        f"{statistics.median(first):>6.1f} ms  errors {len(out.errors)}  lost {out.lost} "
        f"dup {out.duplicated}  memory (PSS) {out.rss_mb:.0f} MB",
        flush=True,
    )
    turns = max(out.turns, 1)
    print(
        f"{'':<24} {'':<12} beside it, per turn: load client cpu "
        f"{out.client_cpu_ms / turns:.1f} ms, model server cpu {out.model_cpu_ms / turns:.1f} ms "
        f"(machine: {os.cpu_count()} cores)",
        flush=True,
    )
    routes = []
    for route, values in sorted(out.by_route.items()):
        values.sort()
        routes.append(
            f"{route} {len(values)} x {statistics.median(values):.0f} / "
            f"{values[min(len(values) - 1, int(len(values) * 0.99))]:.0f} ms"
        )
    print(f"{'':<24} {'':<12} added p50 / p99 by route: {', '.join(routes)}", flush=True)
    if out.errors:
        print(f"  errors: {dict(Counter(out.errors))}", flush=True)
    if out.retried:
        print(f"  sent again after a transport error: {dict(Counter(out.retried))}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller load (for make bench)")
    parser.add_argument(
        "--setup", default="", help="only the setups whose label contains this (e.g. SQLite)"
    )
    parser.add_argument(
        "--load", default="", help="only the loads whose name contains this (e.g. saturation)"
    )
    args, _ = parser.parse_known_args()
    if args.quick:
        loads = [
            Load("realistic", 50, 3, 1.0, 2.0),
            Load("saturation", 50, 6, 0.05, 0.0),
        ]
    else:
        loads = [
            Load("realistic", 200, 5, 1.0, 2.0),
            Load("saturation", 200, 10, 0.05, 0.0),
        ]
    loads = [load for load in loads if args.load in load.name]
    print("conversations against service processes (model latency per call, think time)")
    for load in loads:
        print(
            f"  {load.name}: {load.conversations} conversations x {load.turns} turns, "
            f"{load.latency_s:g} s a model call, {load.think_s:g} s think time"
        )
    results = measure(loads, args.setup)
    rates = {
        label: out.turns / out.seconds
        for label, load, out in results
        if load.name == "saturation" and out.seconds
    }
    one = rates.get("1 process, PostgreSQL")
    for label in ("2 processes, PostgreSQL", "2 processes, PG + Redis"):
        two = rates.get(label)
        if one and two:
            print(f"{label} / 1 process, PostgreSQL at saturation: {two / one:.2f}x")


if __name__ == "__main__":
    main()
