"""Workflow engine overhead per run and per node (no model time), against the same procedure
written by hand as a LangGraph graph, same run, same SQLite checkpointer, interleaved.

The procedure: a tool lookup, two lookups in parallel and their join, a switch, a set node:
6 nodes (the hand-built graph makes the switch its join's conditional edge). The tool is an
in-process handler (``isolation: thread``) in both, so the
difference is the engine's own work: templates, executors, records, events.
Run: .venv/bin/python -m bench.workflow_engine
"""

from __future__ import annotations

import asyncio
import operator
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

import yaml
from langgraph.graph import END, START, StateGraph

from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.skills.service import SkillService, SkillsOptions
from agents.state.checkpointers import open_checkpointer
from agents.state.documents import documents_for
from agents.workflows.engine import WorkflowEngine
from agents.workflows.registry import WorkflowRegistry, skills_world
from app.logging import configure_logging

ROUNDS = 60
NODES = 6
WORKFLOW = """
name: bench
description: A lookup, two parallel lookups and their join, a switch, a summary.
inputs: {record_id: {type: string}}
nodes:
  - {id: first, kind: tool, tool: lookup, arguments: {record_id: "{{ inputs.record_id }}"},
     next: [left, right]}
  - {id: left, kind: tool, tool: lookup, arguments: {record_id: R1}, next: both}
  - {id: right, kind: tool, tool: lookup, arguments: {record_id: R2}, next: both}
  - {id: both, kind: join, next: check}
  - {id: check, kind: switch, cases: [{when: "nodes.first.output.value >= 0", goto: total}]}
  - id: total
    kind: set
    values: {sum: "{{ nodes.both.output.left.value + nodes.both.output.right.value }}"}
outputs: {message: "{{ nodes.total.output.sum }}"}
"""
HANDLER = '''"""A small lookup."""

RECORDS = {f"R{i}": {"id": f"R{i}", "value": i} for i in range(100)}


def lookup(record_id: str) -> dict[str, object]:
    return RECORDS[record_id]
'''


def _folders(root: Path) -> None:
    skill = root / "skills" / "records"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: records\ndescription: Records.\n---\nLook up.\n")
    params = {"type": "object", "properties": {"record_id": {"type": "string"}}}
    tools = [
        {
            "name": "lookup",
            "description": "Look up.",
            "handler": "handler:lookup",
            "parameters": params,
        }
    ]
    (skill / "skill.yaml").write_text(yaml.safe_dump({"isolation": "thread", "tools": tools}))
    (skill / "handler.py").write_text(HANDLER)
    (root / "workflows").mkdir()
    (root / "workflows" / "bench.yaml").write_text(WORKFLOW)


class HandState(TypedDict, total=False):
    record_id: str
    out: Annotated[dict[str, Any], operator.or_]


def hand_built(skills: SkillService, checkpointer: Any) -> Any:
    """The same procedure as a hand-written LangGraph graph calling the same tool."""

    async def call(record_id: str) -> Any:
        result = await skills.call("lookup", {"record_id": record_id})
        return result.data

    async def first(state: HandState) -> dict[str, Any]:
        return {"out": {"first": await call(state["record_id"])}}

    def check(state: HandState) -> str:
        return "total" if state["out"]["first"]["value"] >= 0 else END

    async def left(state: HandState) -> dict[str, Any]:
        return {"out": {"left": await call("R1")}}

    async def right(state: HandState) -> dict[str, Any]:
        return {"out": {"right": await call("R2")}}

    async def both(state: HandState) -> dict[str, Any]:
        return {"out": {"both": {"left": state["out"]["left"], "right": state["out"]["right"]}}}

    async def total(state: HandState) -> dict[str, Any]:
        found = state["out"]["both"]
        return {"out": {"total": found["left"]["value"] + found["right"]["value"]}}

    graph = StateGraph(HandState)
    for name, node in (
        ("first", first),
        ("left", left),
        ("right", right),
        ("both", both),
        ("total", total),
    ):
        graph.add_node(name, node)
    graph.add_edge(START, "first")
    graph.add_edge("first", "left")
    graph.add_edge("first", "right")
    graph.add_edge(["left", "right"], "both")
    graph.add_conditional_edges("both", check, ["total", END])
    graph.add_edge("total", END)
    return graph.compile(checkpointer=checkpointer)


async def measure() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _folders(root)
        skills = SkillService(
            SkillsOptions(directory=root / "skills", data_dir=root / "data", embeddings=False)
        )
        skills.reload()
        registry = WorkflowRegistry(root / "workflows", **skills_world(skills.registry))
        report = registry.reload()
        assert not report.errors, report.errors
        url = f"sqlite:///{root / 'data' / 'bench.sqlite'}"
        async with open_checkpointer(url) as checkpointer:
            engine = WorkflowEngine(
                registry,
                checkpointer,
                skills=skills,
                gateway=ModelGateway(None),
                prompts=Prompts(),
                documents=documents_for(checkpointer),
            )
            graph = hand_built(skills, checkpointer)
            ours: list[float] = []
            theirs: list[float] = []
            for i in range(ROUNDS + 5):  # interleaved; the first five warm up
                started = time.perf_counter()
                record = await engine.run("bench", {"record_id": f"R{i % 100}"})
                took = time.perf_counter() - started
                assert record["status"] == "SUCCEEDED", record
                started = time.perf_counter()
                config: Any = {"configurable": {"thread_id": f"hand-{i}"}}
                await graph.ainvoke({"record_id": f"R{i % 100}"}, config)
                took_hand = time.perf_counter() - started
                if i >= 5:
                    ours.append(took * 1000)
                    theirs.append(took_hand * 1000)
        await skills.aclose()
    return {
        "engine ms per run": statistics.median(ours),
        "hand-built ms per run": statistics.median(theirs),
        "engine ms per node": statistics.median(ours) / NODES,
        "hand-built ms per node": statistics.median(theirs) / NODES,
    }


def main() -> dict[str, float]:
    configure_logging("warning")
    figures = asyncio.run(measure())
    print(
        f"workflow engine against a hand-built LangGraph graph ({ROUNDS} runs each, {NODES} nodes)"
    )
    for key, value in figures.items():
        print(f"  {key:<24} {value:8.2f}")
    ratio = figures["engine ms per run"] / figures["hand-built ms per run"]
    print(f"  engine / hand-built      {ratio:8.2f}x   (goal <= 1.5x, <= 5 ms per node)")
    return figures


if __name__ == "__main__":
    main()
