"""The two retrieval sets the benchmarks measure on, as installed skill folders: the labelled
set written here (bench/data) and the public ToolAlpaca set (kept outside the repository, in
the shared evals folder; ``SKILLDESK_TOOLALPACA_DIR`` names another place).

Each skill becomes a folder with a SKILL.md holding its name and description only, as a
catalogue dropped in from another host would be.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.common import DATA, ROOT
from bench.replies import policy_body


@dataclass(frozen=True)
class Query:
    """One query and the skill that should answer it."""

    text: str
    expected: str
    kind: str = "all"


@dataclass(frozen=True)
class RetrievalSet:
    """Skills (name, description) and labelled queries."""

    name: str
    skills: list[dict[str, str]]
    queries: list[Query]
    folder: Path | None = None  # skills installed already (the bundled ones)

    def install(self, root: Path) -> Path:
        """Write every skill as a folder with a SKILL.md under ``root``; returns ``root``
        (or the set's own folder when it has one)."""
        if self.folder is not None:
            return self.folder
        for skill in self.skills:
            folder = root / skill["name"]
            folder.mkdir(parents=True, exist_ok=True)
            meta = yaml.safe_dump(
                {"name": skill["name"], "description": skill["description"]}, allow_unicode=True
            )
            body = policy_body(skill["name"])
            (folder / "SKILL.md").write_text(f"---\n{meta}---\n\n{body}\n", encoding="utf-8")
        return root


def _jsonl(path: Path) -> list[dict[str, str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def labelled() -> RetrievalSet:
    """The labelled set written alongside the bundled skills (bench/data)."""
    queries = [
        Query(q["query"], q["expected"], q["kind"])
        for q in _jsonl(DATA / "retrieval_queries.jsonl")
    ]
    return RetrievalSet("labelled", _jsonl(DATA / "retrieval_skills.jsonl"), queries)


def bundled() -> RetrievalSet:
    """The bundled skills as they ship (triggers and examples included), with English
    queries and their Chinese translations (bench/data/bundled_queries.jsonl)."""
    queries = [
        Query(q["query"], q["expected"], q["kind"]) for q in _jsonl(DATA / "bundled_queries.jsonl")
    ]
    return RetrievalSet("bundled (English / Chinese)", [], queries, ROOT / "skills")


def toolalpaca_dir() -> Path:
    """Where the ToolAlpaca files are."""
    configured = os.environ.get("SKILLDESK_TOOLALPACA_DIR")
    return Path(configured) if configured else ROOT.parent / "shared" / "evals" / "toolalpaca"


def toolalpaca() -> RetrievalSet | None:
    """The public ToolAlpaca set, or ``None`` when its files are not there."""
    folder = toolalpaca_dir()
    if not (folder / "skills.jsonl").is_file():
        print(f"ToolAlpaca set not found in {folder} (set SKILLDESK_TOOLALPACA_DIR)")
        return None
    queries = [Query(q["query"], q["skill"]) for q in _jsonl(folder / "queries.jsonl")]
    return RetrievalSet("ToolAlpaca", _jsonl(folder / "skills.jsonl"), queries)


def both() -> list[RetrievalSet]:
    """The sets that are available, the labelled one first."""
    sets = [labelled(), bundled()]
    public = toolalpaca()
    if public is not None:
        sets.append(public)
    return sets


def halves(queries: list[Query]) -> tuple[list[Query], list[Query]]:
    """Each skill's queries alternating between two halves (every skill in both): a change
    to retrieval or routing is kept only when it holds on each."""
    seen: Counter[str] = Counter()
    first: list[Query] = []
    second: list[Query] = []
    for query in queries:
        (first if seen[query.expected] % 2 == 0 else second).append(query)
        seen[query.expected] += 1
    return first, second
