"""Model calls, prompt tokens and the right skill per task, today's router against the one
that offers close candidates to the answering model, on both retrieval sets.

Every query runs through the service's own path (``Conversations.stream``) over the set's
skills installed as folders (instruction-only, as the ToolAlpaca skills are: one model call
is the floor). The scripted policy model (bench/replies.py) knows each query's skill and
uses it when it is offered (its instructions in the prompt, or loaded), picks it in a
tie-break, loads it from the index when listed, and otherwise answers without one.
The reference is a confident single-skill turn: the same query with its skill named.
Run: .venv/bin/python -m bench.routing_policy
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage

from agents.events import RouteDecided, RunFinished
from app.services import Services, open_services
from app.settings import Settings
from bench.common import ROOT
from bench.conversation import prompt_tokens
from bench.replies import policy_reply
from bench.sets import Query, RetrievalSet, both, halves
from tests.fakellm.process import FakeLLMProcess


@dataclass
class Turn:
    """One task's outcome."""

    calls: int
    tokens: int
    right: bool
    route: str
    in_top5: bool


async def run_turn(
    services: Services, fake: FakeLLMProcess, query: Query, skill: str | None = None
) -> Turn:
    """One query on a new thread; ``skill`` names the skill in the request (the reference)."""
    fake.reset()
    reply = partial(policy_reply, query.expected)
    fake.on_forced_tool("choose_route", reply)
    fake.script(*[reply] * 4)
    route, last = "-", None
    options: dict[str, Any] = {"skill": skill} if skill else {}
    stream = services.conversations.stream(uuid.uuid4().hex, [HumanMessage(query.text)], **options)
    async for last in stream:
        if isinstance(last, RouteDecided):
            route = last.kind if last.by != "model" else "tie-break"
    assert isinstance(last, RunFinished), last
    top5 = [h.name for h in services.skills.search(query.text, k=5)]
    return Turn(
        calls=len(fake.requests),
        tokens=prompt_tokens(fake.requests),
        right=str(last.message.content) == f"used {query.expected}",
        route=route,
        in_top5=query.expected in top5,
    )


async def measure(data: RetrievalSet, root: Path, fake: FakeLLMProcess) -> dict[str, Any]:
    """Per router: mean model calls and prompt tokens, right-skill shares, routes."""
    skills = data.install(root / "skills")
    out: dict[str, Any] = {}
    async with AsyncExitStack() as stack:
        for label, offer in (("today's router", 0), ("candidates offered", 2000)):
            settings = Settings(
                skills_write_examples=False,  # the scripted model only answers turns here
                data_dir=ROOT / "data" / "bench" / "policy",
                checkpoint_url=f"sqlite:///{root / f'{label[:5]}.sqlite'}",
                skills_dir=skills,
                skills_watch=False,
                model="openai/fake",
                model_api_base=fake.base_url,
                route_offer_tokens=offer,
                max_model_calls=12,
                # The router as it is, not learning from the set as it goes: that is
                # measured apart (bench/routing_learning.py).
                learn_examples=False,
            )
            services = await stack.enter_async_context(open_services(settings))
            turns = [await run_turn(services, fake, q) for q in data.queries]
            out[label] = turns
            if offer:
                out["reference"] = [
                    await run_turn(services, fake, q, skill=q.expected) for q in data.queries
                ]
    return out


def report(name: str, results: dict[str, list[Turn]], queries: list[Query]) -> None:
    reference = statistics.fmean(t.tokens for t in results["reference"])
    print(f"{name}: {len(results['reference'])} tasks, instruction-only skills (floor: 1 call)")
    print(f"  confident single-skill turn (skill named): {reference:,.0f} prompt tokens")
    for label in ("today's router", "candidates offered"):
        turns = results[label]
        calls = statistics.fmean(t.calls for t in turns)
        tokens = statistics.fmean(t.tokens for t in turns)
        right = sum(t.right for t in turns) / len(turns)
        top = [t for t in turns if t.in_top5]
        right_top = sum(t.right for t in top) / max(len(top), 1)
        routes: dict[str, list[Turn]] = {}
        for t in turns:
            routes.setdefault(t.route, []).append(t)
        split = ", ".join(
            f"{k} {len(v) / len(turns):.0%} ({statistics.fmean(t.calls for t in v):.2f} calls, "
            f"{statistics.fmean(t.tokens for t in v):,.0f} tokens)"
            for k, v in sorted(routes.items())
        )
        by_half = ""
        if name == "ToolAlpaca":  # a change must hold on each half, not on the whole
            first = {id(q) for q in halves(queries)[0]}
            parts = [
                [t for q, t in zip(queries, turns, strict=True) if (id(q) in first) == side]
                for side in (True, False)
            ]
            by_half = "; each half: " + ", ".join(
                f"{statistics.fmean(t.calls for t in h):.3f} calls, "
                f"{statistics.fmean(t.tokens for t in h):,.0f} tokens"
                for h in parts
            )
        print(
            f"  {label:<20} calls/task {calls:.2f} (+{calls - 1:.2f} over the floor), prompt "
            f"tokens/task {tokens:,.0f} ({tokens / reference:.2f}x the reference), right skill "
            f"{right:.1%} ({right_top:.1%} of the {len(top)} whose skill is in the top 5); "
            f"routes: {split}{by_half}"
        )


async def amain() -> dict[str, dict[str, list[Turn]]]:
    results = {}
    with FakeLLMProcess() as fake:
        for data in both():
            if data.folder is not None:  # the policy recognises only skills it installed
                continue
            with tempfile.TemporaryDirectory() as tmp:
                results[data.name] = await measure(data, Path(tmp), fake)
            report(data.name, results[data.name], data.queries)
    return results


def main() -> dict[str, dict[str, list[Turn]]]:
    return asyncio.run(amain())


if __name__ == "__main__":
    main()
