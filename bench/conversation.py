"""Model calls, prompt tokens and framework time per task, at 100 installed skills.

The same scripted tasks (single skill, follow-up turn, two-domain question) run through
Skilldesk and, in the same run, through two baselines: LangChain's ``create_agent`` holding
every skill's tool, and ``langgraph-supervisor`` with ten domain agents of ten tools each.
Each is scripted with the shortest successful conversation its design allows; model replies
come from the scripted OpenAI-compatible server over real HTTP, so the real clients run; the
server runs in a process of its own, as a model server would (in the client's process it
would compete with the client for the GIL).
Framework time is wall time minus time inside model calls (checkpoint writes included),
the median of fifteen rounds after a warm-up round, each round worded anew so that no cache
answers a repeated query. The systems take turns round by round, so a slow moment of the
machine weighs on all of them.
Run: .venv/bin/python -m bench.conversation
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import HumanMessage
from langchain_core.tools import StructuredTool

from agents.events import RouteDecided, RunFinished
from agents.tokens import count_tokens
from app.services import freeze_startup_heap, open_services, warm_up
from app.settings import Settings
from bench.cold_start import make_skills
from bench.common import DOMAINS, synthetic_entries
from bench.replies import expert_reply, plan_reply, route_reply
from tests.fakellm import Reply, ToolCall
from tests.fakellm.process import FakeLLMProcess

N = 100


def covered(intervals: list[tuple[float, float]]) -> float:
    """Seconds during which at least one interval was open (overlaps merged, not added)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


class ModelTimer(AsyncCallbackHandler):
    """Wall time during which at least one chat-model call was running, as the caller sees
    it (the model client's work included). Inline: LangChain awaits it in place instead of
    gathering it as a task on every streamed token, which would weigh on what it measures."""

    run_inline = True

    def __init__(self) -> None:
        self.started: dict[UUID, float] = {}
        self.intervals: list[tuple[float, float]] = []

    async def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: UUID, **kwargs: Any
    ) -> None:
        self.started[run_id] = time.perf_counter()

    async def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        start = self.started.pop(run_id, None)
        if start is not None:
            self.intervals.append((start, time.perf_counter()))

    @property
    def seconds(self) -> float:
        return covered(self.intervals)


def prompt_tokens(bodies: list[dict[str, Any]]) -> int:
    """Tokens of what was sent: messages plus tool schemas, counted the same for everyone."""
    return sum(
        count_tokens(json.dumps(b.get("messages", []), ensure_ascii=False))
        + count_tokens(json.dumps(b.get("tools", []), ensure_ascii=False))
        for b in bodies
    )


REPS = 15  # measured rounds of the three tasks, after one warm-up round


def tasks_for(entries: list[Any], rep: int = 0) -> dict[str, Any]:
    """The three tasks; ``rep`` varies the wording so no cache answers a repeated query."""
    a, b = entries[3], entries[4]  # different domains (entries cycle through ten)
    fa, fb = a.name.replace("-", "_"), b.name.replace("-", "_")
    first_a = a.description.split(". ")[0]
    return {
        "single skill": (f"{first_a}, reference {1000 + rep}", fa, [fa]),
        "follow-up turn": (f"and the same for record {7 + rep}?", fa, [fa]),
        "two-domain question": (
            f"{a.description.split(' (')[0]} and also {b.description.split(' (')[0].lower()}"
            f" for reference {2000 + rep}",
            fa,
            [fa, fb],
        ),
    }


Invoke = Callable[[str, str, ModelTimer], Awaitable[str]]


@dataclass(frozen=True)
class System:
    """One way of answering: how a turn is run, and its shortest successful script."""

    name: str
    invoke: Invoke
    script: Callable[[list[str]], list[Any]]


async def measure(
    fake: FakeLLMProcess, entries: list[Any], systems: list[System]
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per system and task: model calls, prompt tokens, median framework ms over REPS rounds.

    Rounds are interleaved (every system runs its three tasks, then the next round), so a
    slow moment of the machine weighs on every system alike.
    """
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {s.name: {} for s in systems}
    for rep in range(REPS + 1):
        for system in systems:
            thread = uuid.uuid4().hex
            for name, (text, _, tools) in tasks_for(entries, rep).items():
                fake.reset()
                pick = tools[0].replace("_", "-")
                fake.on_forced_tool("choose_route", partial(route_reply, pick))
                skills = [t.replace("_", "-") for t in tools]
                plan = [
                    {"id": f"t{i}", "skill": k, "instruction": f"record 7 via {k}"}
                    for i, k in enumerate(skills, 1)
                ]
                fake.on_forced_tool("plan_tasks", partial(plan_reply, plan))
                fake.script(*system.script(tools))
                timer = ModelTimer()
                started = time.perf_counter()
                route = await system.invoke(text, thread, timer)
                wall = time.perf_counter() - started
                server = covered(fake.answering)
                calls = len(fake.requests)
                if rep:  # round 0 warms caches and lazy imports up
                    samples[system.name].setdefault(name, []).append(
                        {
                            "calls": calls,
                            "tokens": prompt_tokens(fake.requests),
                            "framework_ms": (wall - server) * 1000,
                            "client_ms": (timer.seconds - server) * 1000 / max(calls, 1),
                            "route": route,
                        }
                    )
    return {
        system: {
            name: {
                "calls": rows[-1]["calls"],
                "tokens": rows[-1]["tokens"],
                "route": rows[-1]["route"],
                "framework_ms": statistics.median(r["framework_ms"] for r in rows),
                "framework_p90_ms": statistics.quantiles(
                    [r["framework_ms"] for r in rows], n=10, method="inclusive"
                )[-1],
                "client_ms": statistics.median(r["client_ms"] for r in rows),
            }
            for name, rows in tasks.items()
        }
        for system, tasks in samples.items()
    }


def skilldesk_script(tools: list[str]) -> list[Any]:
    """Shortest Skilldesk conversation: tool calls then answer (one expert, or one joint
    expert holding both skills); with ``joint_expert_tokens=0``, an expert per request and
    the aggregator. A planner call, when the router could not plan alone, is answered by
    measure()."""
    if len(tools) == 1:
        return [
            Reply(tool_calls=[ToolCall(tools[0], {"record_id": "7"})]),
            Reply(content="Record 7 is fine."),
        ]
    return [*[partial(expert_reply, tools)] * 4, Reply(content="Both records are fine.")]


async def skilldesk(
    stack: AsyncExitStack, fake: FakeLLMProcess, root: Path, name: str, **overrides: Any
) -> System:
    """Skilldesk as the service runs it, its services kept open on ``stack``."""
    settings = Settings(
        skills_write_examples=False,  # the scripted model only answers turns here
        data_dir=root / f"data-{name}",
        skills_dir=root / "skills",
        skills_watch=False,
        model="openai/fake",
        model_api_base=fake.base_url,
        **overrides,
    )
    services = await stack.enter_async_context(open_services(settings))
    await warm_up(services)  # as `skilldesk serve` does before its first request
    conversations = services.conversations

    async def invoke(text: str, thread: str, timer: ModelTimer) -> str:
        # The service's own path: the thread read, history repair, lock and events.
        route, last = "-", None
        async for last in conversations.stream(thread, [HumanMessage(text)], callbacks=[timer]):
            if isinstance(last, RouteDecided):
                route = last.kind
        assert isinstance(last, RunFinished), last
        return route

    return System(name, invoke, skilldesk_script)


def baseline_tools(entries: list[Any]) -> list[StructuredTool]:
    def make(entry: Any) -> StructuredTool:
        async def run(record_id: str) -> dict[str, str]:
            return {"id": record_id, "skill": entry.name}

        return StructuredTool.from_function(
            coroutine=run, name=entry.name.replace("-", "_"), description=entry.description
        )

    return [make(e) for e in entries]


def _graph_invoke(graph: Any) -> Invoke:
    async def invoke(text: str, thread: str, timer: ModelTimer) -> str:
        await graph.ainvoke(
            {"messages": [HumanMessage(text)]},
            {"configurable": {"thread_id": thread}, "callbacks": [timer]},
        )
        return "-"

    return invoke


def _chat_model(fake: FakeLLMProcess) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model="fake",
        base_url=fake.base_url,
        api_key="x",  # type: ignore[arg-type]
        max_retries=0,
    )


def create_agent_system(fake: FakeLLMProcess, entries: list[Any]) -> System:
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    agent = create_agent(_chat_model(fake), baseline_tools(entries), checkpointer=InMemorySaver())
    return System(
        "create_agent",
        _graph_invoke(agent),
        lambda tools: [
            Reply(tool_calls=[ToolCall(t, {"record_id": "7"}) for t in tools]),
            Reply(content="Record 7 is fine."),
        ],
    )


def supervisor_system(fake: FakeLLMProcess, entries: list[Any]) -> System:
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph_supervisor import create_supervisor

    model = _chat_model(fake)
    tools = baseline_tools(entries)
    domains = list(DOMAINS)
    agents = [
        create_agent(model, [t for i, t in enumerate(tools) if i % len(domains) == d], name=domain)
        for d, domain in enumerate(domains)
    ]
    supervisor = create_supervisor(agents, model=model).compile(checkpointer=InMemorySaver())

    def script(tool_names: list[str]) -> list[Any]:
        replies: list[Any] = []
        for name in tool_names:
            index = next(i for i, t in enumerate(tools) if t.name == name)
            domain = domains[index % len(domains)]
            replies += [
                Reply(tool_calls=[ToolCall(f"transfer_to_{domain}", {})]),
                Reply(tool_calls=[ToolCall(name, {"record_id": "7"})]),
                Reply(content="Record 7 is fine."),
            ]
        return [*replies, Reply(content="Record 7 is fine.")]

    return System("supervisor", _graph_invoke(supervisor), script)


async def amain() -> dict[str, dict[str, Any]]:
    entries = synthetic_entries(N)
    with tempfile.TemporaryDirectory() as tmp, FakeLLMProcess() as fake:
        root = Path(tmp)
        make_skills(root / "skills", N)
        async with AsyncExitStack() as stack:
            systems = [
                await skilldesk(stack, fake, root, "ours"),
                await skilldesk(stack, fake, root, "fan_out", joint_expert_tokens=0),
                create_agent_system(fake, entries),
                supervisor_system(fake, entries),
            ]
            freeze_startup_heap()  # as `skilldesk serve` does once it has started
            results = await measure(fake, entries, systems)
        ours, fan_out = results["ours"], results["fan_out"]
        agent, supervisor = results["create_agent"], results["supervisor"]
    print(f"conversation tasks at {N} skills: model calls / prompt tokens / framework ms")
    print(f"{'task':<22}{'Skilldesk':>26}{'create_agent':>26}{'langgraph-supervisor':>30}")
    for task in ours:
        cells = [
            f"{r[task]['calls']} / {r[task]['tokens']:,} / {r[task]['framework_ms']:.1f}"
            for r in (ours, agent, supervisor)
        ]
        print(f"{task:<22}{cells[0]:>26}{cells[1]:>26}{cells[2]:>30}   route={ours[task]['route']}")
    two = fan_out["two-domain question"]
    cell = f"{two['calls']} / {two['tokens']:,} / {two['framework_ms']:.1f}"
    print(f"{'  expert per request':<22}{cell:>26}   (joint_expert_tokens=0)")
    total = {
        k: sum(r[t]["tokens"] for t in r)
        for k, r in (("ours", ours), ("agent", agent), ("supervisor", supervisor))
    }
    calls = {
        k: sum(r[t]["calls"] for t in r)
        for k, r in (("ours", ours), ("agent", agent), ("supervisor", supervisor))
    }
    print(
        f"prompt tokens: create_agent/Skilldesk {total['agent'] / total['ours']:.1f}x, "
        f"supervisor/Skilldesk {total['supervisor'] / total['ours']:.1f}x"
    )
    print(
        f"model calls in all: Skilldesk {calls['ours']}, create_agent {calls['agent']}, "
        f"supervisor {calls['supervisor']}"
    )
    client = {
        k: statistics.median(r[t]["client_ms"] for t in r)
        for k, r in (("ours", ours), ("agent", agent), ("supervisor", supervisor))
    }
    print(
        f"model client per call (inside the chat model, not in the server): Skilldesk "
        f"{client['ours']:.1f} ms, create_agent {client['agent']:.1f} ms, "
        f"supervisor {client['supervisor']:.1f} ms"
    )
    worst = max(ours, key=lambda task: ours[task]["framework_ms"])
    print(
        f"framework time per turn (Skilldesk, worst task): median {ours[worst]['framework_ms']:.1f}"
        f" ms, p90 {ours[worst]['framework_p90_ms']:.1f} ms (goal <= 15 ms)"
    )
    return {"ours": ours, "fan_out": fan_out, "create_agent": agent, "supervisor": supervisor}


def main() -> dict[str, dict[str, Any]]:
    return asyncio.run(amain())


if __name__ == "__main__":
    main()
