"""A workflow as a Mermaid flowchart: nodes with their kind, edges, labelled branches."""

from __future__ import annotations

import textwrap
from pathlib import Path

from agents.workflows.loader import load_workflow
from agents.workflows.mermaid import mermaid

ROOT = Path(__file__).resolve().parents[2]


def test_nodes_edges_and_labelled_branches(tmp_path: Path) -> None:
    path = tmp_path / "refund.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            name: refund
            description: Refund an order.
            inputs: {amount: {type: number}}
            nodes:
              - {id: order, kind: tool, tool: get_order, label: "Look up \\"the\\" order",
                 on_error: {goto: end}}
              - id: check
                kind: switch
                cases: [{when: "nodes.order.output.total <= (inputs.amount | abs)", goto: auto}]
                otherwise: approve
              - {id: auto, kind: set, values: {by: auto}, next: end}
              - {id: approve, kind: approval, summary: Refund?, on_reject: end}
              - {id: end, kind: notify, message: done}
            edges:
              - {from: order, to: check}
              - {from: approve, to: end}
            """
        ),
        encoding="utf-8",
    )
    assert mermaid(load_workflow(path)) == textwrap.dedent(
        """\
        flowchart TD
            order["Look up #quot;the#quot; order<br/>tool"]
            check{"check<br/>switch"}
            auto["auto<br/>set"]
            approve{{"approve<br/>approval"}}
            end_["end<br/>notify"]
            order --> check
            order -.->|"on error"| end_
            check -->|"order.total #lt;= (inputs.amount #124; abs)"| auto
            check -->|otherwise| approve
            auto --> end_
            approve --> end_
            approve -.->|reject| end_
        """
    )


def test_a_join_is_a_circle_and_parallel_edges_are_plain() -> None:
    chart = mermaid(load_workflow(ROOT / "workflows" / "order-overview.yaml"))
    assert '    together(("Both look-ups done<br/>join"))' in chart.splitlines()
    assert {"    order --> stock", "    order --> returns"} <= set(chart.splitlines())
