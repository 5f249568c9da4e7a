"""Loading a workflow file: every mistake is reported with the file, the node and the line,
each one with a deliberately broken file."""

from __future__ import annotations

import itertools
import json
import textwrap
from pathlib import Path
from typing import Any, get_args

import pytest

from agents.errors import WorkflowLoadError, WorkflowProblem
from agents.skills.registry import SkillRegistry
from agents.workflows.loader import load_workflow
from agents.workflows.registry import skills_world
from agents.workflows.spec import NODE_KINDS, NODE_TYPES, workflow_schema

ROOT = Path(__file__).resolve().parents[2]

HEAD = """\
name: demo
description: A demo workflow.
inputs:
  device_id: {type: string}
"""


def write(tmp_path: Path, text: str, name: str = "demo.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def problems(tmp_path: Path, text: str, **world: Any) -> list[WorkflowProblem]:
    path = write(tmp_path, text)
    with pytest.raises(WorkflowLoadError) as caught:
        load_workflow(path, **world)
    assert all(p.file == str(path) for p in caught.value.problems)
    return caught.value.problems


def one(tmp_path: Path, text: str, **world: Any) -> WorkflowProblem:
    found = problems(tmp_path, text, **world)
    assert len(found) == 1, "\n".join(map(str, found))
    return found[0]


def test_a_good_file_loads_with_its_flow_and_fingerprint(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HEAD
        + """\
nodes:
  - {id: alarms, kind: tool, tool: list_alarms, arguments: {device_id: "{{ inputs.device_id }}"}}
  - {id: tell, kind: notify, message: "{{ nodes.alarms.output | length }} alarms"}
outputs:
  message: "{{ nodes.tell.output }}"
""",
    )
    workflow = load_workflow(path, tools={"list_alarms"})
    assert workflow.name == "demo"
    assert workflow.path == path
    assert workflow.flow.entry == "alarms"
    assert workflow.flow.successors["alarms"] == ["tell"]
    assert len(workflow.fingerprint) == 64
    assert workflow.lines["nodes.1"] == 7


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    problem = one(tmp_path, "name: demo\ndescription: [unclosed\nnodes: []\n")
    assert problem.node == ""
    assert problem.line == 3
    assert "is not valid YAML" in problem.message


def test_a_file_that_is_not_a_mapping(tmp_path: Path) -> None:
    problem = one(tmp_path, "- just\n- a list\n")
    assert problem.message == "must be a YAML mapping with name, description and nodes"


def test_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(WorkflowLoadError, match="is not UTF-8"):
        load_workflow(path)


def test_a_key_given_twice_is_reported_where_the_second_is(tmp_path: Path) -> None:
    problem = one(
        tmp_path,
        HEAD
        + """\
nodes:
  - id: alarms
    kind: tool
    tool: list_alarms
    tool: get_alarm
""",
    )
    assert (problem.node, problem.line) == ("alarms", 9)
    assert problem.message == "tool: is given twice; keep one"


def test_unknown_node_kind_names_the_kinds(tmp_path: Path) -> None:
    problem = one(
        tmp_path,
        HEAD
        + """\
nodes:
  - id: alarms
    kind: tol
    tool: list_alarms
""",
    )
    assert (problem.node, problem.line) == ("alarms", 7)
    assert "unknown node kind 'tol'; did you mean 'tool'?" in problem.message
    assert all(kind in problem.message for kind in NODE_KINDS)


def test_a_node_without_kind(tmp_path: Path) -> None:
    problem = one(tmp_path, HEAD + "nodes:\n  - {id: alarms, tool: list_alarms}\n")
    assert (problem.node, problem.line) == ("alarms", 6)
    assert problem.message.startswith("kind: has no kind; add `kind:` with one of: tool,")


def test_missing_field_points_at_the_node(tmp_path: Path) -> None:
    problem = one(
        tmp_path,
        HEAD
        + """\
nodes:
  - id: ok
    kind: set
    values: {a: 1}
  - id: alarms
    kind: tool
""",
    )
    assert (problem.node, problem.line, problem.message) == ("alarms", 9, "tool: is required")


def test_wrong_type_points_at_the_field(tmp_path: Path) -> None:
    problem = one(
        tmp_path,
        HEAD
        + """\
nodes:
  - id: alarms
    kind: tool
    tool: list_alarms
    timeout_s: soon
""",
    )
    assert (problem.node, problem.line) == ("alarms", 9)
    assert problem.message.startswith("timeout_s: Input should be a valid number")


def test_unknown_field_lists_the_fields_of_its_kind(tmp_path: Path) -> None:
    problem = one(
        tmp_path,
        HEAD
        + """\
nodes:
  - id: alarms
    kind: tool
    tool: list_alarms
    args: {}
""",
    )
    assert (problem.node, problem.line) == ("alarms", 9)
    assert "args: is not a known field" in problem.message
    assert "a tool node has: id, label, next" in problem.message
    assert "arguments" in problem.message


def test_a_union_field_reports_one_message(tmp_path: Path) -> None:
    problem = one(
        tmp_path,
        HEAD
        + """\
nodes:
  - {id: alarms, kind: tool, tool: list_alarms, on_error: retry}
""",
    )
    assert problem.message == "on_error: must be fail, continue or {goto: <node id>}"
    assert problem.line == 6


def test_a_bad_node_id_says_what_an_id_is(tmp_path: Path) -> None:
    problem = one(tmp_path, HEAD + "nodes:\n  - {id: Check-It, kind: join}\n")
    assert "'Check-It' is not a valid node id" in problem.message


def test_every_schema_problem_is_reported_at_once(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        """\
name: Demo Flow
nodes:
  - {id: a, kind: tool}
  - {id: b, kind: nope}
edges:
  - {from: a, too: b}
""",
    )
    assert [(p.node, p.line, p.message.split(":")[0]) for p in found] == [
        ("", 1, "name"),
        ("", 1, "description"),
        ("a", 3, "tool"),
        ("b", 4, "kind"),
        ("", 6, "edges.0.to"),
        ("", 6, "edges.0.too"),
    ]


def test_duplicate_node_id(tmp_path: Path) -> None:
    problem = one(
        tmp_path,
        HEAD
        + """\
nodes:
  - {id: tell, kind: notify, message: one}
  - {id: tell, kind: notify, message: two}
""",
    )
    assert (problem.node, problem.line) == ("tell", 7)
    assert problem.message.startswith("id: duplicate node id 'tell' (nodes.0 has it too)")


def test_every_kind_of_target_naming_a_missing_node(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        HEAD
        + """\
nodes:
  - id: start
    kind: switch
    cases:
      - {when: "inputs.device_id", goto: fix}
    otherwise: finsh
  - id: fix
    kind: approval
    summary: Fix it?
    on_reject: nobody
    on_error: {goto: help}
    next: [finish, later]
  - {id: finish, kind: notify, message: done}
edges:
  - {from: start, to: fix}
  - {from: fix, to: finish}
  - {from: finish, to: archive}
""",
    )
    assert [(p.node, p.line, p.message) for p in found] == [
        ("start", 10, "otherwise: names node 'finsh', which does not exist; did you mean "
         "'finish'? (the nodes: finish, fix, start)"),
        ("fix", 14, "on_reject: names node 'nobody', which does not exist (the nodes: "
         "finish, fix, start)"),
        ("fix", 15, "on_error.goto: names node 'help', which does not exist (the nodes: "
         "finish, fix, start)"),
        ("fix", 16, "next.1: names node 'later', which does not exist (the nodes: finish, "
         "fix, start)"),
        ("", 21, "edges.2.to: names node 'archive', which does not exist (the nodes: "
         "finish, fix, start)"),
    ]  # fmt: skip


def test_a_case_naming_a_missing_node(tmp_path: Path) -> None:
    problem = one(
        tmp_path,
        HEAD
        + """\
nodes:
  - id: start
    kind: switch
    cases:
      - {when: "true", goto: done}
      - {when: "false", goto: gone}
  - {id: done, kind: notify, message: done}
""",
    )
    assert (problem.node, problem.line) == ("start", 10)
    assert problem.message.startswith("cases.1.goto: names node 'gone', which does not exist")


def test_an_unreachable_node(tmp_path: Path) -> None:
    problem = one(
        tmp_path,
        HEAD
        + """\
nodes:
  - {id: one, kind: notify, message: one, next: three}
  - {id: two, kind: notify, message: two}
  - {id: three, kind: notify, message: three}
""",
    )
    assert (problem.node, problem.line) == ("two", 7)
    assert problem.message.startswith("is unreachable: nothing leads to it from the first node")


def test_a_node_after_a_switch_in_listed_order_is_not_reached_by_falling_through(
    tmp_path: Path,
) -> None:
    problem = one(
        tmp_path,
        HEAD
        + """\
nodes:
  - {id: choose, kind: switch, cases: [{when: "true", goto: yes_}]}
  - {id: after, kind: notify, message: after}
  - {id: yes_, kind: notify, message: chosen}
""",
    )
    assert problem.node == "after"
    assert "a switch does not fall through" in problem.message


def test_a_loop_without_a_bound(tmp_path: Path) -> None:
    text = (
        HEAD
        + """\
nodes:
  - {id: poll, kind: tool, tool: list_alarms, next: wait}
  - id: wait
    kind: switch
    cases: [{when: "nodes.poll.output", goto: poll}]
    otherwise: done
  - {id: done, kind: notify, message: done}
"""
    )
    problem = one(tmp_path, text)
    assert (problem.node, problem.line) == ("poll", 6)
    assert "is on a loop with no bound (poll → wait → poll)" in problem.message
    assert "max_visits" in problem.message
    bounded = text.replace("next: wait}", "next: wait, max_visits: 5}")
    assert load_workflow(write(tmp_path, bounded)).flow.cycles() == [["poll", "wait"]]


def test_a_join_with_one_incoming_edge(tmp_path: Path) -> None:
    problem = one(
        tmp_path,
        HEAD
        + """\
nodes:
  - {id: one, kind: notify, message: one}
  - {id: both, kind: join}
""",
    )
    assert (problem.node, problem.line) == ("both", 7)
    assert "is a join with 1 incoming edge(s)" in problem.message


def test_a_join_of_two_cases_of_one_switch_can_never_fire(tmp_path: Path) -> None:
    problem = one(
        tmp_path,
        HEAD
        + """\
nodes:
  - id: choose
    kind: switch
    cases: [{when: "inputs.device_id", goto: left}]
    otherwise: right
  - {id: left, kind: notify, message: left, next: both}
  - {id: right, kind: notify, message: right, next: both}
  - {id: both, kind: join}
""",
    )
    assert (problem.node, problem.line) == ("both", 12)
    assert problem.message.startswith(
        "can never fire: 'left' runs only when switch 'choose' goes to 'left', 'right' only "
        "when switch 'choose' goes to 'right'"
    )


def test_a_join_of_a_branch_and_a_parallel_path_may_wait_for_ever(tmp_path: Path) -> None:
    problem = one(
        tmp_path,
        HEAD
        + """\
nodes:
  - {id: start, kind: set, values: {}, next: [check, stock]}
  - {id: stock, kind: tool, tool: get_stock, next: both}
  - id: check
    kind: approval
    summary: Go on?
    on_reject: refused
  - {id: refused, kind: notify, message: refused, next: both}
  - {id: both, kind: join}
""",
    )
    assert problem.node == "both"
    assert problem.message.startswith(
        "may wait for ever: 'refused' runs only when approval 'check' is rejected, 'stock' "
        "runs without that"
    )


def test_a_branch_into_a_join(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        HEAD
        + """\
nodes:
  - {id: start, kind: set, values: {}, next: [a, b]}
  - {id: a, kind: notify, message: a, next: both, on_error: {goto: both}}
  - {id: b, kind: notify, message: b, next: both}
  - {id: both, kind: join}
""",
    )
    assert any(
        p.node == "both" and p.message.startswith("is a join, yet 'a' branches to it")
        for p in found
    )


def test_a_join_of_parallel_branches_after_a_decision_loads(tmp_path: Path) -> None:
    workflow = load_workflow(
        write(
            tmp_path,
            HEAD
            + """\
nodes:
  - id: choose
    kind: switch
    cases: [{when: "inputs.device_id", goto: fork}]
    otherwise: done
  - {id: fork, kind: set, values: {}, next: [a, b]}
  - {id: a, kind: notify, message: a, next: both}
  - {id: b, kind: notify, message: b, next: both}
  - {id: both, kind: join, next: done}
  - {id: done, kind: notify, message: done}
""",
        )
    )
    assert workflow.flow.incoming["both"] == ["a", "b"]


def test_template_syntax_error(tmp_path: Path) -> None:
    problem = one(
        tmp_path,
        HEAD
        + """\
nodes:
  - id: tell
    kind: notify
    message: "{{ inputs.device_id }"
""",
    )
    assert (problem.node, problem.line) == ("tell", 8)
    assert problem.message.startswith("message: template syntax error:")


def test_switch_condition_syntax_error(tmp_path: Path) -> None:
    problem = one(
        tmp_path,
        HEAD
        + """\
nodes:
  - id: choose
    kind: switch
    cases:
      - {when: "inputs.device_id ==", goto: done}
  - {id: done, kind: notify, message: done}
""",
    )
    assert (problem.node, problem.line) == ("choose", 9)
    assert problem.message.startswith("cases.0.when: template syntax error")


def test_a_switch_condition_in_braces_says_to_drop_them(tmp_path: Path) -> None:
    problem = one(
        tmp_path,
        HEAD
        + """\
nodes:
  - {id: choose, kind: switch, cases: [{when: "{{ inputs.device_id }}", goto: done}]}
  - {id: done, kind: notify, message: done}
""",
    )
    assert (problem.node, problem.line) == ("choose", 6)
    assert problem.message == "cases.0.when: a condition is an expression: write it without {{ }}"


def test_templates_that_name_what_is_not_there(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        HEAD
        + """\
nodes:
  - id: alarms
    kind: tool
    tool: list_alarms
    arguments:
      device_id: "{{ inputs.device }}"
      since: "{{ nodes.later.output }}"
      limit: "{{ nodes.alarms.output }}"
      status: "{{ device_id }}"
      severity: "{{ nodes['nowhere'] }}"
  - {id: later, kind: notify, message: "{{ nodes.alarms.output | lenght }}"}
outputs:
  message: "{{ nodes.later.output }} {{ inputs['device_id'] }} {{ outputz }}"
""",
    )
    got = [(p.node, p.line, p.message.partition(" (known: ")[0]) for p in found]
    assert got == [
        ("alarms", 10, "arguments.device_id: refers to inputs.device, which is not declared; "
         "did you mean 'device_id'? (the inputs: device_id)"),
        ("alarms", 11, "arguments.since: refers to nodes.later, a node that cannot have run "
         "before it (no path leads from it here)"),
        ("alarms", 12, "arguments.limit: refers to nodes.alarms, its own output"),
        ("alarms", 13, "arguments.status: refers to 'device_id', which templates do not have; "
         "they see inputs, nodes, run — did you mean inputs.device_id?"),
        ("alarms", 14, "arguments.severity: refers to nodes.nowhere, which does not exist "
         "(the nodes: alarms, later)"),
        ("later", 15, "message: unknown filter 'lenght'; did you mean 'length'?"),
        ("", 17, "outputs.message: refers to 'outputz', which templates do not have; they "
         "see inputs, nodes, run"),
    ]  # fmt: skip
    assert found[5].message.endswith(" more)")  # the known filters, a dozen of them listed


def test_templates_may_use_their_own_names_run_and_any_reachable_node_in_outputs(
    tmp_path: Path,
) -> None:
    load_workflow(
        write(
            tmp_path,
            HEAD
            + """\
nodes:
  - id: alarms
    kind: tool
    tool: list_alarms
    arguments: {device_id: "{{ inputs.device_id }} {{ run.id }}"}
  - id: choose
    kind: switch
    cases: [{when: "nodes.alarms.output | length > 0", goto: tell}]
    otherwise: quiet
  - id: tell
    kind: notify
    message: >-
      {% set first = nodes.alarms.output[0] %}{{ first.message }}
      {% for a in nodes.alarms.output %}{{ loop.index }} {{ a.code }}{% endfor %}
      {{ range(3) | list }} {{ nodes.choose.output }}
  - {id: quiet, kind: notify, message: nothing}
outputs:
  message: "{{ nodes.tell.output if nodes.tell is defined else nodes.quiet.output }}"
""",
        )
    )


INSTALLED_HEAD = (
    HEAD
    + """\
nodes:
  - id: alarms
    kind: tool
    tool: list_alarm
  - {id: order, kind: tool, tool: get_order, arguments: {id: ORD1001}}
  - {id: diagnose, kind: expert, skill: maintenance, prompt: Why?, model: smart}
  - {id: write, kind: llm, prompt: Write., model: fast}
  - {id: sub, kind: workflow, workflow: other-flow}
"""
)


def test_installed_world_tools_skills_profiles_and_workflows(tmp_path: Path) -> None:
    tools = {
        "list_alarms": {"type": "object", "properties": {}},
        "get_order": {
            "type": "object",
            "additionalProperties": False,
            "required": ["order_id"],
            "properties": {"order_id": {"type": "string"}},
        },
    }
    found = problems(
        tmp_path,
        INSTALLED_HEAD,
        tools=tools,
        skills={"maintenance-kb"},
        profiles={"default", "fast"},
        workflows={"other"},
    )
    assert [(p.node, p.line, p.message) for p in found] == [
        ("alarms", 8, "tool: 'list_alarm' is not installed: no skill offers it; did you mean "
         "'list_alarms'? (the tools: get_order, list_alarms)"),
        ("order", 9, "arguments: tool 'get_order' takes no argument 'id' (its arguments: "
         "order_id)"),
        ("order", 9, "arguments: tool 'get_order' needs 'order_id'"),
        ("diagnose", 10, "skill: 'maintenance' is not installed; did you mean "
         "'maintenance-kb'? (the skills: maintenance-kb)"),
        ("diagnose", 10, "model: profile 'smart' is not configured (the profiles: default, "
         "fast)"),
        ("sub", 12, "workflow: 'other-flow' is not loaded; did you mean 'other'? (the "
         "workflows: other)"),
    ]  # fmt: skip


def test_the_installed_world_is_checked_only_when_given(tmp_path: Path) -> None:
    assert load_workflow(write(tmp_path, INSTALLED_HEAD)).name == "demo"


def test_a_workflow_that_runs_itself(tmp_path: Path) -> None:
    problem = one(tmp_path, HEAD + "nodes:\n  - {id: again, kind: workflow, workflow: demo}\n")
    assert (problem.node, problem.line) == ("again", 6)
    assert "runs its own workflow" in problem.message


def test_file_and_installed_problems_come_together_by_line(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        HEAD
        + """\
nodes:
  - {id: a, kind: tool, tool: nope}
  - {id: b, kind: notify, message: "{{ inputs.x }}"}
""",
        tools=set(),
    )
    assert [(p.node, p.line) for p in found] == [("a", 6), ("b", 7)]


def test_the_bundled_workflows_load_against_the_bundled_skills() -> None:
    skills = SkillRegistry(ROOT / "skills")
    skills.reload()
    names = []
    for path in sorted((ROOT / "workflows").glob("*.yaml")):
        first = path.read_text(encoding="utf-8").splitlines()[0]
        assert first == "# yaml-language-server: $schema=../agents/workflows/workflow.schema.json"
        workflow = load_workflow(path, **skills_world(skills), workflows=set())
        names.append(workflow.name)
        assert path.stem == workflow.name
    assert names == ["announcement", "equipment-maintenance", "order-overview", "refund-request"]


def test_the_bundled_workflows_take_their_inputs_from_their_examples() -> None:
    import re

    for path in sorted((ROOT / "workflows").glob("*.yaml")):
        spec = load_workflow(path).spec
        for example in spec.intent.examples:
            for name, given in spec.inputs.items():
                if given.required and given.default is None:
                    assert given.pattern, f"{spec.name}: {name} has no pattern"
                    assert re.search(given.pattern, example), f"{spec.name}: {name} in {example}"


def test_the_readme_example_loads_against_the_bundled_skills(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Workflows") :]
    example = section[section.index("```yaml\n") + 8 : section.index("```\n", 8)]
    skills = SkillRegistry(ROOT / "skills")
    skills.reload()
    path = tmp_path / "example.yaml"
    path.write_text(example, encoding="utf-8")
    workflow = load_workflow(path, **skills_world(skills), workflows=set())
    assert [n.kind for n in workflow.spec.nodes] == [
        "tool", "switch", "set", "approval", "notify", "notify",
    ]  # fmt: skip


def test_published_workflow_schema_matches_the_model() -> None:
    published = ROOT / "agents" / "workflows" / "workflow.schema.json"
    assert json.loads(published.read_text(encoding="utf-8")) == workflow_schema(), (
        "regenerate: python -c 'import json; from agents.workflows.spec import workflow_schema; "
        "print(json.dumps(workflow_schema(), indent=2))' > agents/workflows/workflow.schema.json"
    )


def test_every_node_kind_has_its_model() -> None:
    assert tuple(NODE_TYPES) == NODE_KINDS
    for kind, model in NODE_TYPES.items():
        assert get_args(model.model_fields["kind"].annotation) == (kind,)


def test_a_long_workflow_does_not_exhaust_the_stack() -> None:
    from agents.workflows.flow import Flow

    ids = [f"n{i}" for i in range(5000)]
    chain = Flow(ids[0], {a: [b] for a, b in itertools.pairwise(ids)}, {}, {})
    assert chain.cycles() == []
    looped = Flow(ids[0], {**chain.successors, ids[-1]: [ids[0]]}, {}, {})
    assert [len(c) for c in looped.cycles()] == [5000]
