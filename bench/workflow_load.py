"""Loading a large workflow file: a generated procedure of some 3,000 nodes (fan-outs and
joins, switches, loops, approvals, templates naming earlier nodes), as written and with its
nodes listed backwards; the whole load (``read_workflow``) against its YAML part alone.

Before the checks became one pass over the graph each, the same file took 5.7-6.9 s as
written and 15.5 s backwards (the template check walked the graph back from every node).
Run: .venv/bin/python -m bench.workflow_load
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from agents.workflows.loader import parse_yaml, read_workflow
from bench.common import timed
from tests.workflowkit import big_workflow

BLOCKS = 300  # ten nodes each, and an approval every 50
ROUNDS = 5


def main() -> dict[str, float]:
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        for listing, backwards in (("as written", False), ("backwards", True)):
            path = Path(folder) / f"big-{listing.replace(' ', '-')}.yaml"
            path.write_text(big_workflow(BLOCKS, backwards=backwards), encoding="utf-8")
            nodes, load, yaml = _measure(path)
            figures[f"{listing} load ms"], figures[f"{listing} yaml ms"] = load, yaml
            print(
                f"workflow of {nodes} nodes, {listing}: load {load:.0f} ms "
                f"(of which YAML {yaml:.0f} ms; median of {ROUNDS})"
            )
    return figures


def _measure(path: Path) -> tuple[int, float, float]:
    """The node count, and the median milliseconds of the whole load and of its YAML."""
    text = path.read_text(encoding="utf-8")
    nodes = len(read_workflow(path).spec.nodes)
    load = statistics.median(timed(lambda: read_workflow(path), ROUNDS))
    yaml = statistics.median(timed(lambda: parse_yaml(text, str(path)), ROUNDS))
    return nodes, load, yaml


if __name__ == "__main__":
    main()
