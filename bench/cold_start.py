"""Cold start with 1,000 skill folders: time to ready and handler modules imported.

Skilldesk reads frontmatter and skill.yaml only (tier 1). Baseline, measured in the same run:
a loader that imports every handler at start-up, as a registry of Python plugins usually does.
Run: .venv/bin/python -m bench.cold_start
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
from pathlib import Path

from agents.skills.service import SkillService, SkillsOptions
from bench.common import synthetic_entries

N = 1_000

HANDLER = '''"""Handler of {name}."""
import json
import statistics


def {func}(record_id: str) -> dict[str, str]:
    return {{"id": record_id, "skill": "{name}"}}
'''


def make_skills(root: Path, n: int) -> None:
    for entry in synthetic_entries(n):
        folder = root / entry.name
        folder.mkdir(parents=True)
        func = entry.name.replace("-", "_")
        (folder / "SKILL.md").write_text(
            f"---\nname: {entry.name}\ndescription: {entry.description}\n---\n\n"
            "Ask for the record id, call the tool, present the result.\n",
            encoding="utf-8",
        )
        (folder / "skill.yaml").write_text(
            # Thread isolation, as create_agent calls its tools in-process: the comparison is
            # of frameworks (bench/tool_isolation.py measures what a worker process adds).
            "isolation: thread\n"
            f"triggers: {list(entry.triggers)}\nexamples: {list(entry.examples)}\ntools:\n"
            f"  - name: {func}\n    description: {entry.description}\n"
            f"    handler: 'handler:{func}'\n    parameters:\n      type: object\n"
            "      properties: {record_id: {type: string}}\n      required: [record_id]\n",
            encoding="utf-8",
        )
        (folder / "handler.py").write_text(
            HANDLER.format(name=entry.name, func=func), encoding="utf-8"
        )


def ready_seconds(skills: Path, data: Path) -> tuple[float, SkillService]:
    started = time.perf_counter()
    service = SkillService(SkillsOptions(directory=skills, data_dir=data))
    service.reload()
    return time.perf_counter() - started, service


def eager_baseline(skills: Path) -> tuple[float, int]:
    started = time.perf_counter()
    count = 0
    for folder in sorted(skills.iterdir()):
        spec = importlib.util.spec_from_file_location(
            f"eager_{folder.name.replace('-', '_')}", folder / "handler.py"
        )
        if spec is None or spec.loader is None:
            raise ImportError(folder)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[spec.name] = module
        count += 1
    return time.perf_counter() - started, count


def main() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_skills(root / "skills", N)
        cold, service = ready_seconds(root / "skills", root / "data")
        imported = len(service.runner.imported) + sum(
            1 for m in sys.modules if m.startswith("_skilldesk_skill_")
        )
        assert len(service.registry) == N, service.registry.errors[:3]
        warm, _ = ready_seconds(root / "skills", root / "data")
        registry_only = time.perf_counter()
        service.registry.__class__(root / "skills").reload()
        registry_s = time.perf_counter() - registry_only
        eager_s, eager_count = eager_baseline(root / "skills")
    print(f"cold start with {N:,} skills")
    print(f"  first start (embeds every skill, loads the model): {cold:.2f} s")
    print(f"  restart (embeddings from the on-disk cache):        {warm:.2f} s")
    print(f"  of which reading the folders (tier 1):              {registry_s:.2f} s")
    print(
        f"  handler modules imported: {imported} (goal 0); baseline eager loader imports "
        f"{eager_count} in {eager_s:.2f} s on top of reading the folders"
    )
    return {"cold_s": cold, "warm_s": warm, "imported": imported}


if __name__ == "__main__":
    main()
