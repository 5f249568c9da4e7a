"""The workflow registry: one file per workflow, reload in place, the last good version keeps
serving, the installed world re-checked, live reload within two seconds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents.errors import WorkflowNotFound
from agents.workflows import loader
from agents.workflows.registry import WorkflowRegistry
from agents.workflows.watcher import start_workflow_watcher, stop_workflow_watcher
from tests.workflowkit import alias_bomb

TOOLS = {"list_alarms", "create_work_order"}


def flow(name: str, *, tool: str = "list_alarms", extra: str = "", description: str = "") -> str:
    return (
        f"name: {name}\n"
        f"description: {description or 'Check ' + name}\n"
        "nodes:\n"
        f"  - {{id: first, kind: tool, tool: {tool}}}\n"
        f"{extra}"
    )


def write(folder: Path, file: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file
    path.write_text(text, encoding="utf-8")
    return path


def test_reload_reports_added_changed_removed(tmp_path: Path) -> None:
    write(tmp_path, "alarms.yaml", flow("alarms"))
    write(tmp_path, "orders.yml", flow("orders"))
    write(tmp_path, "notes.txt", "not a workflow")
    write(tmp_path, ".draft.yaml", "name: [broken")
    registry = WorkflowRegistry(tmp_path, tools=TOOLS)
    report = registry.reload()
    assert (report.added, report.changed, report.removed) == (["alarms", "orders"], [], [])
    assert registry.names() == ["alarms", "orders"]
    assert "alarms" in registry
    assert len(registry) == 2
    assert registry.reload().changed_anything is False
    version = registry.version
    time.sleep(0.01)
    write(tmp_path, "alarms.yaml", flow("alarms", description="Now different"))
    (tmp_path / "orders.yml").unlink()
    report = registry.reload()
    assert (report.added, report.changed, report.removed) == ([], ["alarms"], ["orders"])
    assert registry.get("alarms").spec.description == "Now different"
    assert registry.version == version + 1
    assert [w.name for w in registry.all()] == ["alarms"]


def test_a_broken_edit_keeps_the_last_good_version_serving(tmp_path: Path) -> None:
    path = write(tmp_path, "alarms.yaml", flow("alarms"))
    registry = WorkflowRegistry(tmp_path)
    registry.reload()
    good = registry.get("alarms")
    write(tmp_path, "alarms.yaml", flow("alarms", extra="  - {id: next, kind: nope}\n"))
    report = registry.reload()
    assert registry.get("alarms") is good
    assert [(p.file, p.node, p.line) for p in report.errors] == [(str(path), "next", 5)]
    assert registry.errors == report.errors
    again = registry.reload()
    assert again.errors == []  # reported once per change, kept in registry.errors
    assert len(registry.errors) == 1
    write(tmp_path, "alarms.yaml", flow("alarms", description="Fixed"))
    report = registry.reload()
    assert report.changed == ["alarms"]
    assert registry.errors == []


def test_a_broken_edit_says_every_problem_at_once_and_the_last_good_version_serves(
    tmp_path: Path,
) -> None:
    # QA: the folder listed only the schema's problem; fixed, the template's; then the tool.
    path = write(tmp_path, "alarms.yaml", flow("alarms"))
    registry = WorkflowRegistry(tmp_path, tools=TOOLS)
    registry.reload()
    good = registry.get("alarms")
    broken = (
        "  - {id: a, kind: tool, tool: no_such_tool}\n"
        '  - {id: b, kind: set, values: {y: "{{ nodes.zzz.output }}"}}\n'
        "  - {id: c, kind: bogus}\n"
        "  - {id: d, kind: workflow, workflow: nowhere}\n"
    )
    write(tmp_path, "alarms.yaml", flow("alarms", extra=broken))
    registry.reload()
    assert registry.get("alarms") is good
    assert [(p.file, p.node, p.line, p.message.split(":")[0]) for p in registry.errors] == [
        (str(path), "a", 5, "tool"),
        (str(path), "b", 6, "values.y"),
        (str(path), "c", 7, "kind"),
        (str(path), "d", 8, "workflow"),
    ]
    assert "'no_such_tool' is not installed" in registry.errors[0].message
    assert "'nowhere' is not loaded" in registry.errors[3].message


def test_a_broken_new_file_is_reported_and_the_rest_load(tmp_path: Path) -> None:
    write(tmp_path, "alarms.yaml", flow("alarms"))
    write(tmp_path, "broken.yaml", "name: broken\ndescription: [oops\n")
    registry = WorkflowRegistry(tmp_path)
    report = registry.reload()
    assert report.added == ["alarms"]
    assert [p.file for p in registry.errors] == [str(tmp_path / "broken.yaml")]
    # Asked for by name, it says why it is not there, not that there is none (QA).
    with pytest.raises(WorkflowNotFound) as info:
        registry.get("broken")
    assert str(info.value).startswith("workflow 'broken' is not available: its file did not")
    assert "broken.yaml:3: is not valid YAML" in str(info.value)
    with pytest.raises(WorkflowNotFound, match="no workflow named 'nothing'"):
        registry.get("nothing")


def test_a_duplicate_name_names_both_files_and_the_first_keeps_it(tmp_path: Path) -> None:
    write(tmp_path, "b.yaml", flow("alarms"))
    registry = WorkflowRegistry(tmp_path)
    registry.reload()
    write(tmp_path, "a.yaml", flow("alarms", description="The newcomer"))
    registry.reload()
    assert registry.get("alarms").path == tmp_path / "b.yaml"  # it served first
    [problem] = registry.errors
    assert (problem.file, problem.line) == (str(tmp_path / "a.yaml"), 1)
    assert problem.message == (
        f"name: workflow 'alarms' is already defined by {tmp_path / 'b.yaml'}; "
        "workflow names are unique — rename one"
    )


def test_a_withdrawn_workflow_keeps_its_name_and_serves_again(tmp_path: Path) -> None:
    owner = write(tmp_path, "qa-loop.yaml", flow("qa-loop", tool="create_work_order"))
    registry = WorkflowRegistry(tmp_path, tools=TOOLS)
    registry.reload()
    write(tmp_path, "dup-name.yaml", flow("qa-loop", description="The duplicate"))
    registry.reload()
    duplicate = f"workflow 'qa-loop' is already defined by {owner}"
    assert [duplicate in p.message for p in registry.errors] == [True]
    registry.recheck(tools={"list_alarms"})  # the owner's tool is gone
    with pytest.raises(WorkflowNotFound, match="'create_work_order' is not installed"):
        registry.get("qa-loop")
    assert any(duplicate in p.message for p in registry.errors)  # still refused
    report = registry.recheck(tools=TOOLS)
    assert report.added == ["qa-loop"]
    assert registry.get("qa-loop").path == owner
    assert [duplicate in p.message for p in registry.errors] == [True]
    (tmp_path / "qa-loop.yaml").unlink()  # a removed file gives up its name
    registry.reload()
    assert registry.get("qa-loop").path == tmp_path / "dup-name.yaml"
    assert registry.errors == []


def test_get_suggests_close_names(tmp_path: Path) -> None:
    write(tmp_path, "refund-request.yaml", flow("refund-request"))
    registry = WorkflowRegistry(tmp_path)
    registry.reload()
    with pytest.raises(WorkflowNotFound, match="did you mean 'refund-request'") as caught:
        registry.get("refund-requests")
    assert caught.value.code == "unknown_workflow"


def test_a_workflow_whose_tool_disappears_is_withdrawn_and_comes_back(tmp_path: Path) -> None:
    path = write(tmp_path, "order.yaml", flow("order", tool="create_work_order"))
    registry = WorkflowRegistry(tmp_path, tools=TOOLS, skills={"work-order"})
    registry.reload()
    report = registry.recheck(tools={"list_alarms"}, skills=set())
    assert report.removed == ["order"]
    assert [(p.file, p.node, p.line) for p in report.errors] == [(str(path), "first", 4)]
    assert "'create_work_order' is not installed" in report.errors[0].message
    with pytest.raises(WorkflowNotFound) as withdrawn:
        registry.get("order")
    assert str(withdrawn.value).startswith(  # the file by its name, not the server's path
        f"workflow 'order' is not available: {path.name}:4: node 'first': tool:"
    )
    assert withdrawn.value.code == "workflow_unavailable"
    report = registry.recheck(tools=TOOLS)
    assert report.added == ["order"]
    assert registry.errors == []


def test_what_a_run_s_nodes_still_to_run_need_that_is_gone_is_named(tmp_path: Path) -> None:
    write(tmp_path, "order.yaml", flow("order", tool="create_work_order"))
    registry = WorkflowRegistry(tmp_path, tools=TOOLS)
    registry.reload()
    spec = registry.get("order").spec
    assert registry.not_installed(spec) == []
    registry.recheck(tools={"list_alarms"})
    (gone,) = registry.not_installed(spec)
    assert gone.startswith("node 'first': tool: 'create_work_order' is not installed")
    assert registry.not_installed(spec, done={"first"}) == []  # it ran already


def test_an_edit_naming_a_missing_tool_keeps_the_last_good_version(tmp_path: Path) -> None:
    write(tmp_path, "order.yaml", flow("order"))
    registry = WorkflowRegistry(tmp_path, tools=TOOLS)
    registry.reload()
    write(tmp_path, "order.yaml", flow("order", tool="list_alarmz"))
    report = registry.reload()
    assert registry.get("order").spec.nodes[0].tool == "list_alarms"  # type: ignore[union-attr]
    assert "did you mean 'list_alarms'" in report.errors[0].message
    # Once the tool exists, the newer version serves.
    report = registry.recheck(tools={*TOOLS, "list_alarmz"})
    assert report.changed == ["order"]
    assert registry.get("order").spec.nodes[0].tool == "list_alarmz"  # type: ignore[union-attr]


def test_sub_workflows_must_be_serving_and_must_not_nest_in_a_loop(tmp_path: Path) -> None:
    def calling(name: str, other: str) -> str:
        return flow(name, extra=f"  - {{id: call, kind: workflow, workflow: {other}}}\n")

    write(tmp_path, "outer.yaml", calling("outer", "inner"))
    registry = WorkflowRegistry(tmp_path)
    registry.reload()
    assert registry.names() == []
    [problem] = registry.errors
    assert (problem.node, problem.line) == ("call", 5)
    assert problem.message.startswith("workflow: 'inner' is not loaded")
    write(tmp_path, "inner.yaml", flow("inner"))
    report = registry.reload()
    assert report.added == ["inner", "outer"]
    write(tmp_path, "inner.yaml", calling("inner", "outer"))
    registry.reload()
    assert registry.names() == []
    messages = sorted(p.message for p in registry.errors)
    assert messages[0].startswith("workflow: runs 'inner', which runs this one again")
    assert "(outer → inner → outer)" in messages[0]


def test_the_folder_may_be_missing(tmp_path: Path) -> None:
    registry = WorkflowRegistry(tmp_path / "nowhere")
    assert registry.reload().changed_anything is False
    assert registry.names() == []


async def within(seconds: float, condition: Callable[[], bool]) -> bool:
    """Whether ``condition`` holds within ``seconds``."""
    for _ in range(int(seconds / 0.05)):
        if condition():
            return True
        await asyncio.sleep(0.05)
    return condition()


async def test_a_saved_file_serves_within_two_seconds(tmp_path: Path) -> None:
    folder = tmp_path / "workflows"
    registry = WorkflowRegistry(folder)
    registry.reload()
    watcher = start_workflow_watcher(registry)
    try:
        await asyncio.sleep(0.3)  # let the watcher settle
        write(folder, "alarms.yaml", flow("alarms"))
        assert await within(2.0, lambda: "alarms" in registry)
        (folder / "alarms.yaml").unlink()
        assert await within(2.0, lambda: "alarms" not in registry)
    finally:
        await stop_workflow_watcher(*watcher)


def test_files_whose_aliases_expand_without_end_are_reported_and_the_rest_load(
    tmp_path: Path,
) -> None:
    write(tmp_path, "alarms.yaml", flow("alarms"))
    registry = WorkflowRegistry(tmp_path, tools=TOOLS)
    registry.reload()
    write(tmp_path, "anchor.yaml", "name: anchor\ndescription: &a [*a]\nnodes: []\n")
    write(tmp_path, "laughs.yaml", "name: laughs\nnodes: []\n" + alias_bomb())
    write(tmp_path, "orders.yaml", flow("orders"))
    started = time.perf_counter()
    report = registry.reload()  # once a RecursionError: this change, and every later one, lost
    assert time.perf_counter() - started < 2.0
    assert report.added == ["orders"]
    assert registry.names() == ["alarms", "orders"]
    found = {(Path(p.file).name, p.line): p.message for p in registry.errors}
    assert "an alias to &a is inside the node it names" in found["anchor.yaml", 2]
    assert found["laughs.yaml", 8].startswith("&l5 expands to more than 250,000 values")


def test_an_unexpected_error_reading_one_file_is_its_problem_and_the_rest_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks = loader.check_templates

    def buggy(spec: Any, flow: Any) -> Any:
        if spec.name == "orders":
            raise RuntimeError("a bug in a check")
        return checks(spec, flow)

    monkeypatch.setattr(loader, "check_templates", buggy)
    write(tmp_path, "alarms.yaml", flow("alarms"))
    write(tmp_path, "orders.yaml", flow("orders"))
    registry = WorkflowRegistry(tmp_path, tools=TOOLS)
    registry.reload()
    assert registry.names() == ["alarms"]
    [problem] = registry.errors
    assert problem.file == str(tmp_path / "orders.yaml")
    assert problem.message.startswith("could not be checked: RuntimeError: a bug in a check")


def test_a_broken_file_whose_last_good_version_lost_its_tool_says_both(tmp_path: Path) -> None:
    write(tmp_path, "order.yaml", flow("order", tool="create_work_order"))
    registry = WorkflowRegistry(tmp_path, tools=TOOLS)
    registry.reload()
    write(tmp_path, "order.yaml", "name: order\ndescription: [oops\n")
    registry.reload()
    assert "order" in registry  # the last good version
    registry.recheck(tools={"list_alarms"})
    assert "order" not in registry
    messages = [p.message for p in registry.errors]
    assert messages[0].startswith("is not valid YAML")
    assert "'create_work_order' is not installed" in messages[1]
    with pytest.raises(WorkflowNotFound, match="'create_work_order' is not installed"):
        registry.get("order")


def test_a_sub_workflow_that_can_wait_for_an_approval_is_refused(tmp_path: Path) -> None:
    write(
        tmp_path,
        "outer.yaml",
        flow("outer", extra="  - {id: call, kind: workflow, workflow: middle}\n"),
    )
    write(
        tmp_path,
        "middle.yaml",
        flow("middle", extra="  - {id: sub, kind: workflow, workflow: inner}\n"),
    )
    write(
        tmp_path, "inner.yaml", flow("inner", extra="  - {id: ok, kind: approval, summary: Go?}\n")
    )
    registry = WorkflowRegistry(tmp_path)
    registry.reload()
    assert registry.names() == ["inner"]
    problems = {p.node: p for p in registry.errors}
    assert (problems["sub"].file, problems["sub"].line) == (str(tmp_path / "middle.yaml"), 5)
    assert problems["sub"].message == (
        "workflow: 'inner' can wait for an approval (its node 'ok'), and a sub-workflow "
        "must run to its end inside this node; move the approval into this workflow, before "
        "'sub', or run 'inner' on its own"
    )
    assert problems["call"].message.startswith(
        "workflow: 'middle' can wait for an approval (node 'ok' of middle → inner)"
    )
