"""Templates and the installed world are checked when a workflow loads; the bundled
workflows and the published schema."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import get_args

from agents.skills.registry import SkillRegistry
from agents.workflows.loader import load_workflow
from agents.workflows.registry import skills_world
from agents.workflows.spec import NODE_KINDS, NODE_TYPES, workflow_schema
from tests.workflowkit import HEAD, ROOT, one, problems, write


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


def test_arguments_one_of_several_ways_requires(tmp_path: Path) -> None:
    """A tool whose schema requires one of several argument sets (``anyOf``/``oneOf``) and
    every part of an ``allOf``: a node giving none of the sets is refused at load."""
    stock = {
        "type": "object",
        "anyOf": [{"required": ["sku"]}, {"required": ["query"]}],
        "allOf": [{"required": ["warehouse"]}],
        "properties": {"sku": {}, "query": {}, "warehouse": {}},
    }
    text = HEAD + "nodes:\n  - {id: stock, kind: tool, tool: get_stock, arguments: %s}\n"
    found = problems(tmp_path, text % "{}", tools={"get_stock": stock})
    assert [(p.node, p.message) for p in found] == [
        ("stock", "arguments: tool 'get_stock' needs 'warehouse'"),
        ("stock", "arguments: tool 'get_stock' needs 'sku' or 'query'"),
    ]
    given = "{query: monitor, warehouse: SH-01}"
    loaded = load_workflow(write(tmp_path, text % given), tools={"get_stock": stock})
    assert loaded.name == "demo"


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


def test_a_node_that_fails_the_schema_hides_no_other_node_s_problems(tmp_path: Path) -> None:
    # QA: one pass said only the schema's problem; fixed, only the template's; then the tool.
    found = problems(
        tmp_path,
        HEAD
        + """\
nodes:
  - {id: a, kind: tool, tool: no_such_tool}
  - {id: b, kind: set, values: {y: "{{ nodes.zzz.output }}"}}
  - {id: c, kind: bogus}
  - {kind: notify, message: "{{ nodes.c.output }} {{ inputs.nope }}"}
""",
        tools={"list_alarms"},
    )
    assert [(p.node, p.line, p.message.split(" (")[0]) for p in found] == [
        ("a", 6, "tool: 'no_such_tool' is not installed: no skill offers it"),
        ("b", 7, "values.y: refers to nodes.zzz, which does not exist"),
        ("c", 8, "kind: unknown node kind 'bogus'"),
        ("", 9, "nodes.3.id: is required"),
    ]
    # The node that fails the schema is there all the same (an edge or template may name
    # it); one without an id is not listed as one.
    assert found[1].message.endswith("(the nodes: a, b, c)")


def test_what_needs_the_whole_graph_waits_for_a_node_or_edge_that_fails_the_schema(
    tmp_path: Path,
) -> None:
    found = problems(
        tmp_path,
        HEAD
        + """\
nodes:
  - {id: start, kind: set, values: {}}
  - {id: bridge, kind: set, values: {}, colour: red}
  - {id: end, kind: notify, message: "{{ nodes.start.output }}", timeout_s: 0}
  - {id: gate, kind: approval, summary: Go?, timeout_s: 5}
edges:
  - {from: start, too: bridge}
  - {from: bridge, to: end}
  - {from: end, to: nowhere}
""",
    )
    # No "unreachable" for the nodes after the bridge, nor for the gate: the graph is not
    # the file's; what each node and each edge says on its own is checked.
    assert [(p.node, p.line, p.message.split(";")[0]) for p in found] == [
        ("bridge", 7, "colour: is not a known field"),
        ("end", 8, "timeout_s: Input should be greater than 0"),
        ("gate", 9, "timeout_s: an approval waits for a person's decision without a time "
         "limit"),
        ("", 11, "edges.0.to: is required"),
        ("", 11, "edges.0.too: is not a known field"),
        ("", 13, "edges.2.to: names node 'nowhere', which does not exist (the nodes: "
         "bridge, end, gate, start)"),
    ]  # fmt: skip


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


def test_a_sub_workflows_inputs_are_checked_at_load(tmp_path: Path) -> None:
    # QA: `inputs: {n: 2, bogus: 1}` loaded, then failed when the node ran ("'bogus' is not
    # an input of loop-count"), while a tool node's arguments are checked at load.
    from agents.workflows.spec import WorkflowSpec

    child = WorkflowSpec.model_validate(
        {
            "name": "loop-count",
            "description": "Counts.",
            "inputs": {"n": {"type": "integer"}, "step": {"type": "integer", "required": False}},
            "nodes": [{"id": "one", "kind": "set", "values": {"n": "{{ inputs.n }}"}}],
        }
    )
    text = HEAD + (
        "nodes:\n"
        "  - {id: extra, kind: workflow, workflow: loop-count, inputs: {n: 2, stpe: 1}}\n"
        "  - {id: short, kind: workflow, workflow: loop-count, inputs: {step: 1}}\n"
        "  - {id: fine, kind: workflow, workflow: loop-count, inputs: {n: 3}}\n"
    )
    found = problems(tmp_path, text, workflows={"loop-count": child})
    assert [(p.node, p.line, p.message) for p in found] == [
        ("extra", 6, "inputs.stpe: 'stpe' is not an input of loop-count; did you mean "
         "'step'? (its inputs: n, step)"),
        ("short", 7, "inputs: loop-count requires 'n', which the node does not give"),
    ]  # fmt: skip


def test_a_refusal_of_the_whole_file_salvages_nothing_rather_than_failing() -> None:
    # Review: an error with no location (a validator of the spec's own) was indexed at loc[0].
    from pydantic import ValidationError
    from pydantic_core import InitErrorDetails, PydanticCustomError

    from agents.workflows.salvage import salvage

    whole = InitErrorDetails(
        type=PydanticCustomError("whole", "the file as a whole"), loc=(), input={}
    )
    error = ValidationError.from_exception_data("WorkflowSpec", [whole])
    assert salvage({"nodes": [{"id": "a", "kind": "join"}]}, error) is None
