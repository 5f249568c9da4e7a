"""Skill-context tokens per turn at 10 / 100 / 1,000 / 10,000 installed skills.

Skilldesk's prompt holds the compact index (pinned + top hits within the token budget), the
meta-tool schemas, and the one definition loaded for the turn; the baseline puts every
skill's definition and tool schema in the prompt. Run: .venv/bin/python -m bench.skill_context
"""

from __future__ import annotations

import json

from agents.prompts import Prompts
from agents.skills.index import SkillIndex
from agents.skills.meta import meta_tools
from agents.tokens import count_tokens
from bench.common import synthetic_definition, synthetic_entries

SIZES = (10, 100, 1_000, 10_000)
QUERIES = (
    "can you cancel my invoice please",
    "report on the spindle alarm",
    "schedule a meeting room for tomorrow",
    "what is the exchange rate budget",
)


def main() -> list[tuple[int, float, int]]:
    meta = count_tokens(json.dumps(meta_tools(Prompts())))
    entries = synthetic_entries(max(SIZES))
    per_definition = [count_tokens(synthetic_definition(e)) for e in entries]
    rows = []
    print("skill-context tokens per turn (compact index + meta-tools + one loaded definition)")
    print(f"{'skills':>8} {'Skilldesk':>10} {'baseline':>12} {'ratio':>8}")
    for n in SIZES:
        index = SkillIndex(None)  # token counts do not depend on the dense part
        index.build(entries[:n])
        ours = []
        for query in QUERIES:
            text, names = index.compact(query, budget_tokens=300)
            loaded = per_definition[[e.name for e in entries].index(names[0])] if names else 0
            ours.append(count_tokens(text) + meta + loaded)
        mean = sum(ours) / len(ours)
        baseline = sum(per_definition[:n])
        rows.append((n, mean, baseline))
        print(f"{n:>8} {mean:>10.0f} {baseline:>12,} {baseline / mean:>7.0f}x")
    print(f"goal: <= 1,200 tokens at 10,000 skills -> {rows[-1][1]:.0f}")
    return rows


if __name__ == "__main__":
    main()
