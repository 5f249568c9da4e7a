"""Loading a workflow file: YAML and schema mistakes are reported with the file, the node
and the line, each with a deliberately broken file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agents.errors import WorkflowLoadError
from agents.workflows.loader import load_workflow
from agents.workflows.spec import NODE_KINDS
from tests.workflowkit import HEAD, alias_bomb, one, problems, write


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


def test_an_alias_bomb_is_refused_at_once_naming_the_anchor(tmp_path: Path) -> None:
    # 474 bytes that once grew the service to 8.5 GB in 30 s, and `validate` for minutes.
    started = time.perf_counter()
    problem = one(tmp_path, "name: l-laughs\nnodes: []\n" + alias_bomb())
    assert time.perf_counter() - started < 1.0
    assert problem.line == 8
    assert problem.message.startswith("&l5 expands to more than 250,000 values (YAML aliases")


def test_an_alias_inside_its_own_anchor_is_refused_naming_the_line(tmp_path: Path) -> None:
    # Once a RecursionError: the service did not start, and no later reload took effect.
    problem = one(tmp_path, "name: k-anchor\nversion: 1\ndescription: &a [*a]\nnodes: []\n")
    assert (problem.node, problem.line) == ("", 3)
    assert "an alias to &a is inside the node it names" in problem.message


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


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ('{type: object, properties: {code: {type: string, pattern: "(["}}}', "pattern"),
        ('{type: object, properties: {n: {$ref: "#/$defs/missing"}}}', "$defs/missing"),
        ("{type: array, items: {type: string}}", "type: object"),
    ],
)
def test_an_llm_node_schema_that_cannot_check_answers_is_refused_where_it_is(
    tmp_path: Path, schema: str, says: str
) -> None:
    """Checked at load like a skill's tool schemas: it would fail every run at the node."""
    problem = one(
        tmp_path,
        HEAD + f"nodes:\n  - {{id: ask, kind: llm, prompt: hi, schema: {schema}}}\n",
    )
    assert problem.node == "ask"
    assert problem.line == 6
    assert says in problem.message
    assert "schema" in problem.message
