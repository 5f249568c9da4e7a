"""Cancels of workflow runs under way, wherever they run.

A cancel is asked here (the run's driver sees it at once: the step under way is cut off) and,
on a store several processes share, stored (``STOP``) for the process that runs the run: its
driver reads it after every node, and its lease renewal looks for cancels of the runs it holds
between nodes (a long node there is cut off too). A run's sub-workflows stop with it. A tool
call under way when its step is cut off runs to its end (``agents/skills/once.py``), once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

from agents.workflows.records import FINAL, RUN, RunRecords

STOP = "workflow_run_stop"  # the documents' kind: a cancel asked for a run under way


class RunStops:
    """The cancels asked for runs under way.

    Args:
        records: The execution records (the runs under way here, and their leases).
    """

    def __init__(self, records: RunRecords) -> None:
        self.records = records
        self._asked: dict[str, str] = {}  # run id: why it stops (the reason it ends with)
        self._driving: dict[str, asyncio.Task[Any]] = {}  # run id: the task awaiting its step
        self._sent: dict[str, asyncio.Task[Any]] = {}  # run id: the task a cancel was sent to

    @property
    def shared(self) -> bool:
        """Whether other processes run runs of this store (PostgreSQL)."""
        return self.records.leases.pool is not None

    async def ask(self, run_id: str, reason: str) -> None:
        """Ask run ``run_id`` to stop and end CANCELLED with ``reason``: stored for the
        process that runs it (a shared store), and at once here if it goes on here."""
        if self.shared:
            body = {"run_id": run_id, "reason": reason, "at": time.time()}
            await self.records.documents.put(STOP, run_id, body)
        self.here(run_id, reason)

    def here(self, run_id: str, reason: str) -> None:
        """Stop ``run_id`` in this process: its driver ends it at its next step, or at once
        if it awaits one (the step is cut off), as it does the sub-workflows it runs."""
        self._asked.setdefault(run_id, reason)
        record = self.records.under_way.get(run_id)
        if record is not None:
            record["cancel_requested"] = True
        for child_id, child in list(self.records.under_way.items()):
            if parent_run(child) == run_id and child_id not in self._asked:
                self.here(child_id, reason)
        task = self._driving.get(run_id)
        if task is not None and run_id not in self._sent and not task.done():
            self._sent[run_id] = task
            task.cancel()

    def asked_here(self, run_id: str) -> str | None:
        """Why ``run_id`` stops, if it was asked in this process (or seen asked)."""
        return self._asked.get(run_id)

    async def asked(self, record: dict[str, Any], *, first: bool = False) -> str | None:
        """Why the run of ``record`` stops, if it was asked to (or its parent run was, whose
        node runs it), here or, on a shared store, by any process; else None. ``first``: at
        the start of a stretch of the run (it goes on, resumed say), when a sub-workflow's
        parent run stored as ended stops it too (nothing waits for it any more)."""
        run_id = record["id"]
        if (why := self._asked.get(run_id)) is not None:
            return why
        parent = parent_run(record)
        if first and parent is not None:
            stored = await self.records.documents.get(RUN, parent)
            if stored is not None and stored.get("status") in FINAL:
                why = stored.get("error") if stored["status"] == "CANCELLED" else None
                self._asked[run_id] = str(why or f"its parent run ended {stored['status']}")
                return self._asked[run_id]
        if not self.shared:
            return None
        for asked_id in (run_id, parent_run(record)):
            if asked_id is None:
                continue
            stored = await self.records.documents.get(STOP, asked_id)
            if stored is not None:
                self._asked[run_id] = str(stored.get("reason") or "cancelled")
                return self._asked[run_id]
        return None

    async def sweep(self) -> None:
        """Stop the runs under way here that another process asked to stop (one look at the
        store, from the lease renewal: their step under way is cut off then), and delete the
        stops of runs that ended otherwise (a stop outlasts its request until its run ends)."""
        under_way = self.records.under_way
        if not self.shared:
            return
        documents = self.records.documents
        for stored in await documents.find(STOP, limit=None):
            run_id = str(stored.get("run_id"))
            if run_id in under_way:
                if run_id not in self._asked:
                    self.here(run_id, str(stored.get("reason") or "cancelled"))
                continue
            run = await documents.get(RUN, run_id)
            if run is None or run.get("status") in FINAL:  # ended, or deleted
                await documents.delete(STOP, run_id)

    @contextlib.contextmanager
    def interruptible(self, run_id: str) -> Iterator[None]:
        """While inside, a stop of ``run_id`` cancels the current task (awaiting the run's
        next step); ``caught`` tells that cancel from any other."""
        task = asyncio.current_task()
        assert task is not None
        self._driving[run_id] = task
        try:
            yield
        finally:
            if self._driving.get(run_id) is task:
                del self._driving[run_id]

    def caught(self, run_id: str) -> bool:
        """Whether the cancel the current task caught was the stop of ``run_id`` alone (it is
        taken back: the task goes on to end the run); False for any other cancel."""
        task = self._sent.pop(run_id, None)
        if task is None or task is not asyncio.current_task():
            return False
        return task.uncancel() == 0

    async def done(self, run_id: str, *, seen: bool) -> None:
        """Forget the stop of ``run_id`` (its run is no longer under way here); ``seen``: it
        ended on it, so its stored request goes too."""
        self._asked.pop(run_id, None)
        task = self._sent.pop(run_id, None)
        if task is not None and task is asyncio.current_task() and task.cancelling():
            task.uncancel()  # sent, and dropped by what the task awaited: taken back
        if seen and self.shared:
            await self.records.documents.delete(STOP, run_id)

    async def withdraw(self, run_id: str) -> None:
        """Take back the request to stop ``run_id`` (it is no longer under way anywhere)."""
        if self.records.under_way.get(run_id) is None:
            self._asked.pop(run_id, None)
        if self.shared:
            await self.records.documents.delete(STOP, run_id)

    async def requested(self, run_id: str) -> bool:
        """Whether a stop of ``run_id`` was asked (here, or stored by any process)."""
        if run_id in self._asked:
            return True
        return self.shared and await self.records.documents.get(STOP, run_id) is not None


def parent_run(record: dict[str, Any]) -> str | None:
    """The run whose node runs ``record``'s (a sub-workflow's parent: ``<run id>:<node>#<visit>``,
    as ``executors.subflow`` writes it), else None (a fork's parent, ``<run id>@<node>``, is
    not running it)."""
    head, sep, _ = str(record.get("parent") or "").partition(":")
    return head if sep and "@" not in head else None


def parent_node(record: dict[str, Any]) -> str | None:
    """The node of its parent run that runs ``record``'s (see ``parent_run``), else None."""
    if parent_run(record) is None:
        return None
    return str(record["parent"]).partition(":")[2].rpartition("#")[0]
