"""Driving a run's graph: what LangGraph streams becomes the run's events and its execution
record, stored once the run ends or waits.

The graph is streamed in several modes at once: what nodes emit (passed on as events), each
step's state updates (copied into the record as they come, so ``get_run`` shows a run under
way), the state after each step (the last one holds the outputs and the usage) and each
checkpoint (the run's own last state: its thread holds its forks' states too). A run ends
SUCCEEDED or FAILED, or stops WAITING at an approval; one cut off on the way (its stream
closed, its task cancelled, its last save failed) stays RUNNING as stored, and is let go to be
resumed. A run on a thread that is deleted meanwhile ends CANCELLED at its next step.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, cast

import structlog

from agents import metrics
from agents.errors import WorkflowFailed, WorkflowNotFound
from agents.feed import STOP_ASKED
from agents.replies import forget_all
from agents.state.schema import usage_since
from agents.workflows.compile import WorkflowContext
from agents.workflows.definitions import Definitions, LoadedWorkflow
from agents.workflows.executors import RunInfo
from agents.workflows.records import FINAL, LAST_EVENTS, RunRecords, graph_config, last_event
from agents.workflows.spec import ApprovalNode, WorkflowSpec
from agents.workflows.templates import render

log = structlog.get_logger(__name__)

THREAD_GONE = "its thread was deleted"

Cancel = Callable[[str, str], Awaitable[dict[str, Any]]]


class _ThreadGone(Exception):
    """The run's thread was deleted while it ran: it goes no further."""


class RunDriver:
    """Drives runs' graphs, keeping their records.

    Args:
        runs: The execution records (a run under way here is held there, written through).
        definitions: The definitions runs started with, and their graphs.
        cancel: Ends a waiting run (``RunDecisions.cancel``): one whose thread was deleted
            as it came to wait.
    """

    def __init__(self, runs: RunRecords, definitions: Definitions, cancel: Cancel) -> None:
        self.runs = runs
        self.definitions = definitions
        self.cancel = cancel
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
        stored = False
        try:
            steps = self._steps(record, start, config, workflow, usage_sink)
            async with contextlib.aclosing(steps) as events:
                async for event in events:
                    if event["type"] in LAST_EVENTS and event["record"]["id"] == run_id:
                        stored = True  # its last state is stored
                    yield event
        finally:
            # Cut off (its stream closed, its task cancelled, its last save failed): its
            # stored RUNNING record is the truth now, and the run is let go to be resumed;
            # unless the chat run it answers was asked to stop: then it ends here, cancelled.
            self.runs.under_way.pop(run_id, None)
            if not stored and self.runs.leases.holds(run_id):
                if STOP_ASKED.get()():
                    await self._cancelled(record)
                else:
                    await self.runs.leases.release(run_id)

    async def _cancelled(self, record: dict[str, Any]) -> None:
        """End ``record``'s run as cancelled, stored (its lease let go with it)."""
        record.update(status="CANCELLED", error="its run was cancelled by request")
        record["ended"] = time.time()
        try:
            await self.runs.save(record)
        except Exception:  # its lease expires: then it is resumed, as a run cut off is
            log.exception("workflow.cancel_failed", run_id=record["id"])
            return
        metrics.WORKFLOW_RUNS.labels(record["workflow"], "CANCELLED").inc()
        log.info("workflow.cancelled", run_id=record["id"], reason="its run was cancelled")

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
        info = RunInfo(
            run_id,
            record["workflow"],
            record.get("thread_id"),
            record.get("profile"),
            record.get("user"),
        )
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
                        if await self._thread_gone(info):  # no step more, nor an approval
                            raise _ThreadGone
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
            elif rejected := _rejected(workflow.spec, values):  # ended by a person's "no"
                record.update(status="CANCELLED", error=rejected)
            else:
                record.update(status="SUCCEEDED", outputs=_outputs(workflow.spec, values, info))
        except _ThreadGone:
            record.update(status="CANCELLED", error=THREAD_GONE)
        except WorkflowFailed as exc:
            record.update(status="FAILED", error=exc.message)
            if exc.node is not None:  # the failed node has no state update: record it here
                failed = {"status": "failed", "error": exc.error, "ms": exc.ms}
                record["nodes"][exc.node] = {**failed, "visits": exc.visits}
        except Exception as exc:  # a bug or a store failure fails the run, not the service
            log.exception("workflow.crashed", run_id=run_id)
            record.update(status="FAILED", error=f"{type(exc).__name__}: {exc}")
        if values.get("usage"):  # its model calls (the thread's cost includes them)
            record["usage"] = usage_since(values["usage"], record.get("usage_before"))
        if record["status"] in FINAL:
            record["ended"] = time.time()
        record.pop("decision", None)  # taken: its gate is passed (see WorkflowEngine.resume)
        await self.runs.save(record)
        # Stored as ended or waiting (its steps checkpointed): no run answers its expert nodes
        # again. Not before: a record left RUNNING is resumed, and replays what they recorded.
        await forget_all(info.recorded)
        metrics.WORKFLOW_RUNS.labels(record["workflow"], record["status"]).inc()
        log.info("workflow.ended", run_id=run_id, status=record["status"], error=record["error"])
        # Deleted between its last step and its waiting stored: the delete looks for waiting
        # runs once the thread is gone, so one of the two ends it.
        try:
            if record["status"] == "WAITING" and await self._thread_gone(info):
                record.update(await self.cancel(run_id, THREAD_GONE))
        except Exception:  # it waits: its approval is decided, or cancelled, by hand
            log.exception("workflow.cancel_failed", run_id=run_id)
        if usage_sink is not None:
            usage_sink(dict(record.get("usage") or {}))
        yield last_event(dict(record))

    async def _thread_gone(self, info: RunInfo) -> bool:
        """Whether the thread the run was started on is deleted (a run on none never is)."""
        if info.thread_id is None or self.thread_there is None:
            return False
        return not await self.thread_there(info.thread_id)

    def _note(self, record: dict[str, Any], update: dict[str, Any]) -> None:
        """Copy what nodes reported into the record (kept in memory while the run goes on,
        where ``get_run`` reads it; stored when the run ends or waits: the checkpoints hold
        the outputs meanwhile, and a run cut off is found by its stored RUNNING record)."""
        for node_update in update.values():
            if isinstance(node_update, dict):
                for node_id, state in (node_update.get("nodes") or {}).items():
                    record["nodes"][node_id] = _node_record(state)


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
