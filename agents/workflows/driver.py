"""Driving a run's graph: what LangGraph streams becomes the run's events and its execution
record, stored once the run ends or waits.

The graph is streamed in several modes at once: what nodes emit (passed on as events), each
step's state updates (copied into the record as they come, so ``get_run`` shows a run under
way), the state after each step (the last one holds the outputs and the usage) and each
checkpoint (the run's own last state: its thread holds its forks' states too). A run ends
SUCCEEDED or FAILED, or stops WAITING at an approval; one cut off on the way (its stream
closed, its task cancelled, its last save failed) stays RUNNING as stored, and is let go to be
resumed. A run on a thread that is deleted meanwhile ends CANCELLED at its next step; one asked
to stop (``RunStops``) ends CANCELLED at once here (its step under way cut off, that node
recorded ``cancelled``: see ``cutoffs``), or, asked by another process, after its node under
way.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import structlog

from agents import metrics
from agents.errors import WorkflowFailed, WorkflowNotFound
from agents.feed import STOP_ASKED
from agents.replies import forget_all
from agents.state.schema import usage_since
from agents.workflows.compile import WorkflowContext
from agents.workflows.cutoffs import Reached, end_stopped, store_cancelled
from agents.workflows.definitions import Definitions, LoadedWorkflow
from agents.workflows.executors import RunInfo
from agents.workflows.records import (
    FINAL,
    LAST_EVENTS,
    RunRecords,
    graph_config,
    last_event,
    node_record,
)
from agents.workflows.spec import ApprovalNode, WorkflowSpec
from agents.workflows.stops import RunStops
from agents.workflows.templates import render

log = structlog.get_logger(__name__)

THREAD_GONE = "its thread was deleted"

Cancel = Callable[[str, str], Awaitable[dict[str, Any]]]


class _ThreadGone(Exception):
    """The run's thread was deleted while it ran: it goes no further."""


class _Stopped(Exception):
    """The run was asked to stop (``RunStops``): it goes no further. ``cut_off``: its step
    under way was cut off."""

    def __init__(self, reason: str, *, cut_off: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.cut_off = cut_off


@dataclass
class _Stretch:
    """What one stretch of a run (one ``drive``) leaves to do once it ends, however it ends:
    its nodes' recorded replies to forget, its usage to report; and where it stood
    (``Reached``), for a cancel that cuts it off."""

    info: RunInfo
    usage_sink: Callable[[dict[str, int]], None] | None
    reached: Reached = field(default_factory=Reached)


class RunDriver:
    """Drives runs' graphs, keeping their records.

    Args:
        runs: The execution records (a run under way here is held there, written through).
        definitions: The definitions runs started with, and their graphs.
        cancel: Ends a waiting run (``RunDecisions.cancel``): one whose thread was deleted
            as it came to wait.
        stops: The cancels asked for runs under way.
    """

    def __init__(
        self, runs: RunRecords, definitions: Definitions, cancel: Cancel, stops: RunStops
    ) -> None:
        self.runs = runs
        self.definitions = definitions
        self.cancel = cancel
        self.stops = stops
        # Told of a run ended CANCELLED here on a stop asked for it (the engine tells its
        # thread, unless whoever drives the run answers with its end).
        self.stopped: Callable[[dict[str, Any]], Awaitable[None]] | None = None
        # Whether a thread is there (``Threads.exists``); None: runs do not look.
        self.thread_there: Callable[[str], Awaitable[bool]] | None = None

    async def drive(
        self,
        record: dict[str, Any],
        start: Any,
        config: Any = None,
        *,
        workflow: LoadedWorkflow | None = None,
        usage_sink: Callable[[dict[str, int]], None] | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Run ``record``'s graph from ``start`` (inputs, a decision, or None to go on from
        its last checkpoint) and yield its events, the last ``workflow_waiting`` or
        ``workflow_ended`` (``last_event``) once its record is stored; a run cut off is let
        go, to be resumed."""
        run_id = record["id"]
        self.runs.under_way[run_id] = record
        stretch = _Stretch(_run_info(record), usage_sink)
        stored = False
        try:
            steps = self._steps(record, start, config, workflow, stretch)
            async with contextlib.aclosing(steps) as events:
                async for event in events:
                    if event["type"] in LAST_EVENTS and event["record"]["id"] == run_id:
                        stored = True  # its last state is stored
                    yield event
        finally:
            # Cut off (its stream closed, its task cancelled, its last save failed): its
            # stored RUNNING record is the truth now, and the run is let go to be resumed;
            # unless it, or the chat run it answers, was asked to stop: then it ends here,
            # cancelled.
            self.runs.under_way.pop(run_id, None)
            asked = self.stops.asked_here(run_id)
            if not stored and self.runs.leases.holds(run_id):
                if asked is not None:
                    await self._cancelled(record, asked, stretch, stop=True)
                elif STOP_ASKED.get()():
                    await self._cancelled(record, "its run was cancelled by request", stretch)
                else:
                    await self.runs.leases.release(run_id)
            await self.stops.done(run_id, seen=asked is not None)

    async def _cancelled(
        self, record: dict[str, Any], reason: str, stretch: _Stretch, *, stop: bool = False
    ) -> None:
        """End ``record``'s run as cancelled, stored (its lease let go with it), its nodes
        and its stretch ended as ``_steps`` ends them on a stop; ``stop``: on a stop asked
        for it (its thread is told)."""
        values = await end_stopped(self.definitions, record, reason, stretch.reached, cut_off=True)
        _used(record, values)
        try:
            await store_cancelled(self.runs, record, reason, logger=log)
        except Exception:  # its lease expires: then it is resumed, as a run cut off is
            log.exception("workflow.cancel_failed", run_id=record["id"])
            return
        if stop:
            await self._told(record)
        await _ended(record, stretch)

    async def _told(self, record: dict[str, Any]) -> None:
        if self.stopped is None:
            return
        try:
            await self.stopped(dict(record))
        except Exception:  # the run is stored; only its telling is lost
            log.exception("workflow.outcome_not_told", run_id=record["id"])

    async def _steps(
        self,
        record: dict[str, Any],
        start: Any,
        config: Any,
        workflow: LoadedWorkflow | None,
        stretch: _Stretch,
    ) -> AsyncGenerator[dict[str, Any], None]:
        run_id = record["id"]
        try:
            workflow = workflow or await self.definitions.of(record)
        except WorkflowNotFound as exc:  # it could only stay RUNNING, looked at forever
            why = f"its definition cannot be found, so it cannot go on: {exc}"
            record.update(status="FAILED", error=why, ended=time.time())
            await self.runs.save(record)
            log.error("workflow.definition_lost", run_id=run_id, error=why)
            yield last_event(dict(record))
            return
        graph = self.definitions.graph(workflow)
        config = config or graph_config(record)
        reached = stretch.reached
        reached.graph, reached.config = graph, config
        info = stretch.info
        values: dict[str, Any] = {}
        stopped = False
        try:
            # Before it goes on here (a sub-workflow whose parent run ended: too).
            if (stop := await self.stops.asked(record, first=True)) is not None:
                raise _Stopped(stop)
            pending: list[Any] = []
            stream = graph.astream(
                start,
                config,
                context=WorkflowContext(info),
                stream_mode=["custom", "updates", "values", "checkpoints"],
            )
            async with contextlib.aclosing(cast(AsyncGenerator[Any, None], stream)) as chunks:
                while (chunk := await self._next(run_id, chunks)) is not None:
                    mode, payload = chunk
                    if mode == "custom" and isinstance(payload, dict):
                        _under_way(reached.begun, payload, record)
                        yield payload
                    elif mode == "values" and isinstance(payload, dict):
                        values = payload  # the run's state after each step: the last one is final
                        reached.values = values
                    elif mode == "checkpoints" and isinstance(payload, dict):
                        # The run's own last state: its thread holds its forks' states too.
                        record["checkpoint"] = payload["config"]["configurable"]["checkpoint_id"]
                    elif mode == "updates" and isinstance(payload, dict):
                        pending += [
                            {**i.value, "interrupt_id": i.id}
                            for i in payload.get("__interrupt__", ())
                        ]
                        reached.noted |= self._note(record, payload)
                        if await self._thread_gone(info):  # no step more, nor an approval
                            raise _ThreadGone
                        if (stop := await self.stops.asked(record)) is not None:
                            raise _Stopped(stop)
            # Every node the run has, those run before a crash included (the state holds them).
            ran = dict(values.get("nodes") or {})
            record["nodes"] = {k: node_record(v) for k, v in ran.items()} | {
                k: v for k, v in record["nodes"].items() if k not in ran
            }
            if pending:
                where = {"run_id": run_id, "workflow": record["workflow"]}
                waiting = {**pending[0], **where, "thread_id": record.get("thread_id")}
                waiting["asked"] = time.time()  # when it came to wait (the inbox says)
                record.update(status="WAITING", waiting=waiting)
                asked = {k: v for k, v in waiting.items() if k not in ("interrupt_id", "thread_id")}
                yield {"type": "approval_required", **asked}
            elif rejected := _rejected(workflow.spec, values):  # ended by a person's "no"
                record.update(status="CANCELLED", error=rejected)
            else:
                record.update(status="SUCCEEDED", outputs=_outputs(workflow.spec, values, info))
        except _ThreadGone:
            record.update(status="CANCELLED", error=THREAD_GONE)
        except _Stopped as stopping:
            values = await end_stopped(
                self.definitions, record, stopping.reason, reached, cut_off=stopping.cut_off
            )
            stopped = True
        except WorkflowFailed as exc:
            record.update(status="FAILED", error=exc.message)
            if exc.node is not None:  # the failed node has no state update: record it here
                failed = {"status": "failed", "error": exc.error, "ms": exc.ms}
                record["nodes"][exc.node] = {**failed, "visits": exc.visits}
        except Exception as exc:  # a bug or a store failure fails the run, not the service
            log.exception("workflow.crashed", run_id=run_id)
            # Its text may name what a run's reader should not see (a store's host, a user):
            # it is in the log.
            why = f"the run failed on an internal error ({type(exc).__name__}); it has been logged"
            record.update(status="FAILED", error=why)
        # Answered: it ended on it, or a stop that came as it ended (or came to wait) did not
        # stop it.
        record.pop("cancel_requested", None)
        _used(record, values)
        if record["status"] in FINAL:
            record["ended"] = time.time()
        record.pop("decision", None)  # taken: its gate is passed (see WorkflowEngine.resume)
        await self.runs.save(record)
        if stopped:
            await self.stops.done(run_id, seen=True)
            await self._told(record)
        await _ended(record, stretch)
        metrics.WORKFLOW_RUNS.labels(record["workflow"], record["status"]).inc()
        log.info("workflow.ended", run_id=run_id, status=record["status"], error=record["error"])
        # Deleted between its last step and its waiting stored: the delete looks for waiting
        # runs once the thread is gone, so one of the two ends it.
        try:
            if record["status"] == "WAITING" and await self._thread_gone(info):
                record.update(await self.cancel(run_id, THREAD_GONE))
        except Exception:  # it waits: its approval is decided, or cancelled, by hand
            log.exception("workflow.cancel_failed", run_id=run_id)
        yield last_event(dict(record))

    async def _thread_gone(self, info: RunInfo) -> bool:
        """Whether the thread the run was started on is deleted (a run on none never is)."""
        if info.thread_id is None or self.thread_there is None:
            return False
        return not await self.thread_there(info.thread_id)

    async def _next(self, run_id: str, chunks: AsyncGenerator[Any, None]) -> Any:
        """The graph's next chunk, or None once it is through. A stop asked for the run
        ends it here (``_Stopped``), cutting off the step it awaits."""
        if (why := self.stops.asked_here(run_id)) is not None:
            raise _Stopped(why)
        with self.stops.interruptible(run_id):
            try:
                return await anext(chunks, None)
            except asyncio.CancelledError:
                if not self.stops.caught(run_id):  # another's cancel: the run is cut off
                    raise
        raise _Stopped(self.stops.asked_here(run_id) or "cancelled", cut_off=True)

    def _note(self, record: dict[str, Any], update: dict[str, Any]) -> set[str]:
        """Copy what nodes reported into the record (kept in memory while the run goes on,
        where ``get_run`` reads it; stored when the run ends or waits: the checkpoints hold
        the outputs meanwhile, and a run cut off is found by its stored RUNNING record).
        Returns the nodes it copied."""
        copied = set()
        for node_update in update.values():
            if isinstance(node_update, dict):
                for node_id, state in (node_update.get("nodes") or {}).items():
                    record["nodes"][node_id] = node_record(state)
                    copied.add(node_id)
        return copied


def _run_info(record: dict[str, Any]) -> RunInfo:
    """The run ``record`` is of, as its nodes see it."""
    return RunInfo(
        record["id"],
        record["workflow"],
        record.get("thread_id"),
        record.get("profile"),
        record.get("user"),
    )


def _used(record: dict[str, Any], values: dict[str, Any]) -> None:
    """Put the model calls of the run's state ``values`` in ``record`` (the thread's cost
    includes them)."""
    if values.get("usage"):
        record["usage"] = usage_since(values["usage"], record.get("usage_before"))


async def _ended(record: dict[str, Any], stretch: _Stretch) -> None:
    """The bookkeeping of a stretch of a run stored as ended or waiting (its steps
    checkpointed), however it came to: no run answers its expert nodes again, so their
    recorded replies are forgotten (not before: a record left RUNNING is resumed, and
    replays what they recorded); its usage goes to its sink."""
    await forget_all(stretch.info.recorded)
    if stretch.usage_sink is not None:
        stretch.usage_sink(dict(record.get("usage") or {}))


def _under_way(begun: dict[str, int], event: dict[str, Any], record: dict[str, Any]) -> None:
    """Keep ``begun`` (the run's nodes under way) as its node events say."""
    node, kind = event.get("node"), event.get("type")
    if event.get("workflow") != record["workflow"] or not isinstance(node, str):
        return
    if kind == "node_started":
        begun[node] = int((record["nodes"].get(node) or {}).get("visits") or 0)
    elif kind == "node_finished":
        begun.pop(node, None)


def _outputs(spec: WorkflowSpec, values: dict[str, Any], info: RunInfo) -> dict[str, Any]:
    context = {
        "inputs": values.get("inputs", {}),
        "nodes": values.get("nodes", {}),
        "run": {"id": info.run_id, "workflow": info.workflow, "thread_id": info.thread_id},
    }
    return {k: render(v, context, f"outputs.{k}") for k, v in spec.outputs.items()}


def _rejected(spec: WorkflowSpec, values: dict[str, Any]) -> str | None:
    """Why a run that went to its end stopped at a rejected approval with no ``on_reject``
    branch (the rejection ended it: it did not succeed), or None."""
    nodes = values.get("nodes") or {}
    for node in spec.nodes:
        if not isinstance(node, ApprovalNode) or node.on_reject:
            continue
        output = (nodes.get(node.id) or {}).get("output")
        if isinstance(output, dict) and output.get("approved") is False:
            by, comment = output.get("by"), output.get("comment")
            return (
                f"rejected at approval {node.id!r}"
                + (f" by {by}" if by else "")
                + (f": {comment}" if comment else "")
            )
    return None
