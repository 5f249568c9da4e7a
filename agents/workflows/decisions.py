"""Deciding, cancelling and resuming workflow runs: a pending approval's decision stored and
its run gone on with, a waiting run ended without one, a run under way stopped wherever it
runs (one no process runs: see ``unattended``, its base), a run cut off mid-way resumed from
its last checkpoint (with the decision it had not taken yet) or carried on once its process
lets it go. A base of ``WorkflowEngine``, which sets its parts.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from typing import Any

import structlog
from langgraph.types import Command
from pydantic import ValidationError

from agents.errors import (
    AlreadyDecided,
    ApprovalNotFound,
    RunNotFound,
    RunStatusConflict,
    WorkflowNotFound,
)
from agents.workflows.cutoffs import CANCELLED_RUNNING, store_cancelled
from agents.workflows.driver import RunDriver
from agents.workflows.records import (
    FINAL,
    LAST_EVENTS,
    RUN,
    approval_node,
    graph_config,
    pending_approval,
    was_decided,
)
from agents.workflows.stops import parent_node, parent_run
from agents.workflows.unattended import UnattendedRuns

log = structlog.get_logger("agents.workflows.engine")  # the engine's log, as before


class RunDecisions(UnattendedRuns):
    """Approvals decided, waiting runs cancelled, cut-off runs resumed."""

    _locks: dict[str, asyncio.Lock]
    _driver: RunDriver
    _answering: Counter[str]  # run id: the chat turns here that answer with its end

    @contextlib.contextmanager
    def answering(self, run_id: str) -> Iterator[None]:
        """While inside, a chat turn in this process answers with run ``run_id``'s end (it
        follows the run, gone on here or elsewhere): ``after_decision`` does not tell its
        thread of it too."""
        self._answering[run_id] += 1
        try:
            yield
        finally:
            self._answering[run_id] -= 1
            if not self._answering[run_id]:
                del self._answering[run_id]

    async def asked_by(self, approval_id: str) -> dict[str, Any]:
        """The record of the run that asked for approval ``approval_id`` (its id begins
        with the run's).

        Raises:
            ApprovalNotFound: no run by that id, so no approval was ever asked by it.
        """
        try:
            return await self.get_run(approval_id.split("-", 1)[0])
        except RunNotFound:
            raise ApprovalNotFound(f"there is no approval {approval_id!r}") from None

    async def pending(self, record: dict[str, Any], approval_id: str) -> dict[str, Any]:
        """``record``, whose run waits for approval ``approval_id`` (see ``pending_approval``).

        Raises:
            AlreadyDecided: it was decided, or its run ended while it waited (or, its
                definition gone, ended at all: whether it was asked cannot be told).
            ApprovalNotFound: its run never asked for it: an id naming no approval node of
                the run's workflow, though the run ended.
        """
        try:
            return pending_approval(record, approval_id)
        except AlreadyDecided:
            if was_decided(record, approval_id) or await self._may_ask(record, approval_id):
                raise
        raise ApprovalNotFound(f"there is no approval {approval_id!r}")

    async def _may_ask(self, record: dict[str, Any], approval_id: str) -> bool:
        """Whether ``approval_id`` names an approval node of the workflow ``record``'s run
        started with; True when that definition is gone (nothing says otherwise)."""
        node = approval_node(approval_id, record["id"])
        try:
            spec = (await self.definitions.of(record)).spec
        except (WorkflowNotFound, ValidationError):  # gone, or kept but no longer valid
            return True
        return any(n.id == node and n.kind == "approval" for n in spec.nodes)

    async def decide(
        self,
        approval_id: str,
        *,
        approved: bool,
        by: str = "",
        comment: str = "",
        on_start: Callable[[str], None] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Decide a pending approval; the run resumes with no new input. Yields the resumed
        run's events, the last ``workflow_ended``, or ``workflow_waiting`` when it waits at
        another approval. ``on_start`` gets the run's id once the decision is stored and the
        run goes on (as for ``stream``).

        Nothing changes when the decision cannot be applied: the approval stays pending.

        Raises:
            ApprovalNotFound: no pending or past approval by that id (see ``pending``).
            AlreadyDecided: it was decided before, or its run ended while it waited (a 409
                for the API).
            WorkflowNotFound: the run's definition is neither kept nor serving (a run started
                before definitions were kept, whose workflow is withdrawn).
        """
        run_id = approval_id.split("-", 1)[0]
        lock = self._locks.setdefault(run_id, asyncio.Lock())
        async with lock:
            await self.pending(await self.asked_by(approval_id), approval_id)  # without waiting
            # Held, then looked at again as stored: a process that decided it meanwhile has
            # stored the run's next state before letting it go.
            await self.leases.take(run_id)
            try:
                record = await self.pending(await self.runs.stored(run_id), approval_id)
                workflow = await self.definitions.of(record)
                done = record["nodes"]
                missing = self.definitions.workflows.not_installed(workflow.spec, done)
                if approved and missing:  # it would fail past its gate, the approval spent
                    raise RunStatusConflict(
                        f"approval {approval_id} cannot be applied now: the rest of workflow "
                        f"{workflow.name!r} needs what is not installed ({'; '.join(missing)}); "
                        "install it (or reload the skills), then decide again; the approval "
                        "stays pending",
                        code="not_installed",
                    )
                self.definitions.graph(workflow)  # compiled before the record changes
                decision = {"approved": approved, "by": by, "comment": comment, "at": time.time()}
                record = await self._take(record, approval_id, decision)
                interrupt_id = record["decision"]["interrupt_id"]
            except BaseException:
                await self.leases.release(run_id)
                raise
        if on_start is not None:
            on_start(run_id)
        # Addressed to its interrupt: a decision can never answer another gate.
        resume = decision if interrupt_id is None else {interrupt_id: decision}
        driven = self._driver.drive(record, Command(resume=resume), workflow=workflow)
        async with contextlib.aclosing(driven) as events:
            async for event in events:
                yield event

    async def _take(
        self, record: dict[str, Any], approval_id: str, decision: dict[str, Any]
    ) -> dict[str, Any]:
        """Store ``decision`` on ``record``'s run, RUNNING, if the run as stored still waits
        at ``approval_id``, and return its record as stored. Read and written at once (see
        ``Documents.merge``): of processes deciding it at the same instant, one takes it,
        also where they share no leases (SQLite: the service and `skilldesk approvals`).

        Raises:
            AlreadyDecided: another process decided it, or ended its run, first.
            ApprovalNotFound: its run is gone (deleted with its thread).
        """

        def take(stored: dict[str, Any]) -> dict[str, Any]:
            pending_approval(stored, approval_id)  # what another process stored first: a 409
            return {
                "status": "RUNNING",
                "waiting": None,
                "decided": [*stored.get("decided", []), approval_id],  # a late one: a 409
                # Kept until the run has taken it (see ``resume``): a process that dies
                # before its first step would otherwise lose the decision.
                "decision": {
                    "interrupt_id": stored["waiting"].get("interrupt_id"),
                    "value": decision,
                },
            }

        taken = await self.documents.merge(
            RUN, record["id"], take, owner=record.get("thread_id"), status="RUNNING"
        )
        if taken is None:
            raise ApprovalNotFound(f"there is no approval {approval_id!r}")
        return taken

    async def cancel(
        self, run_id: str, reason: str, *, approval_id: str | None = None, wait: bool = True
    ) -> dict[str, Any]:
        """End a waiting run without a decision: its approval leaves the inbox and it never
        resumes (a run not waiting, or with ``approval_id`` waiting at another approval than
        that one, is left as it is). Returns its record. ``wait`` False: while a process
        holds the run (it is deciding it), nothing is waited for: its record is returned
        as it stands, ``RUNNING`` (the decided run goes on there)."""
        lock = self._locks.setdefault(run_id, asyncio.Lock())
        async with lock:
            record = await self.get_run(run_id)
            if record["status"] != "WAITING":
                return record
            # Then looked at again: it may be decided by now.
            if wait:
                await self.leases.take(run_id)
            elif not await self.leases.claim(run_id):  # being decided: it goes on, there
                return {**record, "status": "RUNNING"}
            try:
                record = await self.runs.stored(run_id)
                waits_at = (record.get("waiting") or {}).get("approval_id")
                if record["status"] != "WAITING" or approval_id not in (None, waits_at):
                    await self.leases.release(run_id)
                    return record
                # Stored only if it still waits there as stored: another process (SQLite:
                # no leases across processes) may have decided it since, the run going on.
                record = await store_cancelled(
                    self.runs,
                    # What it waited at stays: an approval it never asked is told from it.
                    {**record, "waiting": None, "withdrawn": record["waiting"]},
                    reason,
                    logger=log,
                    still=_waits_at(waits_at),
                )
            except BaseException:
                await self.leases.release(run_id)
                raise
        return record

    async def stop(self, run_id: str, reason: str) -> dict[str, Any]:
        """End a run that has not ended, CANCELLED with ``reason``: one waiting for an
        approval as ``cancel`` does; one under way wherever it runs, at once here (its step
        under way cut off), at its next node in another process (a long node there is cut
        off within a third of a lease), at once if no process runs it (its process died).
        Waits for it to stop, at most ``lease_s``. Returns its record: as it stands when it
        had ended already, or ended otherwise first (its last node done before the cancel);
        still RUNNING, ``cancel_requested``, when it outlasts the wait (it stops, and its
        thread is told, after its node under way). A run cancelled while it ran says so
        (``cancelled_while``): its thread is told as ``WorkflowEngine.after_decision`` says.

        Raises:
            RunStatusConflict: it is a sub-workflow's run, a step of a run that has not ended
                (``run_is_step``, naming that run: cancelling it stops this one).
        """
        record = await self.get_run(run_id)
        if record["status"] not in FINAL:
            await self._refuse_a_step(record)
        loop = asyncio.get_running_loop()
        deadline, wait = loop.time() + self.leases.lease_s, 0.02
        asked = False
        while True:
            if record["status"] == "WAITING":  # or came to wait before it saw the cancel
                # Not waited for while another process decides it: then it goes on there,
                # and is stopped as a run under way is.
                record = await self.cancel(run_id, reason, wait=False)
            if record["status"] == "RUNNING":  # or decided meanwhile
                if not asked:
                    await self.stops.ask(run_id, reason)
                    asked = True
                record = await self._stop_orphan(run_id, reason)
                if record["status"] == "WAITING":  # held: decided there now, it goes on
                    record = {**record, "status": "RUNNING"}
            if record["status"] != "RUNNING" or loop.time() >= deadline:
                break
            await asyncio.sleep(wait)
            wait = min(wait * 2, 0.5)
            record = await self.get_run(run_id)
        # A run still RUNNING keeps its stop (the answer promises it; its process deletes it
        # once the run ends on it, ``RunStops.sweep`` once it ended otherwise), as it does
        # when the request is cut off (its client went away) before this.
        if record["status"] == "RUNNING":
            record["cancel_requested"] = True
        elif asked:
            await self.stops.withdraw(run_id)
        return record

    async def _refuse_a_step(self, record: dict[str, Any]) -> None:
        """Refuse to stop a sub-workflow's run on its own while the run whose node runs it
        goes on: that node, and so its run, would fail. Its parent's cancel stops it.

        Raises:
            RunStatusConflict: ``run_is_step``, its parent not ended.
        """
        parent_id = parent_run(record)
        if parent_id is None:
            return
        try:
            parent = await self.get_run(parent_id)
        except RunNotFound:  # gone with its thread: nothing goes on to fail
            return
        if parent["status"] in FINAL:
            return
        node = parent_node(record)
        raise RunStatusConflict(
            f"workflow run {record['id']} is a step of workflow run {parent_id} (its node "
            f"{node!r}, workflow {parent['workflow']!r}), which is {parent['status']}: "
            f"cancelled alone it would fail that run; cancel run {parent_id} instead, and "
            "its sub-workflow runs stop with it. Nothing was cancelled",
            code="run_is_step",
        )

    async def resume(self, run_id: str) -> dict[str, Any]:
        """Go on with a run from its last checkpoint (its process died mid-way); finished
        nodes are not run again, side effects are not repeated."""
        record = await self.get_run(run_id)
        last: dict[str, Any] = {"record": record}
        async with contextlib.aclosing(self.going_on(record)) as events:
            async for event in events:
                last = event
        return dict(last["record"])

    async def going_on(
        self,
        record: dict[str, Any],
        *,
        replayed: bool = False,
        usage_sink: Callable[[dict[str, int]], None] | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Go on with ``record``'s run from its last checkpoint (see ``resume``: its lease
        held here) and yield its events, the last one ``replayed`` when asked; a run that
        went on from a decision tells how it ended (``after_decision``) before its last,
        unless a chat turn here answers with it (``answering``). ``usage_sink``: as for
        ``stream`` (a keyed start that follows the run is charged)."""
        run_id = record["id"]
        seen: list[dict[str, Any]] = []
        started = time.time()
        start = await self._decision_not_taken(record)
        driven = self._driver.drive(record, start, usage_sink=usage_sink)
        async with contextlib.aclosing(driven) as events:
            async for event in events:
                last = event.get("type") in LAST_EVENTS and event["record"]["id"] == run_id
                # Decided, or its chat turn failed: nobody else answers with its end. Read
                # from the run as it ended (as stored): its turn may fail while it goes on.
                # Stopped here, one not decided is told by its driver (``RunDriver.stopped``).
                ended = event["record"] if last else {}
                stopped = ended.get("cancelled_while") == CANCELLED_RUNNING
                unanswered = ended.get("decided") or (ended.get("turn_failed") and not stopped)
                told = unanswered and run_id not in self._answering
                if last and self.after_decision is not None and told:
                    try:
                        await self.after_decision(record, dict(event["record"]), seen, started)
                    except Exception:  # the run is stored; only its telling is lost
                        log.exception("workflow.outcome_not_told", run_id=run_id)
                seen.append(event)
                yield {**event, "replayed": True} if last and replayed else event

    async def _decision_not_taken(self, record: dict[str, Any]) -> Command[Any] | None:
        """The decision a run was resumed with, when its process died before the run took it
        (its checkpoint still waits at that gate): given again, rather than the run waiting
        for a decision that every approver is told was made (a 409). None otherwise."""
        decision = record.get("decision")
        if not decision or record.get("status") != "RUNNING":
            return None
        workflow = await self.definitions.of(record)
        state = await self.definitions.graph(workflow).aget_state(graph_config(record))
        interrupt_id = decision.get("interrupt_id")
        if interrupt_id is None:  # a run from before interrupts had ids: its one gate
            return Command(resume=decision["value"]) if len(state.interrupts) == 1 else None
        if any(i.id == interrupt_id for i in state.interrupts):
            log.info("workflow.decision_given_again", run_id=record["id"])
            return Command(resume={interrupt_id: decision["value"]})
        return None

    async def carry_on(self, run_id: str) -> dict[str, Any]:
        """A run left RUNNING (cut off with the run that started it) to its end: gone on
        with here from its last checkpoint, or, while another process holds it, once that
        one lets it go. Returns its record."""
        await self.leases.take(run_id)
        try:
            stored = await self.documents.get(RUN, run_id)
        except BaseException:
            await self.leases.release(run_id)
            raise
        if stored is None or stored["status"] != "RUNNING":  # ended meanwhile, elsewhere
            await self.leases.release(run_id)
            return await self.get_run(run_id)
        return await self.resume(run_id)


def _waits_at(approval_id: str | None) -> Callable[[dict[str, Any]], bool]:
    """Whether a run's record says it waits at ``approval_id``."""

    def waits(record: dict[str, Any]) -> bool:
        waiting = record.get("waiting") or {}
        return record["status"] == "WAITING" and waiting.get("approval_id") == approval_id

    return waits
