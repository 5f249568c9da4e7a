"""Recall@1/3/5 of skill retrieval on the labelled set, against BM25-only and embedding-only.

Skills are described by name and description only (bench/data/retrieval_skills.jsonl).
Skilldesk embeds in int8 by default; the fp32 row shows what the exact model would give.
Run: .venv/bin/python -m bench.retrieval_quality
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from agents.skills.embeddings import EmbeddingCache, MiniLMEmbedder
from agents.skills.index import SkillEntry, SkillIndex
from bench.common import ROOT, load_jsonl

KS = (1, 3, 5)


def recall(index: SkillIndex, queries: list[dict[str, str]]) -> dict[str, dict[int, float]]:
    """Recall@k overall and per query kind."""
    hits: dict[str, dict[int, int]] = defaultdict(lambda: dict.fromkeys(KS, 0))
    counts: dict[str, int] = defaultdict(int)
    for row in queries:
        found = [h.name for h in index.search(row["query"], k=max(KS))]
        for kind in ("all", row["kind"]):
            counts[kind] += 1
            for k in KS:
                hits[kind][k] += row["expected"] in found[:k]
    return {kind: {k: hits[kind][k] / counts[kind] for k in KS} for kind in counts}


def results_index(cache: EmbeddingCache, entries: list[SkillEntry]) -> SkillIndex:
    index = SkillIndex(cache)
    index.build(entries)
    return index


def calibrate(index: SkillIndex, queries: list[dict[str, str]]) -> None:
    """Precision and coverage of loading the top skill directly (no model call) by threshold."""
    rows = []
    for row in queries:
        hits = index.search(row["query"], k=2)
        top = hits[0].score if hits else 0.0
        margin = top - (hits[1].score if len(hits) > 1 else 0.0)
        rows.append((top, margin, bool(hits) and hits[0].name == row["expected"]))
    print("direct-load calibration (top-1 score >= threshold and margin >= m):")
    for margin in (0.04, 0.08):
        for threshold in (0.35, 0.4, 0.45, 0.5, 0.55, 0.6):
            chosen = [ok for top, m, ok in rows if top >= threshold and m >= margin]
            precision = sum(chosen) / len(chosen) if chosen else 1.0
            print(
                f"  threshold {threshold:.2f} margin {margin:.2f}: coverage "
                f"{len(chosen) / len(rows):.3f}, precision {precision:.3f}"
            )


def main(cache_dir: Path | None = None) -> dict[str, dict[str, dict[int, float]]]:
    skills = load_jsonl("retrieval_skills.jsonl")
    queries = load_jsonl("retrieval_queries.jsonl")
    entries = [SkillEntry(s["name"], s["description"], (), ()) for s in skills]
    path = (cache_dir or ROOT / "data" / "bench") / "embeddings.sqlite"
    cache = EmbeddingCache(path, MiniLMEmbedder())
    fp32 = EmbeddingCache(path, MiniLMEmbedder("fp32"))
    hybrid = SkillIndex(cache).dense_weight
    results = {}
    for label, weight, vectors in (
        ("BM25 only (baseline)", 0.0, cache),
        ("embeddings only (baseline)", 1.0, cache),
        ("hybrid, fp32 embeddings", hybrid, fp32),
        ("hybrid (Skilldesk)", hybrid, cache),
    ):
        index = SkillIndex(vectors, dense_weight=weight)
        index.build(entries)
        results[label] = recall(index, queries)
    print(
        f"retrieval quality: {len(queries)} queries over {len(entries)} skills "
        "(name + description only)"
    )
    print(f"{'method':<28}" + "".join(f"recall@{k:<4}" for k in KS))
    for label, by_kind in results.items():
        print(f"{label:<28}" + "".join(f"{by_kind['all'][k]:<11.3f}" for k in KS))
    ours, bm25 = results["hybrid (Skilldesk)"]["all"], results["BM25 only (baseline)"]["all"]
    dense = results["embeddings only (baseline)"]["all"]
    exact = results["hybrid, fp32 embeddings"]["all"]
    print(
        f"ratio recall@5 hybrid/BM25 {ours[5] / bm25[5]:.2f}, "
        f"hybrid/embeddings {ours[5] / dense[5]:.2f}, int8/fp32 {ours[5] / exact[5]:.2f}"
    )
    kinds = sorted(k for k in results["hybrid (Skilldesk)"] if k != "all")
    print(
        "hybrid recall@5 by kind: "
        + ", ".join(f"{k} {results['hybrid (Skilldesk)'][k][5]:.3f}" for k in kinds)
    )
    calibrate(results_index(cache, entries), queries)
    if "--sweep" in sys.argv:
        for weight in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
            index = SkillIndex(cache, dense_weight=weight)
            index.build(entries)
            r = recall(index, queries)["all"]
            print(f"  dense_weight {weight:.1f}: " + ", ".join(f"@{k} {r[k]:.3f}" for k in KS))
    return results


if __name__ == "__main__":
    main()
