"""Tokens a tool-server caller pays at 10 / 100 / 1,000 installed skills: the tool list it
receives (MCP tools/list and GET /v1/tools) with the meta-tools only vs every tool listed,
and the tokens a scripted caller spends to complete one task each way.

The task: look one record up with the tool of one skill. Meta-tools only, the caller makes
four model calls (search_skills, load_skill, call_skill_tool, then the answer); with every
tool listed, two (the tool, then the answer). Each model call reads the tool list and the
conversation so far; the texts are the real replies of the catalogue. One tool per skill,
with the schema of ``bench/common.synthetic_definition``.
Run: .venv/bin/python -m bench.tool_server
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import yaml

from agents.prompts import Prompts
from agents.skills.service import SkillService, SkillsOptions
from agents.tokens import count_tokens
from agents.toolserver.catalogue import ToolCatalogue, ToolEntry
from app.logging import configure_logging
from app.mcp.server import mcp_tool
from bench.common import synthetic_definition, synthetic_entries

SIZES = (10, 100, 1_000)
HANDLER = """
def run(id, limit=None):
    return {"id": id, "status": "open", "owner": "Dana Lee", "updated": "2026-11-30"}
"""


def _write_skills(root: Path, n: int) -> None:
    for entry in synthetic_entries(n):
        folder = root / entry.name
        folder.mkdir(parents=True)
        body = synthetic_definition(entry).split("\n{", 1)[0]
        front = yaml.safe_dump({"name": entry.name, "description": entry.description})
        (folder / "SKILL.md").write_text(f"---\n{front}---\n{body}\n", encoding="utf-8")
        function = json.loads(synthetic_definition(entry)[len(body) :])["function"]
        config = {
            "triggers": list(entry.triggers),
            "examples": list(entry.examples),
            "isolation": "thread",
            "tools": [{**function, "handler": "handler:run"}],
        }
        (folder / "skill.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
        (folder / "handler.py").write_text(HANDLER, encoding="utf-8")


def mcp_list(entries: list[ToolEntry]) -> str:
    """The ``tools`` of an MCP tools/list result, as sent."""
    tools = [mcp_tool(e).model_dump(by_alias=True, exclude_none=True, mode="json") for e in entries]
    return json.dumps(tools)


def openai_list(entries: list[ToolEntry]) -> str:
    """The ``tools`` of GET /v1/tools (strict variants), as sent."""
    return json.dumps([e.openai(strict=True) for e in entries])


def _call(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"name": name, "arguments": json.dumps(arguments)})


async def _task(catalogue: ToolCatalogue, tools: str, meta_only: bool) -> tuple[int, int]:
    """(model calls, tokens read and written) for one look-up task."""
    entry = synthetic_entries(len(catalogue.skills.registry))[-1]
    target = catalogue.skills.registry.get(entry.name)
    tool = target.tools[0].name
    question = f"{entry.examples[0]}: record R-1042"
    steps: list[tuple[str, dict[str, Any]]] = []
    if meta_only:
        steps = [
            ("search_skills", {"query": question, "k": 5}),
            ("load_skill", {"name": entry.name}),
            ("call_skill_tool", {"skill": entry.name, "tool": tool, "arguments": {"id": "R-1042"}}),
        ]
    else:
        steps = [(tool, {"id": "R-1042"})]
    fixed = count_tokens(tools)
    conversation = count_tokens(question)
    spent = 0
    for name, arguments in steps:
        call = _call(name, arguments)
        spent += fixed + conversation + count_tokens(call)  # the model reads, then calls
        result = await catalogue.call(name, arguments)
        assert result.ok, result.content
        conversation += count_tokens(call) + count_tokens(result.content)
    answer = "Record R-1042 is open, owned by Dana Lee (updated 2026-11-30)."
    spent += fixed + conversation + count_tokens(answer)
    return len(steps) + 1, spent


async def measure() -> list[dict[str, Any]]:
    rows = []
    for n in SIZES:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            _write_skills(root / "skills", n)
            service = SkillService(SkillsOptions(root / "skills", root / "data", embeddings=False))
            service.reload()
            catalogue = ToolCatalogue(service, Prompts(), list_skill_tools=True)
            every = catalogue.listed()
            meta = [e for e in every if e.kind == "meta"]
            row = {
                "skills": n,
                "mcp_meta": count_tokens(mcp_list(meta)),
                "mcp_all": count_tokens(mcp_list(every)),
                "openai_meta": count_tokens(openai_list(meta)),
                "openai_all": count_tokens(openai_list(every)),
            }
            row["task_meta"] = await _task(catalogue, mcp_list(meta), meta_only=True)
            row["task_all"] = await _task(catalogue, mcp_list(every), meta_only=False)
            await service.aclose()
            rows.append(row)
    return rows


def main() -> list[dict[str, Any]]:
    configure_logging("warning")
    rows = asyncio.run(measure())
    print("tool-list tokens a caller receives: meta-tools only vs every tool listed")
    print(
        f"{'skills':>7} {'MCP meta':>9} {'MCP all':>9} {'ratio':>7} {'OpenAI meta':>12} {'all':>9}"
    )
    for r in rows:
        ratio = r["mcp_all"] / r["mcp_meta"]
        print(
            f"{r['skills']:>7} {r['mcp_meta']:>9,} {r['mcp_all']:>9,} {ratio:>6.1f}x "
            f"{r['openai_meta']:>12,} {r['openai_all']:>9,}"
        )
    print("one look-up task, scripted caller over MCP: model calls / tokens read and written")
    print(f"{'skills':>7} {'meta-tools only':>18} {'every tool listed':>19} {'ratio':>7}")
    for r in rows:
        (calls_m, meta), (calls_a, every) = r["task_meta"], r["task_all"]
        print(
            f"{r['skills']:>7} {calls_m:>4} / {meta:>10,} {calls_a:>5} / {every:>10,} "
            f"{every / meta:>6.1f}x"
        )
    return rows


if __name__ == "__main__":
    main()
