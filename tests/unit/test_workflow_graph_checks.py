"""The graph of a workflow is checked when it loads: missing targets, unreachable nodes,
unbounded loops, joins that can never fire."""

from __future__ import annotations

from pathlib import Path

from agents.workflows.loader import load_workflow
from tests.workflowkit import HEAD, one, problems, write


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


def test_approvals_on_parallel_branches_are_refused(tmp_path: Path) -> None:
    found = one(
        tmp_path,
        HEAD
        + """\
nodes:
  - {id: fan, kind: set, values: {}, next: [ga, gb]}
  - {id: ga, kind: approval, summary: A?, next: both}
  - {id: gb, kind: approval, summary: B?, next: both}
  - {id: both, kind: join}
""",
    )
    assert (found.node, found.line) == ("gb", 8)
    assert found.message == (
        "is an approval on a branch parallel to approval 'ga': both could wait at once, and a "
        "run waits for one decision at a time — put one after the other (an edge ga → gb), "
        "or ask both in one approval"
    )


def test_approvals_in_a_row_or_on_two_cases_of_a_switch_load(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HEAD
        + """\
nodes:
  - {id: pick, kind: switch, cases: [{when: inputs.device_id, goto: ga}], otherwise: gb}
  - {id: ga, kind: approval, summary: A?, next: gc}
  - {id: gb, kind: approval, summary: B?}
  - {id: gc, kind: approval, summary: C?}
""",
    )
    assert load_workflow(path).name == "demo"


def test_a_time_limit_on_an_approval_is_refused(tmp_path: Path) -> None:
    found = one(
        tmp_path,
        HEAD
        + """\
nodes:
  - id: ask
    kind: approval
    summary: Go?
    timeout_s: 60
""",
    )
    assert (found.node, found.line) == ("ask", 9)
    assert found.message == (
        "timeout_s: an approval waits for a person's decision without a time limit; remove "
        "timeout_s from this node"
    )
