"""The workflow engine: a workflow compiles to a LangGraph graph run with the service's
checkpointer (one checkpoint after every node), on a thread of its own per run.

Each node's output is kept in state under its id; a node runs through its kind's executor
with its retries, timeout and ``on_error``; an approval is an interrupt that waits across
restarts; every run leaves an execution record (status, and per node: status, time, output or
error) beside the checkpoints. A run goes on under the definition it started with (kept
beside the records, by its fingerprint), whatever its file says by the time it resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

import structlog
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from agents import metrics
from agents.errors import (
    AlreadyDecided,
    KeyReused,
    RunNotFound,
    WorkflowFailed,
    WorkflowNotFound,
)
from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.skills.service import SkillService
from agents.state.documents import Documents, MemoryDocuments
from agents.state.leases import LEASE_S
from agents.state.schema import usage_since
from agents.workflows.compile import WorkflowContext, compile_workflow
from agents.workflows.executors import RunInfo, load_executors
from agents.workflows.flow import Flow, flow_of
from agents.workflows.inputs import check_inputs
from agents.workflows.leases import RunLeases
from agents.workflows.spec import WorkflowSpec
from agents.workflows.templates import render

log = structlog.get_logger(__name__)
RUN = "workflow_run"  # the documents' kind
DEFINITION = "workflow_definition"  # the kind of the definitions runs started with
_GRAPHS = 32  # compiled graphs kept (a workflow's versions that runs still go on under)
FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
_PAGE = 200  # records read at a time by a listing that filters them
_RESUMING = 4  # orphaned runs resumed at once (each holds a store connection at times)


class LoadedWorkflow(Protocol):
    """A workflow as the registry holds it."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> WorkflowSpec: ...

    @property
    def flow(self) -> Flow: ...

    @property
    def fingerprint(self) -> str: ...


@dataclass(frozen=True)
class Definition:
    """A workflow as a run started with it, read back from the store."""

    name: str
    spec: WorkflowSpec
    flow: Flow
    fingerprint: str


class WorkflowSource(Protocol):
    """Where workflows come from (the registry)."""

    def get(self, name: str) -> LoadedWorkflow: ...


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
        self._graphs: dict[tuple[str, str], CompiledStateGraph[Any, Any, Any, Any]] = {}
        self._records: dict[str, dict[str, Any]] = {}  # runs under way, written through
        self._locks: dict[str, asyncio.Lock] = {}
        self._definitions: dict[str, LoadedWorkflow] = {}  # kept in the store, by id
        self.leases = RunLeases(checkpointer, lease_s)  # which process runs a run
        self._resuming: dict[str, asyncio.Task[str | None]] = {}  # orphans being resumed
        self._resume_slots = asyncio.Semaphore(_RESUMING)

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
    ) -> AsyncIterator[dict[str, Any]]:
        """Start a run and yield its events; the last one is ``workflow_ended`` with the
        record (status SUCCEEDED, FAILED or WAITING for an approval).

        ``usage_sink`` gets what the run's model calls used once it ends or waits (its
        starter's daily spending: a run started by a request; a chat turn counts its own).

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
        else:
            run_id = keyed_run_id(name, idempotency_key, user)
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
            record = {
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
                "inputs": values,
                "outputs": {},
                "error": None,
                "nodes": {},
                "waiting": None,
            }
            try:
                await self._keep_definition(workflow)
                await self._save(record)
            except BaseException:
                await self.leases.release(run_id)
                raise
            driven = self._drive(
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
        self, approval_id: str, *, approved: bool, by: str = "", comment: str = ""
    ) -> AsyncIterator[dict[str, Any]]:
        """Decide a pending approval; the run resumes with no new input. Yields the resumed
        run's events, the last ``workflow_ended``.

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
            _pending(await self.get_run(run_id), approval_id)  # at once, without waiting
            # Held, then looked at again as stored: a process that decided it meanwhile has
            # stored the run's next state before letting it go.
            await self.leases.take(run_id)
            try:
                record = _pending(await self._stored(run_id), approval_id)
                workflow = await self._definition(record)
                self._graph(workflow)  # compiled before the record changes
                decision = {"approved": approved, "by": by, "comment": comment, "at": time.time()}
                interrupt_id = record["waiting"].get("interrupt_id")
                record = {**record, "status": "RUNNING", "waiting": None}
                await self._save(record)
            except BaseException:
                await self.leases.release(run_id)
                raise
        # Addressed to its interrupt: a decision can never answer another gate.
        resume = decision if interrupt_id is None else {interrupt_id: decision}
        driven = self._drive(record, Command(resume=resume), workflow=workflow)
        async with contextlib.aclosing(driven) as events:
            async for event in events:
                yield event

    async def cancel(self, run_id: str, reason: str) -> dict[str, Any]:
        """End a waiting run without a decision: its approval leaves the inbox and it never
        resumes (a run not waiting is left as it is). Returns its record."""
        lock = self._locks.setdefault(run_id, asyncio.Lock())
        async with lock:
            record = await self.get_run(run_id)
            if record["status"] != "WAITING":
                return record
            await self.leases.take(run_id)  # then looked at again: it may be decided by now
            try:
                record = await self._stored(run_id)
                if record["status"] != "WAITING":
                    await self.leases.release(run_id)
                    return record
                ended = time.time()
                record = {**record, "status": "CANCELLED", "waiting": None, "error": reason}
                record["ended"] = ended
                await self._save(record)
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
        async with contextlib.aclosing(self._drive(record, None)) as events:
            async for event in events:
                last = event
        return dict(last["record"])

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
            AlreadyDecided: the run has not ended (wait for it, or decide its approval).
            BadInputs: the changed inputs are not ones it can take.
        """
        old = await self.get_run(run_id)
        if old["status"] not in FINAL:
            raise AlreadyDecided(f"run {run_id} is {old['status']}; fork it once it has ended")
        workflow = await self._definition(old)
        graph = self._graph(workflow)
        target = None
        async for snapshot in _lineage(graph, old):
            if node in snapshot.next:
                target = snapshot  # newest first: the last time the run was about to run it
                break
        if target is None:
            raise RunNotFound(f"run {run_id} never reached node {node!r}")
        values = check_inputs(workflow.spec, {**target.values.get("inputs", {}), **(inputs or {})})
        if values != target.values.get("inputs"):
            gates = {n.id for n in workflow.spec.nodes if n.kind == "approval"}
            target = await _first_to_decide(graph, target, gates & set(target.values["nodes"]))
        config = await graph.aupdate_state(target.config, {"inputs": values})
        kept = set(target.values.get("nodes", {}))
        record = {
            **old,
            "id": uuid.uuid4().hex,
            "parent": f"{run_id}@{node}",
            "graph_thread": _thread(old),
            "checkpoint": config["configurable"]["checkpoint_id"],
            "status": "RUNNING",
            "started": time.time(),
            "ended": None,
            "inputs": values,
            "outputs": {},
            "error": None,
            "nodes": {k: v for k, v in old["nodes"].items() if k in kept},
            "waiting": None,
            "usage": {},
            # The state's usage adds up from the fork point's, which is the original's.
            "usage_before": dict(target.values.get("usage") or {}),
        }
        await self._save(record)
        driven = self._drive(record, None, config, workflow=workflow, usage_sink=usage_sink)
        async with contextlib.aclosing(driven) as events:
            async for event in events:
                yield event

    async def orphans(self) -> list[str]:
        """Runs left RUNNING that no process runs: not this one, nor (PostgreSQL) another
        whose lease on them is alive; their process stopped or died."""
        found = [r["id"] for r in await self.documents.find(RUN, status="RUNNING", limit=None)]
        live = await self.leases.live(found)
        return [run_id for run_id in found if run_id not in live and run_id not in self._records]

    async def resume_orphans(self, run_ids: list[str] | None = None) -> list[str]:
        """Resume the runs ``orphans`` found (by default, looks now), each one this process
        claims (of several processes looking at once, one resumes a run); returns those."""
        found = await self.orphans() if run_ids is None else run_ids
        resumed = await asyncio.gather(*self._resume_each(found))
        return [run_id for run_id in resumed if run_id is not None]

    async def keep_resuming(self, interval_s: float) -> None:
        """Look for runs a dead process left every ``interval_s`` (several processes on
        PostgreSQL: a lease that expired means its process died); each is resumed in a task
        of its own, a few at a time, and the next look does not wait for them."""
        try:
            while True:
                await asyncio.sleep(interval_s)
                try:
                    self._resume_each(await self.orphans())
                except Exception:
                    log.exception("workflow.orphans_failed")
        finally:
            resuming = list(self._resuming.values())
            for task in resuming:
                task.cancel()
            await asyncio.gather(*resuming, return_exceptions=True)

    def _resume_each(self, run_ids: list[str]) -> list[asyncio.Task[str | None]]:
        """A task resuming each of ``run_ids`` not under way here nor being resumed."""
        tasks = []
        for run_id in run_ids:
            if run_id in self._records or run_id in self._resuming:
                continue
            task = asyncio.create_task(self._resume_orphan(run_id))
            self._resuming[run_id] = task
            task.add_done_callback(functools.partial(self._resumed, run_id))
            tasks.append(task)
        return tasks

    def _resumed(self, run_id: str, _: asyncio.Task[str | None]) -> None:
        self._resuming.pop(run_id, None)

    async def _resume_orphan(self, run_id: str) -> str | None:
        """Resume ``run_id`` if this process claims it; its id once resumed, else None."""
        async with self._resume_slots:  # claimed only when it can go on: others may take it
            if not await self.leases.claim(run_id):
                return None
            try:
                stored = await self.documents.get(RUN, run_id)  # it may have ended since
                if stored is None or stored["status"] != "RUNNING":
                    await self.leases.release(run_id)
                    return None
                log.info("workflow.resuming", run_id=run_id)
                await self.resume(run_id)
            except Exception:  # one run's trouble must not stop the others'
                log.exception("workflow.resume_failed", run_id=run_id)
                await self.leases.release(run_id)
                return None
            return run_id

    async def waiting(self) -> int:
        """How many approvals wait, in all (the store's count is the true one: every
        process's runs); sets the gauge to it (``GET /metrics`` asks first)."""
        count = await self.documents.count(RUN, status="WAITING")
        metrics.APPROVALS_WAITING.set(count)
        return count

    # Records.

    async def get_run(self, run_id: str) -> dict[str, Any]:
        """A run's execution record.

        Raises:
            RunNotFound: for an unknown id.
        """
        # What this process holds is written through; else the store's (another's, or one
        # cut off here) is the truth.
        live = self._records.get(run_id) if self.leases.holds(run_id) else None
        record = live or await self.documents.get(RUN, run_id)
        if record is None:
            raise RunNotFound(f"there is no workflow run {run_id!r}")
        return dict(record)

    async def _stored(self, run_id: str) -> dict[str, Any]:
        """A run's record as stored (what another process did to it included)."""
        record = await self.documents.get(RUN, run_id)
        if record is None:
            raise RunNotFound(f"there is no workflow run {run_id!r}")
        return dict(record)

    async def list_runs(
        self, *, workflow: str | None = None, status: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Execution records, newest first: the ``limit`` newest of ``workflow`` (and
        ``status``), however many other runs are newer."""
        kept: list[dict[str, Any]] = []
        after: str | None = None
        while len(kept) < limit:
            page, after = await self.runs_page(
                workflow=workflow, status=status, limit=limit - len(kept), after=after
            )
            kept += page
            if after is None:
                break
        return kept

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

    async def approvals(self, limit: int = 500) -> list[dict[str, Any]]:
        """The ``limit`` newest pending approvals (see ``approvals_page``)."""
        return (await self.approvals_page(limit))[0]

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
        pending = [
            {
                **r["waiting"],
                "run_id": r["id"],
                "workflow": r["workflow"],
                "thread_id": r["thread_id"],
            }
            for _, r in rows
            if r.get("waiting")
        ]
        return pending, rows[-1][0] if more else None

    # The definitions runs started with, and their graphs.

    async def _keep_definition(self, workflow: LoadedWorkflow) -> None:
        """Store the definition a run starts with (once per version)."""
        key = _definition_id(workflow.name, workflow.fingerprint)
        if key in self._definitions:
            return
        if await self.documents.get(DEFINITION, key) is None:
            body = {
                "name": workflow.name,
                "fingerprint": workflow.fingerprint,
                "spec": workflow.spec.model_dump(mode="json", by_alias=True),
            }
            await self.documents.put(DEFINITION, key, body)
        self._definitions[key] = workflow

    async def _definition(self, record: dict[str, Any]) -> LoadedWorkflow:
        """The definition ``record``'s run started with: a run goes on under it, whatever the
        workflow's file says now (renamed nodes, a new version, a file withdrawn).

        Raises:
            WorkflowNotFound: a run from before definitions were kept, whose workflow is not
                serving.
        """
        name, fingerprint = record["workflow"], str(record.get("fingerprint"))
        key = _definition_id(name, fingerprint)
        known = self._definitions.get(key)
        if known is not None:
            return known
        with contextlib.suppress(WorkflowNotFound):
            serving = self.workflows.get(name)
            if serving.fingerprint == fingerprint:
                return serving
        kept = await self.documents.get(DEFINITION, key)
        if kept is None:
            return self.workflows.get(name)  # a run started before definitions were kept
        spec = WorkflowSpec.model_validate(kept["spec"])
        definition = Definition(name, spec, flow_of(spec), fingerprint)
        self._definitions[key] = definition
        return definition

    def _graph(self, workflow: LoadedWorkflow) -> CompiledStateGraph[Any, Any, Any, Any]:
        key = (workflow.name, workflow.fingerprint)
        graph = self._graphs.pop(key, None) or compile_workflow(self, workflow)
        self._graphs[key] = graph  # the newest used last
        while len(self._graphs) > _GRAPHS:
            del self._graphs[next(iter(self._graphs))]
        return graph

    async def _drive(
        self,
        record: dict[str, Any],
        start: Any,
        config: Any = None,
        *,
        workflow: LoadedWorkflow | None = None,
        usage_sink: Callable[[dict[str, int]], None] | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        run_id = record["id"]
        self._records[run_id] = record
        stored = False
        try:
            steps = self._steps(record, start, config, workflow, usage_sink)
            async with contextlib.aclosing(steps) as events:
                async for event in events:
                    if event["type"] == "workflow_ended" and event["record"]["id"] == run_id:
                        stored = True  # its last state is stored
                    yield event
        finally:
            # Cut off (its stream closed, its task cancelled, its last save failed): its
            # stored RUNNING record is the truth now, and the run is let go to be resumed.
            self._records.pop(run_id, None)
            if not stored and self.leases.holds(run_id):
                await self.leases.release(run_id)

    async def _steps(
        self,
        record: dict[str, Any],
        start: Any,
        config: Any,
        workflow: LoadedWorkflow | None,
        usage_sink: Callable[[dict[str, int]], None] | None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        run_id = record["id"]
        try:
            workflow = workflow or await self._definition(record)
        except WorkflowNotFound as exc:  # it could only stay RUNNING, looked at forever
            why = f"its definition cannot be found, so it cannot go on: {exc}"
            record.update(status="FAILED", error=why, ended=time.time())
            await self._save(record)
            log.error("workflow.definition_lost", run_id=run_id, error=why)
            yield {"type": "workflow_ended", "record": dict(record)}
            return
        graph = self._graph(workflow)
        config = config or {"configurable": {"thread_id": _thread(record)}}
        info = RunInfo(run_id, record["workflow"], record.get("thread_id"), record.get("profile"))
        values: dict[str, Any] = {}
        try:
            pending: list[Any] = []
            stream = graph.astream(
                start,
                config,
                context=WorkflowContext(info),
                stream_mode=["custom", "updates", "values", "checkpoints"],
            )
            async with contextlib.aclosing(cast(AsyncGenerator[Any, None], stream)) as chunks:
                async for mode, payload in chunks:
                    if mode == "custom" and isinstance(payload, dict):
                        yield payload
                    elif mode == "values" and isinstance(payload, dict):
                        values = payload  # the run's state after each step: the last one is final
                    elif mode == "checkpoints" and isinstance(payload, dict):
                        # The run's own last state: its thread holds its forks' states too.
                        record["checkpoint"] = payload["config"]["configurable"]["checkpoint_id"]
                    elif mode == "updates" and isinstance(payload, dict):
                        pending += [
                            {**i.value, "interrupt_id": i.id}
                            for i in payload.get("__interrupt__", ())
                        ]
                        self._note(record, payload)
            # Every node the run has, those run before a crash included (the state holds them).
            ran = dict(values.get("nodes") or {})
            record["nodes"] = {k: _node_record(v) for k, v in ran.items()} | {
                k: v for k, v in record["nodes"].items() if k not in ran
            }
            if pending:
                where = {"run_id": run_id, "workflow": record["workflow"]}
                waiting = {**pending[0], **where, "thread_id": record.get("thread_id")}
                record.update(status="WAITING", waiting=waiting)
                asked = {k: v for k, v in pending[0].items() if k != "interrupt_id"}
                yield {"type": "approval_required", "run_id": run_id, **asked}
            else:
                record.update(status="SUCCEEDED", outputs=_outputs(workflow.spec, values, info))
        except WorkflowFailed as exc:
            record.update(status="FAILED", error=exc.message)
            if exc.node is not None:  # the failed node has no state update: record it here
                record["nodes"][exc.node] = {"status": "failed", "error": exc.error}
        except Exception as exc:  # a bug or a store failure fails the run, not the service
            log.exception("workflow.crashed", run_id=run_id)
            record.update(status="FAILED", error=f"{type(exc).__name__}: {exc}")
        if values.get("usage"):  # its model calls (the thread's cost includes them)
            record["usage"] = usage_since(values["usage"], record.get("usage_before"))
        if record["status"] in FINAL:
            record["ended"] = time.time()
        await self._save(record)
        metrics.WORKFLOW_RUNS.labels(record["workflow"], record["status"]).inc()
        log.info("workflow.ended", run_id=run_id, status=record["status"], error=record["error"])
        if usage_sink is not None:
            usage_sink(dict(record.get("usage") or {}))
        yield {"type": "workflow_ended", "record": dict(record)}

    def _note(self, record: dict[str, Any], update: dict[str, Any]) -> None:
        """Copy what nodes reported into the record (kept in memory while the run goes on,
        where ``get_run`` reads it; stored when the run ends or waits: the checkpoints hold
        the outputs meanwhile, and a run cut off is found by its stored RUNNING record)."""
        for node_update in update.values():
            if isinstance(node_update, dict):
                for node_id, state in (node_update.get("nodes") or {}).items():
                    record["nodes"][node_id] = _node_record(state)

    async def _save(self, record: dict[str, Any]) -> None:
        # Held before it is stored RUNNING and let go once it is not: a process looking for
        # orphans never finds a run under way without its lease.
        running = record["status"] == "RUNNING"
        if running:
            await self.leases.take(record["id"])
        await self.documents.put(
            RUN, record["id"], record, owner=record.get("thread_id"), status=record["status"]
        )
        if not running:
            await self.leases.release(record["id"])


async def _lineage(
    graph: CompiledStateGraph[Any, Any, Any, Any], record: dict[str, Any]
) -> AsyncIterator[Any]:
    """The states a run went through, newest first: from its last checkpoint back (the
    thread's history holds the states of its forks too); the thread's whole history for a
    record from before the last checkpoint was kept."""
    thread: Any = {"configurable": {"thread_id": _thread(record)}}
    if not record.get("checkpoint"):
        async for snapshot in graph.aget_state_history(thread):
            yield snapshot
        return
    config: Any = {
        "configurable": {**thread["configurable"], "checkpoint_id": record["checkpoint"]}
    }
    while config is not None:
        snapshot = await graph.aget_state(config)
        yield snapshot
        config = snapshot.parent_config


async def _first_to_decide(
    graph: CompiledStateGraph[Any, Any, Any, Any], target: Any, gates: set[str]
) -> Any:
    """The oldest state before ``target`` that was about to run one of ``gates`` (``target``
    itself when none was)."""
    earliest, snapshot = target, target
    while gates and snapshot.parent_config is not None:
        snapshot = await graph.aget_state(snapshot.parent_config)
        if gates & set(snapshot.next):
            earliest = snapshot
    return earliest


def _pending(record: dict[str, Any], approval_id: str) -> dict[str, Any]:
    """``record``, whose run waits for approval ``approval_id``.

    Raises:
        AlreadyDecided: it was decided, or the run ended.
        RunNotFound: the run never asked for it.
    """
    waiting = record.get("waiting") or {}
    if waiting.get("approval_id") == approval_id and record["status"] == "WAITING":
        return record
    decided = any(
        (node.get("output") or {}).get("approval_id") == approval_id
        for node in record["nodes"].values()
        if isinstance(node.get("output"), dict)
    )
    if decided or record["status"] in FINAL:
        raise AlreadyDecided(f"approval {approval_id} was decided already")
    raise RunNotFound(f"there is no pending approval {approval_id}")


def _definition_id(name: str, fingerprint: str) -> str:
    return f"{name}@{fingerprint}"


def keyed_run_id(name: str, key: str, user: str | None = None) -> str:
    """The id of the run of workflow ``name`` that ``user`` started with ``key``."""
    return hashlib.sha256("\x1f".join((user or "", name, key)).encode()).hexdigest()[:32]


def _thread(record: dict[str, Any]) -> str:
    """The LangGraph thread of a run (a fork shares the thread of the run it came from)."""
    return str(record.get("graph_thread") or f"workflow:{record['id']}")


def _approval(record: dict[str, Any]) -> dict[str, Any]:
    """A pending approval as the inbox lists it."""
    return {
        **record["waiting"],
        "run_id": record["id"],
        "workflow": record["workflow"],
        "thread_id": record["thread_id"],
    }


def _outputs(spec: WorkflowSpec, values: dict[str, Any], info: RunInfo) -> dict[str, Any]:
    context = {
        "inputs": values.get("inputs", {}),
        "nodes": values.get("nodes", {}),
        "run": {"id": info.run_id, "workflow": info.workflow, "thread_id": info.thread_id},
    }
    return {k: render(v, context, f"outputs.{k}") for k, v in spec.outputs.items()}


def _node_record(state: dict[str, Any]) -> dict[str, Any]:
    output = state.get("output")
    text = output if isinstance(output, str) else repr(output)
    return {
        "status": state.get("status"),
        "ms": state.get("ms"),
        "error": state.get("error"),
        "visits": state.get("visits"),
        "output": output if len(text) <= 2000 else text[:2000] + "…",
    }
