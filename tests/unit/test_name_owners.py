"""Tool and workflow names keep their owner across a restart (the data folder's owners
files); at a first start the older definition gets a contested name, not the one that sorts
first."""

from __future__ import annotations

import os
import time
from pathlib import Path

from structlog.testing import capture_logs

from agents.owners import OwnersFile
from agents.skills.registry import SkillRegistry
from agents.workflows.registry import WorkflowRegistry
from tests.skillkit import tool, write_skill

HANDLER = "def f():\n    return 1\n"
DAY = 86_400


def orders_skill(root: Path, name: str) -> Path:
    """A skill serving the tool ``get_order``."""
    config = {"tools": [tool("get_order", "handler:f")]}
    return write_skill(root, name, config=config, handler=HANDLER)


def age(path: Path, days: float) -> None:
    """Make ``path`` (and, for a folder, each file in it) ``days`` old."""
    then = time.time() - days * DAY
    for each in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(each, (then, then))


def skills_registry(folder: Path, data: Path, *, write: bool = True) -> SkillRegistry:
    registry = SkillRegistry(folder, owners=OwnersFile(data / "tools.json", write=write))
    registry.reload()
    return registry


def workflow(folder: Path, file: str, name: str, description: str = "Check orders") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file
    path.write_text(
        f"name: {name}\ndescription: {description}\n"
        "nodes:\n  - {id: first, kind: tool, tool: get_order}\n",
        encoding="utf-8",
    )
    return path


def workflows_registry(folder: Path, data: Path, *, write: bool = True) -> WorkflowRegistry:
    registry = WorkflowRegistry(folder, owners=OwnersFile(data / "workflows.json", write=write))
    registry.reload()
    return registry


def test_a_tool_keeps_its_owner_after_a_restart_though_the_newcomer_sorts_first(
    tmp_path: Path,
) -> None:
    skills, data = tmp_path / "skills", tmp_path / "data"
    orders_skill(skills, "order-query")
    running = skills_registry(skills, data)
    age(orders_skill(skills, "b-dup"), 30)  # older on disk too (copied with cp -p, say)
    report = running.reload()
    assert "already defined by skill 'order-query'" in report.errors[0].message
    restarted = skills_registry(skills, data)
    assert restarted.tool("get_order")[0].name == "order-query"
    assert "b-dup" not in restarted
    [problem] = restarted.errors
    assert (problem.skill, problem.field) == ("b-dup", "tools (get_order)")
    assert "already defined by skill 'order-query'" in problem.message


def test_at_a_first_start_the_older_skill_gets_a_contested_tool(tmp_path: Path) -> None:
    skills, data = tmp_path / "skills", tmp_path / "data"
    age(orders_skill(skills, "order-query"), 30)
    orders_skill(skills, "b-dup")
    registry = skills_registry(skills, data)
    assert registry.tool("get_order")[0].name == "order-query"
    assert [p.skill for p in registry.errors] == ["b-dup"]
    assert skills_registry(skills, data).tool("get_order")[0].name == "order-query"


def test_a_tool_owner_broken_at_a_restart_keeps_its_name(tmp_path: Path) -> None:
    skills, data = tmp_path / "skills", tmp_path / "data"
    owner = orders_skill(skills, "order-query")
    skills_registry(skills, data)
    age(orders_skill(skills, "b-dup"), 30)
    (owner / "skill.yaml").write_text("tools: [unclosed\n", encoding="utf-8")
    restarted = skills_registry(skills, data)
    assert "b-dup" not in restarted
    assert {p.skill for p in restarted.errors} == {"order-query", "b-dup"}
    orders_skill(skills, "order-query")  # fixed: it serves its tool again
    restarted.reload()
    assert restarted.tool("get_order")[0].name == "order-query"


def test_a_damaged_tool_owners_file_is_logged_and_the_older_skill_wins(tmp_path: Path) -> None:
    skills, data = tmp_path / "skills", tmp_path / "data"
    age(orders_skill(skills, "order-query"), 30)
    orders_skill(skills, "b-dup")
    data.mkdir()
    (data / "tools.json").write_text('{"schema_version": 1, "owners": {"get_or', encoding="utf-8")
    with capture_logs() as logs:
        registry = skills_registry(skills, data)
    assert registry.tool("get_order")[0].name == "order-query"
    [warning] = [e for e in logs if e["event"] == "owners.unreadable"]
    assert warning["log_level"] == "warning"
    assert warning["file"] == str(data / "tools.json")
    with capture_logs() as logs:
        restarted = skills_registry(skills, data)  # the file was written again, whole
    assert restarted.tool("get_order")[0].name == "order-query"
    assert not [e for e in logs if e["event"] == "owners.unreadable"]


def test_a_reader_that_does_not_write_follows_the_file_and_leaves_it(tmp_path: Path) -> None:
    skills, data = tmp_path / "skills", tmp_path / "data"
    orders_skill(skills, "order-query")
    skills_registry(skills, data)
    record = (data / "tools.json").read_bytes()
    age(orders_skill(skills, "b-dup"), 30)
    (skills / "order-query" / "skill.yaml").write_text("tools: []\n", encoding="utf-8")
    reader = skills_registry(skills, data, write=False)
    assert reader.tool("get_order")[0].name == "b-dup"  # order-query gave it up
    assert (data / "tools.json").read_bytes() == record
    (data / "tools.json").unlink()
    skills_registry(skills, data, write=False)
    assert not (data / "tools.json").exists()


def test_a_workflow_keeps_its_file_after_a_restart_though_the_newcomer_sorts_first(
    tmp_path: Path,
) -> None:
    flows, data = tmp_path / "workflows", tmp_path / "data"
    owner = workflow(flows, "refund-request.yaml", "refund-request")
    running = workflows_registry(flows, data)
    newcomer = workflow(flows, "a-dup.yaml", "refund-request", "The newcomer")
    age(newcomer, 30)
    running.reload()
    assert running.get("refund-request").path == owner
    restarted = workflows_registry(flows, data)
    assert restarted.get("refund-request").path == owner
    [problem] = restarted.errors
    assert problem.file == str(newcomer)
    assert f"workflow 'refund-request' is already defined by {owner}" in problem.message


def test_at_a_first_start_the_older_workflow_file_gets_a_contested_name(tmp_path: Path) -> None:
    flows, data = tmp_path / "workflows", tmp_path / "data"
    owner = workflow(flows, "refund-request.yaml", "refund-request")
    age(owner, 30)
    workflow(flows, "a-dup.yaml", "refund-request", "The newcomer")
    assert workflows_registry(flows, data).get("refund-request").path == owner
    assert workflows_registry(flows, data).get("refund-request").path == owner


def test_a_workflow_owner_broken_at_a_restart_keeps_its_name(tmp_path: Path) -> None:
    flows, data = tmp_path / "workflows", tmp_path / "data"
    owner = workflow(flows, "refund-request.yaml", "refund-request")
    workflows_registry(flows, data)
    age(workflow(flows, "a-dup.yaml", "refund-request", "The newcomer"), 30)
    owner.write_text("name: refund-request\ndescription: [unclosed\n", encoding="utf-8")
    restarted = workflows_registry(flows, data)
    assert "refund-request" not in restarted
    assert any("already defined by" in p.message for p in restarted.errors)
    workflow(flows, "refund-request.yaml", "refund-request")
    restarted.reload()
    assert restarted.get("refund-request").path == owner


def test_a_damaged_workflow_owners_file_is_logged_and_the_older_file_wins(
    tmp_path: Path,
) -> None:
    flows, data = tmp_path / "workflows", tmp_path / "data"
    owner = workflow(flows, "refund-request.yaml", "refund-request")
    age(owner, 30)
    workflow(flows, "a-dup.yaml", "refund-request", "The newcomer")
    data.mkdir()
    (data / "workflows.json").write_text('["not", "owners"]', encoding="utf-8")
    with capture_logs() as logs:
        registry = workflows_registry(flows, data)
    assert registry.get("refund-request").path == owner
    [warning] = [e for e in logs if e["event"] == "owners.unreadable"]
    assert warning["file"] == str(data / "workflows.json")


def test_without_an_owners_file_the_registries_load_and_write_nothing(tmp_path: Path) -> None:
    orders_skill(tmp_path / "skills", "order-query")
    workflow(tmp_path / "workflows", "refund-request.yaml", "refund-request")
    skills = SkillRegistry(tmp_path / "skills")
    flows = WorkflowRegistry(tmp_path / "workflows")
    skills.reload()
    flows.reload()
    assert skills.tool("get_order")[0].name == "order-query"
    assert "refund-request" in flows
    assert sorted(p.name for p in tmp_path.iterdir()) == ["skills", "workflows"]
