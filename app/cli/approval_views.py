"""What ``skilldesk approvals`` shows of an approval: pending, decided (how, by whom, when)
or withdrawn (its run ended without a decision), in words and as JSON; and what a decision
made run."""

from __future__ import annotations

import time
from typing import Any

from pydantic import ValidationError

from agents.workflows.records import approval_node, decision_taken
from app.api.schemas.workflows import RunPublic


def pending_view(
    run: dict[str, Any], waiting: dict[str, Any], asked: float | None
) -> dict[str, Any]:
    """A pending approval as the commands show it."""
    return {
        "approval_id": waiting["approval_id"],
        "status": "pending",
        "run_id": run["id"],
        "run_status": run["status"],
        "workflow": run["workflow"],
        "thread_id": run.get("thread_id"),
        "node": waiting.get("node"),
        "summary": waiting.get("summary"),
        "data": waiting.get("data"),
        "asked": asked,
        "decision": None,
        "error": None,
    }


def past_view(run: dict[str, Any], approval_id: str) -> dict[str, Any]:
    """An approval no longer pending: decided (how, as the run's record keeps it), or
    ``withdrawn`` (its run ended without a decision: cancelled, or failed)."""
    taken = decision_taken(run, approval_id)
    decided = taken is not None or approval_id in run.get("decided", ())
    status = "withdrawn"
    if taken is not None:
        status = "approved" if taken.get("approved") else "rejected"
    elif decided:  # the record no longer shows how (the node was visited again since)
        status = "decided"
    # Taken: how the decision went; withdrawn: what its run waited at when it was cancelled.
    output = taken or run.get("withdrawn") or {}
    return {
        "approval_id": approval_id,
        "status": status,
        "run_id": run["id"],
        "run_status": run["status"],
        "workflow": run["workflow"],
        "thread_id": run.get("thread_id"),
        "node": output.get("node") or approval_node(approval_id, run["id"]),
        "summary": output.get("summary"),
        "data": output.get("data"),
        "asked": output.get("asked") if not taken else None,
        "decision": (
            {k: output.get(k) for k in ("approved", "by", "comment", "at")} if taken else None
        ),
        "error": run.get("error") if status == "withdrawn" else None,
    }


def run_view(record: dict[str, Any]) -> dict[str, Any]:
    """A run as the HTTP API shows it (``RunPublic``): never the record's own bookkeeping
    (its definition's fingerprint, checkpoint, starter...). A record the model refuses (an
    older or damaged one) is shown by the same fields as it stands, not refused: a command
    that has decided a run must still say so."""
    try:
        return RunPublic.model_validate(record).model_dump(mode="json")
    except ValidationError:
        return {k: v for k, v in record.items() if k in RunPublic.model_fields}


def status_words(found: dict[str, Any]) -> str:
    """An approval's status in words."""
    decision = found.get("decision")
    if found["status"] == "pending":
        return "pending"
    if found["status"] == "withdrawn":
        return f"withdrawn: its run ended without a decision ({found.get('error') or '-'})"
    if decision is None:
        return "decided (the run's record no longer says how)"
    return decision_words(decision)


def decision_words(decision: dict[str, Any]) -> str:
    """``approved by alice at 2025-01-31 10:00:00 (comment: 'ok')``."""
    how = "approved" if decision.get("approved") else "rejected"
    by = f"by {decision['by']}" if decision.get("by") else "by an approver not named"
    at = decision.get("at")
    at_time = f" at {when(at, seconds=True)}" if isinstance(at, int | float) else ""
    said = f" (comment: {decision['comment']!r})" if decision.get("comment") else ""
    return f"{how} {by}{at_time}{said}"


def decided_already(run: dict[str, Any], approval_id: str, reason: str) -> str:
    """Why a decision was refused, in the command line's terms: how it was decided, by whom
    and when (so one sent twice can tell whether the first was its own), or that its run
    ended without one; nothing was changed either way."""
    taken = decision_taken(run, approval_id)
    now = f"its run {run['id']} is {run['status']}"
    if taken is None:
        return f"{reason}; nothing was changed ({now})"
    how = decision_words(taken)
    return f"approval {approval_id} was decided already: {how}; nothing was changed ({now})"


def nodes_ran(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, str]]:
    """The nodes the decision made run (new in the record, or visited again), each ``ok``,
    why it failed, or how else it ended (as ``workflows run`` prints them)."""
    old = before.get("nodes") or {}
    ran = []
    for node, state in (after.get("nodes") or {}).items():
        if old.get(node) == state:
            continue
        status = state.get("status")
        mark = "ok" if status == "done" else str(status)
        ran.append((node, f"failed: {state.get('error')}" if status == "failed" else mark))
    return ran


def when(stamp: float | None, *, seconds: bool = False) -> str:
    """A time in the local zone, to the minute (or second); ``-`` for none."""
    form = "%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M"
    return time.strftime(form, time.localtime(stamp)) if stamp else "-"
