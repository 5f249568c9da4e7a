"""Workflows as two tools: ``run_workflow`` starts one (to its end, or to an approval it
waits for) and ``get_workflow_run`` reads a run later.

One tool for every workflow rather than one per workflow: the list a caller receives stays
the same size however many workflows are installed; the workflows' names and inputs are in
``run_workflow``'s description and its ``workflow`` enum.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from agents.echo import cut_in
from agents.errors import BadInputs, KeyReused, RunNotFound, WorkflowNotFound
from agents.feed import USAGE_SINK
from agents.prompts import Prompts
from agents.skills.results import ToolResult, tool_error
from agents.toolserver.results import failed, ok_result
from agents.workflows.engine import WorkflowEngine
from agents.workflows.registry import WorkflowRegistry

RUN_WORKFLOW, GET_WORKFLOW_RUN = "run_workflow", "get_workflow_run"
# The user a tool call is made for, set by the service's gate: runs started are recorded as
# theirs and only theirs are read. None: every run (development mode, an admin).
CALLER: ContextVar[str | None] = ContextVar("skilldesk_tool_caller", default=None)


class WorkflowTools:
    """The serving workflows of a registry as tools, run by the engine."""

    NAMES = (RUN_WORKFLOW, GET_WORKFLOW_RUN)

    def __init__(
        self,
        registry: WorkflowRegistry,
        engine: WorkflowEngine,
        budget: Callable[[str | None], Awaitable[str | None]] | None = None,
    ) -> None:
        self.registry = registry
        self.engine = engine
        self.budget = budget  # why a user may start no run today (their spending limit)

    def version(self) -> int:
        """Changes whenever the workflows are reloaded with changes."""
        return self.registry.version

    def definitions(self, prompts: Prompts) -> list[tuple[dict[str, Any], bool]]:
        """The two tools' definitions, each with whether it is read-only."""
        workflows = [
            {
                "name": w.name,
                "summary": " ".join(w.spec.description.split()),
                "inputs": ", ".join(
                    f"{name}: {spec.type}{'' if spec.required else ' (optional)'}"
                    for name, spec in w.spec.inputs.items()
                ),
            }
            for w in self.registry.all()
        ]
        return [
            (prompts.tool(RUN_WORKFLOW, workflows=workflows), False),
            (prompts.tool(GET_WORKFLOW_RUN), True),
        ]

    def refusal(self, name: str, arguments: Any, started: float) -> ToolResult | None:
        """The error of a ``run_workflow`` call naming a workflow that does not serve, as
        ``WorkflowNotFound`` says it (not as a value outside the tool's enum); else None."""
        workflow = arguments.get("workflow") if isinstance(arguments, dict) else None
        if name != RUN_WORKFLOW or not isinstance(workflow, str):
            return None
        try:
            self.registry.get(workflow)
        except WorkflowNotFound as exc:
            return tool_error(name, exc.code, cut_in(exc.message, workflow), started)
        return None

    async def call(
        self,
        name: str,
        args: dict[str, Any],
        started: float,
        *,
        idempotency_key: str | None = None,
        key_owner: str | None = None,
    ) -> ToolResult:
        """Start a run or read one; a failure is a ToolResult naming what went wrong (a run
        that ended FAILED is ``workflow_failed`` with its ``run_id`` and ``status`` as the
        error's details). A start sent again with the same ``idempotency_key`` (one of
        ``key_owner``'s) answers the first run as it stands."""
        try:
            caller = CALLER.get()
            if name == RUN_WORKFLOW:
                refused = await self.budget(caller) if self.budget is not None else None
                if refused is not None:
                    return tool_error(name, "spending_limit_reached", refused, started)
                workflow, inputs = str(args["workflow"]), args.get("inputs") or {}
                record = await self.engine.run(
                    workflow,
                    inputs,
                    user=caller,
                    idempotency_key=idempotency_key,
                    key_owner=key_owner,
                    usage_sink=USAGE_SINK.get(),  # its cost counts against the caller's day
                )
            else:
                record = await self.engine.get_run(str(args["run_id"]))
                if caller is not None and record.get("user") != caller:
                    raise RunNotFound(f"there is no workflow run {args['run_id']!r}")
        except (WorkflowNotFound, BadInputs, KeyReused, RunNotFound) as exc:
            sent = (str(args.get("workflow", "")), str(args.get("run_id", "")))
            return tool_error(name, exc.code, cut_in(str(exc), *sent), started)
        run = run_summary(record)
        if name == RUN_WORKFLOW and run["status"] == "FAILED":  # a call that did not do its work
            why = (
                f"workflow {run['workflow']!r} run {run['run_id']} failed: {run['error']} "
                f"({GET_WORKFLOW_RUN} reads it by its run_id)"
            )
            return failed(
                name, "workflow_failed", why, started, run_id=run["run_id"], status=run["status"]
            )
        return ok_result(name, json.dumps(run, ensure_ascii=False, default=str), run, started)


_NOT_ASKED = ("run_id", "workflow", "thread_id", "interrupt_id")  # the run's, or the engine's


def run_summary(record: dict[str, Any]) -> dict[str, Any]:
    """What a caller needs of an execution record: id, status, outputs, error, and the
    approval it waits for (decided at ``/v1/approvals``)."""
    waiting = record.get("waiting") or None
    return {
        "run_id": record["id"],
        "workflow": record["workflow"],
        "status": record["status"],
        "outputs": record.get("outputs") or {},
        "error": record.get("error"),
        "approval": None
        if waiting is None
        else {k: v for k, v in waiting.items() if k not in _NOT_ASKED},
    }
