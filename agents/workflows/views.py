"""The workflow engine's reading side and its orphans: execution records, listings and the
approvals inbox (``RunRecords``), runs no process runs found and resumed (``Orphans``), and
letting runs go when the service stops. A base of ``WorkflowEngine``, which sets its parts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from agents.workflows.leases import RunLeases
from agents.workflows.orphans import Orphans
from agents.workflows.records import RunRecords, graph_config, node_record
from agents.workflows.stops import RunStops


class RunViews:
    """Execution records, approvals and orphans, through the engine's parts."""

    checkpointer: BaseCheckpointSaver[Any] | None
    leases: RunLeases
    runs: RunRecords
    stops: RunStops
    _orphans: Orphans

    # Orphans: runs no process runs (see ``Orphans``).

    async def orphans(self) -> list[str]:
        """Runs left RUNNING that no process runs (see ``Orphans.find``)."""
        return await self._orphans.find()

    async def resume_orphans(self, run_ids: list[str] | None = None) -> list[str]:
        """Resume those of ``run_ids`` (by default, ``orphans`` now) that this process claims;
        returns them (see ``Orphans.resume``)."""
        return await self._orphans.resume(run_ids)

    async def keep_resuming(self, interval_s: float) -> None:
        """Look for orphans every ``interval_s`` and resume them (see
        ``Orphans.keep_resuming``)."""
        await self._orphans.keep_resuming(interval_s)

    async def aclose(self, wait_s: float = 5.0) -> list[str]:
        """Stop running workflows (the service stops, its grace period over): the runs under
        way here are let go while the store is still open (see ``RunLeases.let_go``). Returns
        every run no process runs now (those cut off here, whether their task let go before
        this or in it, and any other orphan), for the other processes to resume at once."""
        await self.leases.let_go(wait_s)
        return await self.orphans()

    # Records (see ``RunRecords``).

    async def get_run(self, run_id: str) -> dict[str, Any]:
        """A run's execution record (see ``RunRecords.get``: raises ``RunNotFound``)."""
        return await self.runs.get(run_id)

    async def look(self, run_id: str) -> dict[str, Any]:
        """A run's execution record as a reader sees it (``GET /v1/workflow-runs/{id}``): one
        under way in another process (or cut off) shows the nodes its checkpoints hold so far
        (its record is stored only when it waits or ends), and whether a cancel was asked
        (``cancel_requested``); one under way here is written through already. Raises
        ``RunNotFound``."""
        record = await self.get_run(run_id)
        if record["status"] != "RUNNING" or run_id in self.runs.under_way:
            return record
        record["nodes"] = {**record["nodes"], **await self.nodes_so_far(record)}
        if not record.get("cancel_requested") and await self.stops.requested(run_id):
            record["cancel_requested"] = True
        return record

    async def nodes_so_far(self, record: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """The nodes ``record``'s run ran, as its last checkpoint holds them (a fork under
        way elsewhere: as its first); none without a checkpointer."""
        if self.checkpointer is None:
            return {}
        saved = await self.checkpointer.aget_tuple(graph_config(record))
        if saved is None:
            return {}
        nodes = saved.checkpoint.get("channel_values", {}).get("nodes") or {}
        return {k: node_record(v) for k, v in nodes.items() if isinstance(v, dict)}

    async def list_runs(
        self, *, workflow: str | None = None, status: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The ``limit`` newest execution records of ``workflow`` (see
        ``RunRecords.listed``)."""
        return await self.runs.listed(workflow=workflow, status=status, limit=limit)

    async def runs_page(
        self,
        *,
        workflow: str | None = None,
        status: str | None = None,
        limit: int = 100,
        where: Callable[[dict[str, Any]], Awaitable[bool]] | None = None,
        after: str | None = None,
        scan: int = 2_000,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of execution records and the cursor to go on from (see
        ``RunRecords.page``: raises ``ValueError`` for a malformed cursor)."""
        return await self.runs.page(
            workflow=workflow, status=status, limit=limit, where=where, after=after, scan=scan
        )

    async def approvals(self, limit: int = 500) -> list[dict[str, Any]]:
        """The ``limit`` newest pending approvals (see ``approvals_page``)."""
        return (await self.approvals_page(limit))[0]

    async def approvals_page(
        self, limit: int = 500, after: str | None = None, thread_id: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of the approvals inbox and the next page's cursor (see
        ``RunRecords.approvals_page``: raises ``ValueError`` for a malformed cursor)."""
        return await self.runs.approvals_page(limit, after, thread_id)

    async def waiting(self) -> int:
        """How many approvals wait, in all (see ``RunRecords.waiting``)."""
        return await self.runs.waiting()
