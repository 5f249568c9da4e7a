"""Routing that learns from use, on ToolAlpaca: one half of the queries is replayed through
the service with the scripted policy model (bench/replies.py: it knows each query's skill,
uses it when offered and, among several, notes which beside its answer), learning on; the
other half is measured before and after (learning off while measuring, so it learns from
the replayed half only): recall@1/@5, the share routed with no model choosing (and how many
of those right), the right skill used, model calls and prompt tokens per task.

The halves alternate through each skill's queries, so both cover every skill.
Run: .venv/bin/python -m bench.routing_learning
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import tempfile
import uuid
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage

from agents.events import RouteDecided, RunFinished
from app.logging import configure_logging
from app.services import Services, open_services
from app.settings import Settings
from bench.common import ROOT
from bench.conversation import prompt_tokens
from bench.replies import policy_reply
from bench.sets import Query, halves, toolalpaca
from tests.fakellm.process import FakeLLMProcess


@dataclass
class Outcome:
    """One task on the measured half."""

    calls: int
    tokens: int
    right: bool
    no_model_choice: bool  # routed to one skill by retrieval (or the thread's context)
    top1: bool
    top5: bool


async def run_turn(services: Services, fake: FakeLLMProcess, query: Query) -> Outcome:
    """One query on a new thread through the service's own path."""
    fake.reset()
    reply = partial(policy_reply, query.expected)
    fake.on_forced_tool("choose_route", reply)
    fake.script(*[reply] * 4)
    route: RouteDecided | None = None
    last = None
    async for last in services.conversations.stream(uuid.uuid4().hex, [HumanMessage(query.text)]):
        if isinstance(last, RouteDecided):
            route = last
    assert isinstance(last, RunFinished), last
    assert route is not None
    top = [h.name for h in services.skills.search(query.text, k=5)]
    return Outcome(
        calls=len(fake.requests),
        tokens=prompt_tokens(fake.requests),
        right=str(last.message.content) == f"used {query.expected}",
        no_model_choice=route.kind == "skill" and route.by in ("retrieval", "context"),
        top1=top[:1] == [query.expected],
        top5=query.expected in top,
    )


def summary(label: str, outcomes: list[Outcome], measured: list[Query]) -> str:
    n = len(outcomes)
    alone = [o for o in outcomes if o.no_model_choice]
    return (
        f"  {label:<7} recall@1 {sum(o.top1 for o in outcomes) / n:.3f}, "
        f"@5 {sum(o.top5 for o in outcomes) / n:.3f}; no model choosing "
        f"{len(alone) / n:.1%} ({sum(o.right for o in alone) / max(len(alone), 1):.0%} right); "
        f"right skill used {sum(o.right for o in outcomes) / n:.1%}; calls/task "
        f"{statistics.fmean(o.calls for o in outcomes):.2f}; prompt tokens/task "
        f"{statistics.fmean(o.tokens for o in outcomes):,.0f}"
    )


def learned_precision(services: Services, measured: list[Query]) -> str:
    """How often the skill of a measured query's closest learned example is its own, by how
    close that example is (what ``SKILLDESK_ROUTE_LEARNED`` trades)."""
    rows = []
    for query in measured:
        hits = services.skills.search(query.text, k=5)
        best = max(hits, key=lambda h: h.learned, default=None)
        if best is not None and best.learned > 0:
            rows.append((best.learned, best.name == query.expected))
    parts = []
    for floor in (0.6, 0.7, 0.75, 0.8, 0.85, 0.9):
        above = [right for cosine, right in rows if cosine >= floor]
        share = len(above) / len(measured)
        parts.append(f">= {floor}: {share:.0%} of queries, {sum(above) / max(len(above), 1):.0%}")
    return "  closest learned example's skill is right, by its cosine: " + "; ".join(parts)


async def amain() -> dict[str, Any]:
    data = toolalpaca()
    if data is None:
        return {}
    replay, measured = halves(data.queries)
    with FakeLLMProcess() as fake, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        settings = Settings(
            skills_write_examples=False,  # the scripted model only answers turns here
            data_dir=ROOT / "data" / "bench" / "policy",
            checkpoint_url=f"sqlite:///{root / 'learning.sqlite'}",
            skills_dir=data.install(root / "skills"),
            skills_watch=False,
            model="openai/fake",
            model_api_base=fake.base_url,
            max_model_calls=12,
        )
        async with open_services(settings) as services:
            learned = services.learned
            assert learned is not None
            on = learned.options
            off = dataclasses.replace(on, enabled=False)
            learned.options = off
            before = [await run_turn(services, fake, q) for q in measured]
            learned.options = on
            replayed = [await run_turn(services, fake, q) for q in replay]
            learned.options = off
            after = [await run_turn(services, fake, q) for q in measured]
            kept = [e for s in data.skills for e in await learned.examples(s["name"])]
            print(
                f"ToolAlpaca, learning from use: {len(replay)} queries replayed, "
                f"{len(measured)} measured ({len(data.skills):,} skills)"
            )
            print(
                f"  replayed: {len(kept)} examples learned "
                f"({dict(Counter(e.how for e in kept))}), "
                f"{sum(e.skill == q.expected for q in replay for e in kept if e.text == q.text)}"
                f" of them for the query's own skill; the replay's right skill "
                f"{sum(o.right for o in replayed) / len(replayed):.1%}"
            )
            print(summary("before", before, measured))
            print(summary("after", after, measured))
            print(learned_precision(services, measured))
    return {"before": before, "after": after, "replayed": replayed}


def main() -> dict[str, Any]:
    configure_logging("error", "console")  # the figures, not every run's log lines
    return asyncio.run(amain())


if __name__ == "__main__":
    main()
