"""Execution records: what a workflow run did, kept beside its checkpoints.

A record says a run's status (RUNNING, WAITING for an approval, or one of ``FINAL``) and, per
node, its status, time and output or error. While a run goes on here its record is held in
memory and written through (``under_way``); otherwise the stored one is the truth, whatever
process wrote it. Listings page through the store, newest first; the approvals inbox is the
pending approvals of the runs stored WAITING.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.runnables import RunnableConfig

from agents import metrics
from agents.errors import AlreadyDecided, ApprovalNotFound, RunNotFound
from agents.state.documents import REMOVED, Documents
from agents.workflows.definitions import LoadedWorkflow
from agents.workflows.leases import RunLeases

RUN = "workflow_run"  # the documents' kind
FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
# The last of a run's events (``last_event``): the run waits for a decision, or is over.
LAST_EVENTS = ("workflow_waiting", "workflow_ended")
_PAGE = 200  # records read at a time by a listing that filters them


class _Refused(Exception):
    """A conditional save (``RunRecords.save_if``) found the run changed: nothing written."""


class RunRecords:
    """The execution records of workflow runs: those under way here, and the stored ones.

    Args:
        documents: Where records are kept (beside the checkpoints).
        leases: Which process runs a run (a stored RUNNING record always has a live lease).
    """

    def __init__(self, documents: Documents, leases: RunLeases) -> None:
        self.documents = documents
        self.leases = leases
        self.under_way: dict[str, dict[str, Any]] = {}  # runs going on here, written through

    async def get(self, run_id: str) -> dict[str, Any]:
        """A run's execution record.

        Raises:
            RunNotFound: for an unknown id.
        """
        # What this process holds is written through; else the store's (another's, or one
        # cut off here) is the truth.
        live = self.under_way.get(run_id) if self.leases.holds(run_id) else None
        record = live or await self.documents.get(RUN, run_id)
        if record is None:
            raise RunNotFound(f"there is no workflow run {run_id!r}")
        return dict(record)

    async def stored(self, run_id: str) -> dict[str, Any]:
        """A run's record as stored (what another process did to it included)."""
        record = await self.documents.get(RUN, run_id)
        if record is None:
            raise RunNotFound(f"there is no workflow run {run_id!r}")
        return dict(record)

    async def save(self, record: dict[str, Any]) -> None:
        """Store ``record``, its run's lease held while it is RUNNING. Stored ended or
        waiting (by whoever drives the run, which read it before), it keeps the mark another
        process may have stored on it meanwhile (``turn_failed``: its chat turn failed),
        ``record`` marked too."""
        # Held before it is stored RUNNING and let go once it is not: a process looking for
        # orphans never finds a run under way without its lease.
        running = record["status"] == "RUNNING"
        if running:
            await self.leases.take(record["id"])
        elif not record.get("turn_failed"):  # read back at its end only (one read a run)
            stored = await self.documents.get(RUN, record["id"])
            if stored is not None and stored.get("turn_failed"):
                record["turn_failed"] = True
        await self.documents.put(
            RUN, record["id"], record, owner=record.get("thread_id"), status=record["status"]
        )
        if not running:
            await self.leases.release(record["id"])

    async def save_if(
        self, record: dict[str, Any], still: Callable[[dict[str, Any]], bool]
    ) -> dict[str, Any] | None:
        """Store ``record``, not RUNNING, if its run as stored still passes ``still``, read
        and written at once (see ``Documents.merge``): what a process stored meanwhile (a
        decision, the run's end) is not written over, also where processes share no leases
        (SQLite). The run's lease is let go either way. None once stored; else the record
        as stored, which ``still`` refused (nothing written).

        Raises:
            RunNotFound: no record of the run is stored (deleted with its thread).
        """
        refused: list[dict[str, Any]] = []

        def replace(stored: dict[str, Any]) -> dict[str, Any]:
            if not still(stored):
                refused.append(stored)
                raise _Refused
            return {**dict.fromkeys(stored, REMOVED), **record}  # a field it dropped: gone

        try:
            written = await self.documents.merge(
                RUN, record["id"], replace, owner=record.get("thread_id"), status=record["status"]
            )
        except _Refused:
            written = None
        await self.leases.release(record["id"])
        if refused:
            return refused[0]
        if written is None:
            raise RunNotFound(f"there is no workflow run {record['id']!r}")
        return None

    async def listed(
        self, *, workflow: str | None = None, status: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Execution records, newest first: the ``limit`` newest of ``workflow`` (and
        ``status``), however many other runs are newer."""
        kept: list[dict[str, Any]] = []
        after: str | None = None
        while len(kept) < limit:
            page, after = await self.page(
                workflow=workflow, status=status, limit=limit - len(kept), after=after
            )
            kept += page
            if after is None:
                break
        return kept

    async def page(
        self,
        *,
        workflow: str | None = None,
        status: str | None = None,
        limit: int = 100,
        where: Callable[[dict[str, Any]], Awaitable[bool]] | None = None,
        after: str | None = None,
        scan: int = 2_000,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """At most ``limit`` execution records of ``workflow`` (and ``status``) that ``where``
        keeps, newest first, from ``after`` (a cursor) on, reading at most ``scan`` records
        (the store indexes neither the workflow nor who may see a run); and the cursor to go
        on from, None once every record was read. A page may hold fewer than ``limit`` (none,
        even) with a cursor: the records read so far held no more.

        Raises:
            ValueError: for a malformed cursor.
        """
        kept: list[dict[str, Any]] = []
        read = 0
        while read < scan:
            rows, more = await self.documents.find_page(
                RUN, status=status, limit=min(_PAGE, scan - read), after=after
            )
            read += len(rows)
            for n, (cursor, record) in enumerate(rows, 1):
                after = cursor
                if workflow not in (None, record["workflow"]):
                    continue
                if where is not None and not await where(record):
                    continue
                kept.append(record)
                if len(kept) == limit:
                    return kept, after if more or n < len(rows) else None
            if not more:
                return kept, None
        return kept, after

    async def approvals_page(
        self, limit: int = 500, after: str | None = None, thread_id: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Pending approvals (of runs on ``thread_id`` when given), newest first, from the
        cursor ``after`` on, each with its run, workflow and thread (the inbox); and the next
        page's cursor (None after the last). ``waiting`` says how many there are in all.

        Raises:
            ValueError: for a malformed cursor.
        """
        rows, more = await self.documents.find_page(
            RUN, owner=thread_id, status="WAITING", limit=limit, after=after
        )
        pending = [_approval(r) for _, r in rows if r.get("waiting")]
        return pending, rows[-1][0] if more else None

    async def waiting(self) -> int:
        """How many approvals wait, in all (the store's count is the true one: every
        process's runs); sets the gauge to it (``GET /metrics`` asks first)."""
        count = await self.documents.count(RUN, status="WAITING")
        metrics.APPROVALS_WAITING.set(count)
        return count


def new_record(
    run_id: str,
    name: str,
    workflow: LoadedWorkflow,
    inputs: dict[str, Any],
    thread_id: str | None,
    user: str | None,
    parent: str | None,
    profile: str | None,
) -> dict[str, Any]:
    """The record of a run of ``workflow`` (by ``name``) that starts now (``user``: who
    started it, recorded for isolation; ``parent``: the run whose node started it)."""
    return {
        "id": run_id,
        "workflow": name,
        "version": workflow.spec.version,
        "fingerprint": workflow.fingerprint,
        "thread_id": thread_id,
        "user": user,
        "parent": parent,
        "profile": profile,
        "status": "RUNNING",
        "started": time.time(),
        "ended": None,
        "inputs": inputs,
        "outputs": {},
        "error": None,
        "nodes": {},
        "waiting": None,
    }


def turn_answers(record: dict[str, Any]) -> bool:
    """Whether the chat turn that started ``record``'s run answers with its end (a cancel's
    too): not once that turn failed with the run not ended (``turn_failed``), when whoever
    ends it (its resumption, a cancel) tells its thread instead."""
    return record.get("via") == "chat" and not record.get("turn_failed")


def pending_approval(record: dict[str, Any], approval_id: str) -> dict[str, Any]:
    """``record``, whose run waits for approval ``approval_id``. A run cancelled while it
    waited keeps the approval it waited at (``withdrawn``); a run that succeeded ended
    waiting at none. Of a run cancelled before records kept it, the record alone cannot tell
    an approval it never asked for from one it ended waiting at: ``RunDecisions.pending``
    asks its workflow.

    Raises:
        AlreadyDecided: it was decided, or the run ended (without a decision on it, if it
            was asked at all).
        ApprovalNotFound: the run, not ended, never asked for it.
    """
    waiting = record.get("waiting") or {}
    if waiting.get("approval_id") == approval_id and record["status"] == "WAITING":
        return record
    if was_decided(record, approval_id):
        raise AlreadyDecided(f"approval {approval_id} was decided already")
    withdrawn = (record.get("withdrawn") or {}).get("approval_id")
    known = withdrawn is not None or record["status"] == "SUCCEEDED"  # what it ended at
    if record["status"] in FINAL and known and withdrawn != approval_id:
        raise ApprovalNotFound(f"there is no approval {approval_id!r}")  # another, or none
    if record["status"] in FINAL:  # ended without a decision: cancelled, or failed
        why = f": {record['error']}" if isinstance(record.get("error"), str) else ""
        raise AlreadyDecided(
            f"approval {approval_id} can no longer be decided: its run {record['id']} "
            f"ended {record['status']} without a decision{why}"
        )
    raise ApprovalNotFound(f"there is no approval {approval_id!r}")


def was_decided(record: dict[str, Any], approval_id: str) -> bool:
    """Whether ``record``'s run was given a decision on ``approval_id`` (going on with it,
    or done since)."""
    return approval_id in record.get("decided", ()) or any(
        (node.get("output") or {}).get("approval_id") == approval_id
        for node in record["nodes"].values()
        if isinstance(node.get("output"), dict)
    )


def approval_node(approval_id: str, run_id: str) -> str | None:
    """The node of run ``run_id`` an approval id names (``<run>-<node>-<visit>``); None for
    an id of another shape."""
    node, _, visit = approval_id.removeprefix(f"{run_id}-").rpartition("-")
    return node if node and visit.isdigit() else None


def _approval(record: dict[str, Any]) -> dict[str, Any]:
    """A pending approval as the inbox lists it."""
    return {
        **record["waiting"],
        "run_id": record["id"],
        "workflow": record["workflow"],
        "thread_id": record["thread_id"],
    }


def last_event(record: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The last of a run's events, with its record: ``workflow_waiting`` when the run stopped
    to wait for a decision (with the approval it waits for: a decision resumes it), else
    ``workflow_ended`` (SUCCEEDED, FAILED or CANCELLED: it is over)."""
    if record["status"] == "WAITING" and record.get("waiting"):
        approval = {k: v for k, v in _approval(record).items() if k != "interrupt_id"}
        return {"type": "workflow_waiting", "record": record, "approval": approval, **extra}
    return {"type": "workflow_ended", "record": record, **extra}


def thread_of(record: dict[str, Any]) -> str:
    """The LangGraph thread of a run (a fork shares the thread of the run it came from)."""
    return str(record.get("graph_thread") or f"workflow:{record['id']}")


def graph_config(record: dict[str, Any]) -> RunnableConfig:
    """The LangGraph config a run goes on from: its thread's newest checkpoint, but for a fork
    (which shares its thread with the run it came from and that run's other forks) its own
    last stored checkpoint: the newest may be another fork's."""
    configurable: dict[str, Any] = {"thread_id": thread_of(record)}
    if record.get("graph_thread") and record.get("checkpoint"):
        configurable["checkpoint_id"] = str(record["checkpoint"])
    return {"configurable": configurable}


def decision_taken(run: dict[str, Any], approval_id: str) -> dict[str, Any] | None:
    """The decision taken on ``approval_id`` as the run's record keeps it: in its approval
    node's output once the run took it, before that as the decision stored for it to take;
    None when the record no longer shows it (a node visited again since, an output cut)."""
    for node in (run.get("nodes") or {}).values():
        output = node.get("output") if isinstance(node, dict) else None
        if isinstance(output, dict) and output.get("approval_id") == approval_id:
            return output if "approved" in output else None
    stored = (run.get("decision") or {}).get("value")
    if (run.get("decided") or [])[-1:] == [approval_id] and isinstance(stored, dict):
        return stored
    return None


def node_record(state: dict[str, Any]) -> dict[str, Any]:
    """A node's state in a run's graph as the run's record shows it (a long output cut)."""
    output = state.get("output")
    text = output if isinstance(output, str) else repr(output)
    return {
        "status": state.get("status"),
        "ms": state.get("ms"),
        "error": state.get("error"),
        "visits": state.get("visits"),
        "output": output if len(text) <= 2000 else text[:2000] + "…",
    }
