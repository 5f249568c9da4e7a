"""The workflow engine: a workflow compiles to a LangGraph graph run with the service's
checkpointer (one checkpoint after every node), on a thread of its own per run.

Each node's output is kept in state under its id; a node runs through its kind's executor
with its retries, timeout and ``on_error``; an approval is an interrupt that waits across
restarts; every run leaves an execution record (status, and per node: status, time, output or
error) beside the checkpoints. A run goes on under the definition it started with (kept
beside the records, by its fingerprint), whatever its file says by the time it resumes.

This module builds the engine, starts and forks runs; its bases ``decisions`` (deciding,
cancelling and resuming runs), ``unattended`` (runs no process runs, stopped; runs whose chat
turn failed, marked) and ``views`` (records, approvals, orphans) and its collaborators keep the
rest: ``definitions`` (the definitions runs started with, and their graphs), ``records``
(execution records, listings, the approvals inbox), ``driver`` (a run's graph driven, its
stream made events and a record), ``cutoffs`` (how a cancel ends a run under way), ``forks``
(where a fork starts) and ``orphans`` (runs no process runs, resumed).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from agents.errors import KeyReused
from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.skills.service import SkillService
from agents.state.documents import Documents, MemoryDocuments
from agents.state.leases import LEASE_S
from agents.workflows.compile import compile_workflow
from agents.workflows.decisions import RunDecisions
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
    last_event,
    new_record,
    turn_answers,
)
from agents.workflows.stops import RunStops
from agents.workflows.unattended import ResumedHook


class WorkflowEngine(RunDecisions):
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
        # Its own table: an executor replaced in one engine (a test's) is not another's.
        self._executors = dict(load_executors())
        self._locks: dict[str, asyncio.Lock] = {}
        self._answering: Counter[str] = Counter()  # see ``answering``
        self.leases = RunLeases(checkpointer, lease_s)  # which process runs a run
        self.runs = RunRecords(self.documents, self.leases)
        self.stops = RunStops(self.runs)  # cancels of runs under way
        self.leases.on_renew = self.stops.sweep  # those another process asked, looked at
        compile_graph = functools.partial(compile_workflow, self)
        self.definitions = Definitions(workflows, self.documents, compile_graph)
        self._driver = RunDriver(self.runs, self.definitions, self.cancel, self.stops)
        self._driver.stopped = self._stopped
        self._orphans = Orphans(self.runs, self.resume)
        # Told how a run ended (or waits again) that no request waiting for it tells of: the
        # record before and after, the events since, when it went on (``WorkflowTurns.resumed``,
        # which tells its thread). A run that goes on from a decision, resumed here (its
        # deciding process stopped or died mid-way), and a run cancelled while it ran (by
        # ``stop``) that no chat turn or decision drives.
        self.after_decision: ResumedHook | None = None

    def watch_threads(self, there: Callable[[str], Awaitable[bool]]) -> None:
        """Have a run started on a thread end CANCELLED at its next step once the thread is
        gone (deleted while it ran): it would make side effects and ask for an approval for
        nobody. ``there`` tells whether a thread is there (``Threads.exists``)."""
        self._driver.thread_there = there

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
        key_owner: str | None = None,
        via: str | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Start a run and yield its events; the last one, with the record, is
        ``workflow_waiting`` when the run waits for an approval (with that approval), else
        ``workflow_ended`` (SUCCEEDED, FAILED or CANCELLED).

        ``usage_sink`` gets what the run's model calls used once it ends or waits (its
        starter's daily spending: a run started by a request; a chat turn counts its own).
        ``on_start`` gets the run's id once its record is stored (a request cut off while
        the run goes on can say which run it was).

        With ``idempotency_key``, the run's id is made from the key's owner (``key_owner``,
        else ``user``: an admin's run is recorded as nobody's, its key stays its own), the
        workflow and the key: the same start sent again (a retry after a timeout, by any
        process) starts nothing and yields the first run's last event (``replayed``): once it
        waits or is over as it stands (while it goes on in a process, once that process lets
        it go); one left RUNNING (its process stopped or died, nobody resumed it yet) goes on
        here from its last checkpoint, its events yielded, as ``resume`` does.

        ``via``: ``"chat"`` for a run a chat turn starts, which answers with its end (a
        cancel does not tell its thread again).

        Raises:
            BadInputs: before the run starts, naming each input that is missing or wrong.
            KeyReused: the key started a run of other inputs.
        """
        workflow = self.workflows.get(name)
        values = check_inputs(workflow.spec, inputs)
        if idempotency_key is None:
            run_id = uuid.uuid4().hex
        else:  # a sub-workflow's key names its parent's node visit: unique without the user
            run_id = keyed_run_id(name, idempotency_key, None if parent else key_owner or user)
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
                    if earlier["inputs"] != values or earlier["status"] != "RUNNING":
                        await self.leases.release(run_id)
                    if earlier["inputs"] != values:
                        raise KeyReused(
                            f"Idempotency-Key {idempotency_key!r} started a run of "
                            f"{name!r} with other inputs ({earlier['inputs']}); send a new "
                            "key for a new run"
                        )
                    if earlier["status"] != "RUNNING":
                        yield last_event(earlier, replayed=True)
                        return
                    # Left RUNNING by a process that stopped or died, and no process runs it
                    # (its lease is held here now): it goes on here, followed to its end.
                    if on_start is not None:
                        on_start(run_id)
                    going = self.going_on(earlier, replayed=True, usage_sink=usage_sink)
                    try:
                        async with contextlib.aclosing(going) as events:
                            async for event in events:
                                yield event
                    finally:  # failed before its driver began (which lets it go itself)
                        if self.leases.holds(run_id) and run_id not in self.runs.under_way:
                            await self.leases.release(run_id)
                    return
            record = new_record(run_id, name, workflow, values, thread_id, user, parent, profile)
            if via is not None:
                record["via"] = via
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
        key_owner: str | None = None,
    ) -> dict[str, Any]:
        """Run to its end (or to an approval) and return the record (``user``: who started
        it, recorded for isolation; ``idempotency_key``, ``usage_sink``, ``key_owner``: as
        for ``stream``)."""
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
            key_owner=key_owner,
        ):
            last = event
        return dict(last["record"])

    async def fork(
        self,
        run_id: str,
        node: str,
        inputs: dict[str, Any] | None = None,
        *,
        usage_sink: Callable[[dict[str, int]], None] | None = None,
        on_start: Callable[[str], None] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Run a finished run again from ``node``, with ``inputs`` changed: the nodes before it
        keep their outputs (they do not run again), ``node`` and what follows run anew, as a
        run of its own. Yields its events, the last ``workflow_waiting`` or ``workflow_ended``
        (as ``stream``'s). Its record's usage, and what ``usage_sink`` gets (as for
        ``stream``), are its own calls: the kept nodes' were the original's. With inputs
        changed, an approval given before ``node`` is not kept: the fork goes back to the
        first such approval, which asks again (it was given for other inputs). ``on_start``
        gets the fork's id once its record is stored.

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
        if on_start is not None:
            on_start(record["id"])
        driven = self._driver.drive(record, None, config, workflow=workflow, usage_sink=usage_sink)
        async with contextlib.aclosing(driven) as events:
            async for event in events:
                yield event

    async def _stopped(self, record: dict[str, Any]) -> None:
        """A run cancelled while it ran here: its thread is told (``after_decision``), unless
        a chat turn or a decision drives it, which answer with its end."""
        if self.after_decision is None or turn_answers(record) or record.get("decided"):
            return
        await self.after_decision(record, record, [], time.time())


def keyed_run_id(name: str, key: str, user: str | None = None) -> str:
    """The id of the run of workflow ``name`` that ``user`` started with ``key``."""
    return hashlib.sha256("\x1f".join((user or "", name, key)).encode()).hexdigest()[:32]
