"""The workflow engine: a workflow compiles to a LangGraph graph run with the service's
checkpointer (one checkpoint after every node), on a thread of its own per run.

Each node's output is kept in state under its id; a node runs through its kind's executor
with its retries, timeout and ``on_error``; an approval is an interrupt that waits across
restarts; every run leaves an execution record (status, and per node: status, time, output or
error) beside the checkpoints. A run goes on under the definition it started with (kept
beside the records, by its fingerprint), whatever its file says by the time it resumes.

This module starts, decides, cancels, resumes and forks runs and drives their graphs; its
collaborators keep the rest: ``definitions`` (the definitions runs started with, and their
graphs), ``records`` (execution records, listings, the approvals inbox), ``driver`` (a run's
graph driven, its stream made events and a record), ``forks`` (where a fork starts) and
``orphans`` (runs no process runs, resumed).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import structlog
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command

from agents import metrics
from agents.errors import KeyReused
from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.skills.service import SkillService
from agents.state.documents import Documents, MemoryDocuments
from agents.state.leases import LEASE_S
from agents.workflows.compile import compile_workflow
from agents.workflows.definitions import Definitions, WorkflowSource
from agents.workflows.driver import RunDriver
from agents.workflows.executors import load_executors
from agents.workflows.flow import Flow
from agents.workflows.forks import fork_record, not_ended
from agents.workflows.inputs import check_inputs
from agents.workflows.leases import RunLeases
from agents.workflows.orphans import Orphans
from agents.workflows.records import (
    FINAL,
    RUN,
    RunRecords,
    graph_config,
    new_record,
    pending_approval,
)

log = structlog.get_logger(__name__)


class WorkflowEngine:
    """Runs workflows; keeps their execution records and their approvals.

    Args:
        workflows: Where workflows are found by name (the registry).
        checkpointer: The service's checkpointer (each run is a thread of its own).
        documents: Where execution records are kept (beside the checkpoints).
        skills, gateway, prompts: What the nodes use.
        max_rounds: Tool-calling rounds of an expert node.
        lease_s: How long a run's lease outlives its process (see ``RunLeases``).
    """

    def __init__(
        self,
        workflows: WorkflowSource,
        checkpointer: BaseCheckpointSaver[Any] | None,
        *,
        skills: SkillService | None,
        gateway: ModelGateway,
        prompts: Prompts,
        documents: Documents | None = None,
        max_rounds: int = 5,
        lease_s: float = LEASE_S,
    ) -> None:
        self.workflows = workflows
        self.checkpointer = checkpointer
        self.skills = skills
        self.gateway = gateway
        self.prompts = prompts
        self.documents = documents or MemoryDocuments()
        self.max_rounds = max_rounds
        self._executors = load_executors()
        self._locks: dict[str, asyncio.Lock] = {}
        self.leases = RunLeases(checkpointer, lease_s)  # which process runs a run
        self.runs = RunRecords(self.documents, self.leases)
        compile_graph = functools.partial(compile_workflow, self)
        self.definitions = Definitions(workflows, self.documents, compile_graph)
        self._driver = RunDriver(self.runs, self.definitions)
        self._orphans = Orphans(self.runs, self.resume)
        # Told how a run that goes on from a decision ends (or waits again) when it is
        # resumed here, its deciding process having stopped or died mid-way: the record
        # before and after, the events since, when it started (``WorkflowTurns.resumed``).
        self.after_decision: ResumedHook | None = None

    def flow(self, name: str) -> Flow:
        """The flow of workflow ``name``."""
        return self.workflows.get(name).flow

    # Running.

    async def stream(
        self,
        name: str,
        inputs: dict[str, Any],
        *,
        thread_id: str | None = None,
        profile: str | None = None,
        parent: str | None = None,
        user: str | None = None,
        idempotency_key: str | None = None,
        usage_sink: Callable[[dict[str, int]], None] | None = None,
        on_start: Callable[[str], None] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Start a run and yield its events; the last one is ``workflow_ended`` with the
        record (status SUCCEEDED, FAILED or WAITING for an approval).

        ``usage_sink`` gets what the run's model calls used once it ends or waits (its
        starter's daily spending: a run started by a request; a chat turn counts its own).
        ``on_start`` gets the run's id once its record is stored (a request cut off while
        the run goes on can say which run it was).

        With ``idempotency_key``, the run's id is made from the user, the workflow and the
        key: the same start sent again (a retry after a timeout, by any process) yields the
        first run's record as it stands, once that start is through in this process, and
        starts nothing.

        Raises:
            BadInputs: before the run starts, naming each input that is missing or wrong.
            KeyReused: the key started a run of other inputs.
        """
        workflow = self.workflows.get(name)
        values = check_inputs(workflow.spec, inputs)
        if idempotency_key is None:
            run_id = uuid.uuid4().hex
        else:  # a sub-workflow's key names its parent's node visit: unique without the user
            run_id = keyed_run_id(name, idempotency_key, None if parent else user)
        keyed_lock = self._locks.setdefault(run_id, asyncio.Lock()) if idempotency_key else None
        async with keyed_lock or contextlib.nullcontext():
            if idempotency_key is not None:
                # Held before the look: a start of the same key in another process, whose
                # look came first, stores its record before this one looks.
                await self.leases.take(run_id)
                try:
                    earlier = await self.documents.get(RUN, run_id)
                except BaseException:
                    await self.leases.release(run_id)
                    raise
                if earlier is not None:
                    await self.leases.release(run_id)
                    if earlier["inputs"] != values:
                        raise KeyReused(
                            f"Idempotency-Key {idempotency_key!r} started a run of "
                            f"{name!r} with other inputs ({earlier['inputs']}); send a new "
                            "key for a new run"
                        )
                    yield {"type": "workflow_ended", "record": earlier, "replayed": True}
                    return
            record = new_record(run_id, name, workflow, values, thread_id, user, parent, profile)
            try:
                await self.definitions.keep(workflow)
                await self.runs.save(record)
            except BaseException:
                await self.leases.release(run_id)
                raise
            if on_start is not None:
                on_start(run_id)
            driven = self._driver.drive(
                record, {"inputs": values}, workflow=workflow, usage_sink=usage_sink
            )
            async with contextlib.aclosing(driven) as events:
                async for event in events:
                    yield event

    async def run(
        self,
        name: str,
        inputs: dict[str, Any],
        *,
        thread_id: str | None = None,
        profile: str | None = None,
        parent: str | None = None,
        user: str | None = None,
        idempotency_key: str | None = None,
        usage_sink: Callable[[dict[str, int]], None] | None = None,
    ) -> dict[str, Any]:
        """Run to its end (or to an approval) and return the record (``user``: who started
        it, recorded for isolation; ``idempotency_key``, ``usage_sink``: as for ``stream``)."""
        last: dict[str, Any] = {}
        async for event in self.stream(
            name,
            inputs,
            thread_id=thread_id,
            profile=profile,
            parent=parent,
            user=user,
            idempotency_key=idempotency_key,
            usage_sink=usage_sink,
        ):
            last = event
        return dict(last["record"])

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
        run's events, the last ``workflow_ended``. ``on_start`` gets the run's id once the
        decision is stored and the run goes on (as for ``stream``).

        Nothing changes when the decision cannot be applied: the approval stays pending.

        Raises:
            RunNotFound: no pending or past approval by that id.
            AlreadyDecided: it was decided before (a 409 for the API).
            WorkflowNotFound: the run's definition is neither kept nor serving (a run started
                before definitions were kept, whose workflow is withdrawn).
        """
        run_id = approval_id.split("-", 1)[0]
        lock = self._locks.setdefault(run_id, asyncio.Lock())
        async with lock:
            pending_approval(await self.get_run(run_id), approval_id)  # at once, without waiting
            # Held, then looked at again as stored: a process that decided it meanwhile has
            # stored the run's next state before letting it go.
            await self.leases.take(run_id)
            try:
                record = pending_approval(await self.runs.stored(run_id), approval_id)
                workflow = await self.definitions.of(record)
                self.definitions.graph(workflow)  # compiled before the record changes
                decision = {"approved": approved, "by": by, "comment": comment, "at": time.time()}
                interrupt_id = record["waiting"].get("interrupt_id")
                decided = [*record.get("decided", []), approval_id]  # a late one: a 409
                record = {**record, "status": "RUNNING", "waiting": None, "decided": decided}
                # Kept until the run has taken it (see ``resume``): a process that dies
                # before its first step would otherwise lose the decision.
                record["decision"] = {"interrupt_id": interrupt_id, "value": decision}
                await self.runs.save(record)
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

    async def cancel(
        self, run_id: str, reason: str, *, approval_id: str | None = None
    ) -> dict[str, Any]:
        """End a waiting run without a decision: its approval leaves the inbox and it never
        resumes (a run not waiting, or with ``approval_id`` waiting at another approval than
        that one, is left as it is). Returns its record."""
        lock = self._locks.setdefault(run_id, asyncio.Lock())
        async with lock:
            record = await self.get_run(run_id)
            if record["status"] != "WAITING":
                return record
            await self.leases.take(run_id)  # then looked at again: it may be decided by now
            try:
                record = await self.runs.stored(run_id)
                waits_at = (record.get("waiting") or {}).get("approval_id")
                if record["status"] != "WAITING" or approval_id not in (None, waits_at):
                    await self.leases.release(run_id)
                    return record
                ended = time.time()
                record = {**record, "status": "CANCELLED", "waiting": None, "error": reason}
                record["ended"] = ended
                await self.runs.save(record)
            except BaseException:
                await self.leases.release(run_id)
                raise
            metrics.WORKFLOW_RUNS.labels(record["workflow"], "CANCELLED").inc()
        log.info("workflow.cancelled", run_id=run_id, reason=reason)
        return record

    async def resume(self, run_id: str) -> dict[str, Any]:
        """Go on with a run from its last checkpoint (its process died mid-way); finished
        nodes are not run again, side effects are not repeated."""
        record = await self.get_run(run_id)
        last: dict[str, Any] = {"record": record}
        seen: list[dict[str, Any]] = []
        started = time.time()
        start = await self._decision_not_taken(record)
        async with contextlib.aclosing(self._driver.drive(record, start)) as events:
            async for event in events:
                last = event
                seen.append(event)
        ended = dict(last["record"])
        ran = bool(seen) and seen[-1].get("type") == "workflow_ended"
        if self.after_decision is not None and record.get("decided") and ran:
            try:
                await self.after_decision(record, ended, seen[:-1], started)
            except Exception:  # the run is stored; only its telling is lost
                log.exception("workflow.outcome_not_told", run_id=run_id)
        return ended

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

    async def fork(
        self,
        run_id: str,
        node: str,
        inputs: dict[str, Any] | None = None,
        *,
        usage_sink: Callable[[dict[str, int]], None] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Run a finished run again from ``node``, with ``inputs`` changed: the nodes before it
        keep their outputs (they do not run again), ``node`` and what follows run anew, as a
        run of its own. Yields its events, the last ``workflow_ended``. Its record's usage,
        and what ``usage_sink`` gets (as for ``stream``), are its own calls: the kept nodes'
        were the original's. With inputs changed, an approval given before ``node`` is not
        kept: the fork goes back to the first such approval, which asks again (it was given for
        other inputs).

        Raises:
            RunNotFound: no such run, or it never reached ``node``.
            RunStatusConflict: the run has not ended (wait for it, or decide its approval).
            BadInputs: the changed inputs are not ones it can take.
        """
        old = await self.get_run(run_id)
        if old["status"] not in FINAL:
            raise not_ended(old)
        workflow = await self.definitions.of(old)
        graph = self.definitions.graph(workflow)
        record, config = await fork_record(graph, workflow.spec, old, node, inputs)
        await self.runs.save(record)
        driven = self._driver.drive(record, None, config, workflow=workflow, usage_sink=usage_sink)
        async with contextlib.aclosing(driven) as events:
            async for event in events:
                yield event

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


ResumedHook = Callable[
    [dict[str, Any], dict[str, Any], list[dict[str, Any]], float], Awaitable[None]
]


def keyed_run_id(name: str, key: str, user: str | None = None) -> str:
    """The id of the run of workflow ``name`` that ``user`` started with ``key``."""
    return hashlib.sha256("\x1f".join((user or "", name, key)).encode()).hexdigest()[:32]
