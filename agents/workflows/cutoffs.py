"""How a cancel ends a workflow run under way, wherever it ran (``RunDriver`` here, or
``RunDecisions.stop`` for a run whose process is gone): where the run stood (its state, and the
nodes the cancel cut off, read from its checkpoint when no process saw them start), its record
ended CANCELLED from there (those nodes ``cancelled``, no cancel left asked nor a decision left
to take), and stored.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from agents import metrics
from agents.workflows.definitions import Definitions
from agents.workflows.records import RunRecords, graph_config, node_record

log = structlog.get_logger(__name__)

CANCELLED_RUNNING = "running"  # a record's ``cancelled_while``: cancelled while it ran


@dataclass
class Reached:
    """Where a stretch of a run (one ``RunDriver.drive``) stands as its stream came through:
    what a cancel that cuts it off ends it from."""

    values: dict[str, Any] = field(default_factory=dict)  # its state after its last step
    begun: dict[str, int] = field(default_factory=dict)  # nodes under way: visits before
    noted: set[str] = field(default_factory=set)  # nodes that ran in it (copied as they came)
    graph: Any = None  # its graph and config, once known
    config: Any = None


async def end_stopped(
    definitions: Definitions,
    record: dict[str, Any],
    reason: str,
    reached: Reached,
    *,
    cut_off: bool,
) -> dict[str, Any]:
    """End ``record`` CANCELLED with ``reason`` (``end_cancelled``) on a stop of its run where
    its stretch ``reached`` stood (``cut_off``: its step under way was cut off); returns the
    run's state there."""
    values, cut = await _where_stopped(definitions, record, reached, cut_off=cut_off)
    end_cancelled(record, reason, values.get("nodes") or {}, cut, reached.noted)
    return values


async def _where_stopped(
    definitions: Definitions, record: dict[str, Any], reached: Reached, *, cut_off: bool
) -> tuple[dict[str, Any], dict[str, int]]:
    """The state of ``record``'s run and the nodes a stop cuts off (the visits each made
    before), where its stretch stood (``reached``): the nodes it began, and those its last
    checkpoint has under way when its step was cut off (``cut_off``: a node's start may not
    have come through yet) or nothing of it was seen yet (where it was cut off before, say).
    The state is its checkpoint's there, unless that is older than what was read of it: the
    checkpoint may be a step ahead of the stream's reader, whose chunks of that step are not
    read yet (the nodes cut off and their state are of one step)."""
    values, at = reached.values, dict[str, int]()
    seen = bool(reached.values or reached.noted)
    if cut_off or not seen:
        checked, at = await where_cut(definitions, record, reached.graph, reached.config)
        if checked and _not_older(checked, values):
            values = checked
    under_way = {n: v for n, v in at.items() if n not in reached.noted}
    return values, {**under_way, **reached.begun}


def _not_older(checked: dict[str, Any], values: dict[str, Any]) -> bool:
    """Whether the run's state ``checked`` is at least as far on as ``values``: each node of
    ``values`` visited as often in it (a fork's checkpoint read back is where it began)."""
    nodes, read = checked.get("nodes") or {}, values.get("nodes") or {}
    return all(
        int((nodes.get(n) or {}).get("visits") or 0) >= int((s or {}).get("visits") or 0)
        for n, s in read.items()
    )


async def where_cut(
    definitions: Definitions, record: dict[str, Any], graph: Any = None, config: Any = None
) -> tuple[dict[str, Any], dict[str, int]]:
    """Where ``record``'s run stands as its last checkpoint says: its state (with what the
    nodes of its step under way that finished wrote) and the nodes of that step not finished,
    each with the visits it made before (those a cancel cuts off). Nothing when its state
    cannot be read (its definition gone, say)."""
    try:
        graph = graph or definitions.graph(await definitions.of(record))
        state = await graph.aget_state(config or graph_config(record))
    except Exception:  # its record keeps the nodes it holds
        log.warning("workflow.state_not_read", run_id=record["id"], exc_info=True)
        return {}, {}
    values = dict(state.values or {})
    nodes = values.get("nodes") or {}
    cut = {
        n: int((nodes.get(n) or {}).get("visits") or 0)
        for n in state.next
        if not n.startswith("__")  # LangGraph's own
    }
    return values, cut


def end_cancelled(
    record: dict[str, Any],
    reason: str,
    ran: dict[str, Any],
    cut: dict[str, int],
    noted: set[str] | frozenset[str] = frozenset(),
) -> None:
    """End ``record`` CANCELLED with ``reason`` on a cancel of its run under way, wherever it
    ran (here, or in a process gone): every node it ran so far (``ran``, its graph's state of
    them, those run before a crash or an approval too; those in ``noted`` as ``record``
    holds them) and those it cut off (``cut``, with the visits each made before)
    ``cancelled``; no cancel left asked, nor a decision left to take."""
    nodes = {k: node_record(v) for k, v in ran.items()}
    record["nodes"] = {**record["nodes"], **nodes, **{k: record["nodes"][k] for k in noted}}
    why = f"the run was cancelled while this node ran ({reason})"
    for node, visits in cut.items():
        record["nodes"][node] = {
            "status": "cancelled",
            "ms": None,
            "error": why,
            "visits": visits + 1,
            "output": None,
        }
    record.update(status="CANCELLED", error=reason, cancelled_while=CANCELLED_RUNNING)
    record.pop("cancel_requested", None)
    record.pop("decision", None)  # never taken


async def store_cancelled(
    runs: RunRecords,
    record: dict[str, Any],
    reason: str,
    *,
    logger: Any,
    still: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    """End ``record``'s run (changed in place) CANCELLED with ``reason``, under its lease:
    stored in ``runs`` (the lease let go with it), counted, and logged on ``logger``; returns
    ``record``. ``still``: stored only if the run as stored still passes it (see
    ``RunRecords.save_if``: a decision another process stored meanwhile is not written
    over); else nothing is stored, counted nor logged, ``record`` is left as it was, and
    the record as stored is returned. A save that fails raises, nothing counted."""
    ended = {"status": "CANCELLED", "error": reason, "ended": time.time()}
    if still is None:
        record.update(ended)
        await runs.save(record)
    else:
        refused = await runs.save_if({**record, **ended}, still)
        if refused is not None:
            return refused
        record.update(ended)
    metrics.WORKFLOW_RUNS.labels(record["workflow"], "CANCELLED").inc()
    logger.info("workflow.cancelled", run_id=record["id"], reason=reason)
    return record
