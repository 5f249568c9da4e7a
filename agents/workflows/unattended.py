"""Workflow runs nobody attends to: one no process runs (its process stopped or died, nobody
resumed it yet), cancelled at once where a cancel finds it, with its sub-workflow runs, and its
thread told; one whose chat turn failed before it ended, marked so that whoever ends it tells
its thread. A base of ``RunDecisions``, whose ``stop`` ends the first kind here.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from agents.state.documents import Documents
from agents.workflows.cutoffs import end_cancelled, store_cancelled, where_cut
from agents.workflows.definitions import Definitions
from agents.workflows.records import FINAL, RUN, turn_answers
from agents.workflows.stops import parent_run
from agents.workflows.views import RunViews

log = structlog.get_logger("agents.workflows.engine")  # the engine's log, as before

# Told how a run ended or waits again (see ``WorkflowEngine.after_decision``).
ResumedHook = Callable[
    [dict[str, Any], dict[str, Any], list[dict[str, Any]], float], Awaitable[None]
]


class UnattendedRuns(RunViews):
    """Runs no process runs, stopped; runs whose chat turn failed, marked."""

    documents: Documents
    definitions: Definitions
    after_decision: ResumedHook | None

    async def _stop_orphan(self, run_id: str, reason: str) -> dict[str, Any]:
        """End run ``run_id`` CANCELLED if no process runs it (its process stopped or died,
        nobody resumed it yet); its record as it stands."""
        if not await self.leases.claim(run_id):  # under way: here, or in another process
            return await self.get_run(run_id)
        try:
            read = await self.runs.stored(run_id)
            if read["status"] != "RUNNING":
                await self.leases.release(run_id)
                return read
            # Ended as a run stopped where it runs is: the nodes its checkpoint holds, and
            # those it was cut off in, cancelled.
            values, cut = await where_cut(self.definitions, read)
            ran = values.get("nodes") if values else await self.nodes_so_far(read)
            record = dict(read)
            end_cancelled(record, reason, ran or {}, cut)
            # Stored only if nothing was stored since the read: on SQLite the claim above
            # keeps out no other process, which may have ended the run meanwhile, or
            # brought it to wait and decided it (it goes on there).
            stored = await store_cancelled(
                self.runs, record, reason, logger=log, still=lambda now: now == read
            )
        except BaseException:
            await self.leases.release(run_id)
            raise
        if stored is not record:  # changed meanwhile: left as it is
            return stored
        chat_turn = turn_answers(record) and not record.get("decided")
        if self.after_decision is not None and not chat_turn:  # nobody drives it to tell
            try:
                await self.after_decision(record, record, [], time.time())
            except Exception:  # the run is stored; only its telling is lost
                log.exception("workflow.outcome_not_told", run_id=run_id)
        await self._stop_children(run_id, reason)
        return record

    async def _stop_children(self, run_id: str, reason: str) -> None:
        """Stop the sub-workflow runs stored RUNNING whose parent is ``run_id`` (cut off with
        it): ended CANCELLED at once if no process runs them, else asked to stop."""
        for child in await self.documents.find(RUN, status="RUNNING", limit=None):
            if parent_run(child) != run_id:
                continue
            try:
                if (await self._stop_orphan(child["id"], reason))["status"] == "RUNNING":
                    await self.stops.ask(child["id"], reason)  # under way: it stops there
            except Exception:  # it stops once resumed: its parent has ended
                log.exception("workflow.cancel_failed", run_id=child["id"])

    async def turn_failed(self, run_id: str) -> None:
        """The chat turn that started run ``run_id`` failed with the run not ended (left
        RUNNING: its last save failed, say): no turn answers with its end now, so whoever
        ends it (its resumption, a cancel) tells its thread (``turn_answers``). Marked on
        its stored record (kept by a process driving the run meanwhile, when it stores the
        run's end: ``RunRecords.save``); a mark that cannot be stored is logged (its end is
        told to nobody, as before)."""

        def mark(stored: dict[str, Any]) -> dict[str, Any]:
            if stored["status"] in FINAL or stored.get("via") != "chat":
                raise _Unmarked  # ended meanwhile (and told), or no turn's
            return {"turn_failed": True}

        try:
            await self.documents.merge(RUN, run_id, mark)
        except _Unmarked:
            pass
        except Exception:
            log.exception("workflow.turn_failure_not_marked", run_id=run_id)


class _Unmarked(Exception):
    """``UnattendedRuns.turn_failed`` found nothing to mark."""
