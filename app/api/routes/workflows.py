"""Workflows over HTTP: list, definition and graph, start a run (streamed or not), records."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from agents.errors import RunNotFound, ThreadNotFound, WorkflowNotFound
from agents.feed import USAGE_SINK
from agents.workflows.inputs import check_inputs
from agents.workflows.mermaid import mermaid
from agents.workflows.records import LAST_EVENTS
from app.api.deps import (
    Cursor,
    IdempotencyKey,
    PrincipalDep,
    ServicesDep,
    WithinBudget,
    reach_thread,
)
from app.api.errors import (
    CUT_OFF,
    ApiError,
    cut_off_message,
    error_of,
    error_responses,
    handed_over,
)
from app.api.openapi import named_events
from app.api.schemas.workflows import (
    WORKFLOW_RUN_EVENTS,
    ForkRequest,
    RunPublic,
    RunsPublic,
    RunStart,
    RunStatus,
    WorkflowDefinitionPublic,
    WorkflowProblemPublic,
    WorkflowPublic,
    WorkflowsPublic,
)
from app.api.sse import CutOff, Cutoffs
from app.auth.principal import Principal

log = structlog.get_logger(__name__)
router = APIRouter(tags=["workflows"])
NO_WORKFLOW = (
    "No such workflow (`unknown_workflow`, naming the installed ones), or one that does not "
    "serve (`workflow_unavailable`, saying why: its file did not load, a tool it needs is "
    "missing)."
)


@router.get("/v1/workflows", responses=error_responses(500))
async def list_workflows(services: ServicesDep) -> WorkflowsPublic:
    """Every loaded workflow, and the problems of the files that failed to load."""
    registry = services.workflow_registry
    return WorkflowsPublic(
        workflows=[_public(w) for w in registry.all()],
        errors=[WorkflowProblemPublic.model_validate(vars(p)) for p in registry.errors],
    )


@router.get("/v1/workflows/{name}", responses=error_responses(404, 500, notes={404: NO_WORKFLOW}))
async def get_workflow(services: ServicesDep, name: str) -> WorkflowDefinitionPublic:
    """One workflow's definition and its Mermaid graph."""
    workflow = _workflow(services, name)
    return WorkflowDefinitionPublic(
        **_public(workflow).model_dump(),
        definition=workflow.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
        mermaid=mermaid(workflow),
    )


@router.post(
    "/v1/workflows/{name}/runs",
    dependencies=[WithinBudget],
    responses={
        **error_responses(
            400,
            404,
            500,
            409,
            503,
            notes={
                503: CUT_OFF,
                400: "Inputs it cannot start with (`invalid_inputs`).",
                404: NO_WORKFLOW,
                409: "The `Idempotency-Key` started a run of other inputs "
                "(`idempotency_key_reused`).",
            },
        ),
        200: {
            "model": RunPublic,
            "content": {
                "text/event-stream": named_events(
                    WORKFLOW_RUN_EVENTS,
                    "`event: <type>` and `data: <JSON>` for each event. The last one says how "
                    "the stream stops: `workflow_waiting` (the run waits for a decision on "
                    "its `approval`, and goes on after it: it is not over), `workflow_ended` "
                    "(it is over: `SUCCEEDED`, `FAILED` or `CANCELLED`), `error` or "
                    "`handed_over` (the run goes on elsewhere: follow its `url`).",
                )
            },
            "description": "The record (the run ended, or waits for a decision: status "
            "`WAITING`, its approval in `waiting`), or with `stream: true` the run's events.",
        },
    },
)
async def start_run(
    request: Request,
    services: ServicesDep,
    principal: PrincipalDep,
    name: str,
    body: RunStart,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    """Run a workflow: to its end or its first approval (the record), or streamed. Sent
    again with the same ``Idempotency-Key``, it starts nothing and answers the first run's
    record once it waits or is over (streamed: its last event, ``replayed``); a first run
    left under way by a process that stopped or died, which no process runs, goes on here
    from its last step (streamed: its events), to its end or approval."""
    workflow = _workflow(services, name)
    if body.thread_id is not None:
        try:
            await reach_thread(services, principal, body.thread_id, may_be_new=True)
        except ThreadNotFound as exc:
            raise ApiError(400, "invalid_request", str(exc), param="thread_id") from None
        check_inputs(workflow.spec, body.inputs)  # a 400 makes no thread
        title = f"Workflow {name}"  # the caller's, told how the run ends
        owner = await services.threads.ensure(body.thread_id, owner=principal.user, title=title)
        if not principal.sees_all and owner != principal.user:  # another made it meanwhile
            raise ApiError(
                400,
                "invalid_request",
                f"There is no thread {body.thread_id!r}.",
                param="thread_id",
            )
    engine = services.engine
    started: list[str] = []
    events = engine.stream(
        name,
        body.inputs,
        thread_id=body.thread_id,
        user=principal.user,
        idempotency_key=idempotency_key,
        usage_sink=USAGE_SINK.get(),  # its cost counts against the starter's day
        on_start=started.append,
    )
    cutoffs: Cutoffs = request.app.state.cutoffs
    if not body.stream:
        with handed_over(services, started):
            # Driven by a task of its own: a client that goes away leaves the run going on.
            last = await cutoffs.detached(_last(events))
        return RunPublic.model_validate(last["record"])
    # Read from its first event by a task of its own, which the run's lease names.
    detached = cutoffs.detached_events(events)
    first = await anext(detached)  # bad inputs are a 400 before anything runs
    # The run's id named at once (a start sent again: the first run's): a client that goes
    # away finds its run by it.
    run_id = started[-1] if started else (first.get("record") or {}).get("id")
    named = {"X-Run-Id": str(run_id)} if run_id else {}
    return StreamingResponse(
        _sse(first, detached, started),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", **named},
    )


@router.get(
    "/v1/workflow-runs",
    responses=error_responses(
        400, 500, notes={400: "A query it cannot take: a `status` that is not a run status, say."}
    ),
)
async def list_runs(
    services: ServicesDep,
    principal: PrincipalDep,
    workflow: str | None = None,
    status: RunStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    cursor: Cursor = None,
) -> RunsPublic:
    """Execution records the caller may see, newest first, a page at a time. One request
    reads at most a few thousand records: a page can come back short (even empty) with a
    `next_cursor` to go on from."""
    owners: dict[str, str | None] = {}  # a thread's owner, read once per request

    async def visible(record: dict[str, Any]) -> bool:
        return await _mine(services, principal, record, owners)

    runs, after = await services.engine.runs_page(
        workflow=workflow,
        status=status,
        limit=limit,
        where=None if principal.sees_all else visible,
        after=cursor,
    )
    return RunsPublic(runs=[RunPublic.model_validate(r) for r in runs], next_cursor=after)


@router.get(
    "/v1/workflow-runs/{run_id}",
    responses=error_responses(404, 500, notes={404: "No such run (`run_not_found`)."}),
)
async def get_run(services: ServicesDep, principal: PrincipalDep, run_id: str) -> RunPublic:
    """One run's execution record: status, and per node status, time, output or error (a run
    under way: the nodes it finished so far, whichever process runs it)."""
    return RunPublic.model_validate(await _run_of(services, principal, run_id, look=True))


@router.post(
    "/v1/workflow-runs/{run_id}/fork",
    dependencies=[WithinBudget],
    responses=error_responses(
        400,
        404,
        409,
        500,
        503,
        notes={
            400: "Inputs it cannot take (`invalid_inputs`), or a node the run did not run "
            "(`invalid_request`).",
            404: "No such run (`run_not_found`).",
            409: "The run has not ended: it waits for a decision on an approval "
            "(`run_waiting`) or is under way (`run_running`); it can be forked once it ends.",
            503: CUT_OFF,
        },
    ),
)
async def fork_run(
    request: Request,
    services: ServicesDep,
    principal: PrincipalDep,
    run_id: str,
    body: ForkRequest,
) -> RunPublic:
    """Run a finished run again from ``node`` with some inputs changed, as a new run: the
    nodes before it keep their outputs, the rest run anew (the original is untouched)."""
    record = await _run_of(services, principal, run_id)
    ran = list(record.get("nodes") or {})
    if record["status"] not in ("RUNNING", "WAITING") and body.node not in ran:  # else a 409
        raise ApiError(
            400,
            "invalid_request",
            f"Run {run_id} did not run a node {body.node!r}; fork it from one of the nodes "
            f"it ran: {', '.join(ran) or '(none)'}.",
            param="node",
        )
    sink = USAGE_SINK.get()  # its cost counts against the day of who forked it
    forked: list[str] = []
    events = services.engine.fork(
        run_id, body.node, body.inputs, usage_sink=sink, on_start=forked.append
    )
    cutoffs: Cutoffs = request.app.state.cutoffs
    with handed_over(services, forked):  # goes on should its client go away, as a start does
        last = await cutoffs.detached(_last(events))
    return RunPublic.model_validate(last["record"])


@router.post(
    "/v1/workflow-runs/{run_id}/cancel",
    responses=error_responses(
        404,
        409,
        500,
        notes={
            404: "No such run (`run_not_found`).",
            409: "The run has ended (`run_ended`, naming its status: `SUCCEEDED`, `FAILED` or "
            "`CANCELLED`), before the cancel or while its last node finished; or it is a "
            "sub-workflow's run, a step of a run that has not ended (`run_is_step`, naming "
            "that run: cancel it, and its sub-workflow runs stop with it). Nothing was "
            "changed.",
        },
    ),
)
async def cancel_run(services: ServicesDep, principal: PrincipalDep, run_id: str) -> RunPublic:
    """Cancel a run of one's own that has not ended, whichever process runs it; the answer
    is its record, status ``CANCELLED`` and ``error`` naming who cancelled it, and the thread
    it came from is told. A run waiting for an approval: the approval leaves the inbox (a
    decision sent later is a 409) and the run never goes on. A run under way stops at its
    next node at the latest: in this process at once, its node under way cut off (recorded
    ``cancelled``; a tool call under way runs to its end, once, and is not made again); in
    another process after its node under way (a long node is cut off within a third of the
    run lease). Should that outlast the run lease, the answer is its record still
    ``RUNNING`` with ``cancel_requested``: it stops after that node."""
    await _run_of(services, principal, run_id)
    by = principal.user or "the local user"
    record = await services.workflow_turns.cancel(run_id, by=by, post=services.conversations.post)
    return RunPublic.model_validate(record)


async def _mine(
    services: Any,
    principal: Principal,
    record: dict[str, Any],
    owners: dict[str, str | None] | None = None,
) -> bool:
    """Whether a run is the principal's: started by them (a chat's run: by its thread's
    owner), or, recorded without who started it (from before they were), on a thread of
    theirs (``owners``: threads' owners read before, kept for the next runs)."""
    if principal.sees_all or record.get("user") == principal.user:
        return True
    thread_id = record.get("thread_id")
    if record.get("user") is None and thread_id:
        owners = {} if owners is None else owners
        if thread_id not in owners:
            thread = await services.threads.records.get(thread_id)
            owners[thread_id] = None if thread is None else thread.get("owner")
        return owners[thread_id] == principal.user
    return False


async def _run_of(
    services: Any, principal: Principal, run_id: str, *, look: bool = False
) -> dict[str, Any]:
    """A run's record if it is the principal's; another user's is not found, as none.
    ``look``: as a reader sees it (a run under way: its nodes so far, see ``look``)."""
    engine = services.engine
    record = await engine.get_run(run_id)
    if not await _mine(services, principal, record):
        raise RunNotFound(f"there is no workflow run {run_id!r}")
    if look:  # its checkpoint read only for its owner
        record = await engine.look(run_id)
    return dict(record)


def _workflow(services: Any, name: str) -> Any:
    try:
        return services.workflow_registry.get(name)
    except WorkflowNotFound as exc:  # as chat and the tool server tell it
        raise ApiError(404, exc.code, exc.message, param="name") from None


def _public(workflow: Any) -> WorkflowPublic:
    spec = workflow.spec
    return WorkflowPublic(
        name=spec.name,
        version=spec.version,
        description=spec.description,
        nodes=[n.id for n in spec.nodes],
    )


async def _last(events: AsyncIterator[dict[str, Any]]) -> dict[str, Any]:
    last: dict[str, Any] = {}
    async for event in events:
        last = event
    return last


async def _sse(
    first: dict[str, Any], events: AsyncIterator[dict[str, Any]], run_ids: list[str]
) -> AsyncIterator[str]:
    """The run's events (``events`` detached: a client that goes away leaves the run going on
    to its end); if the process stops before the run ends, the run is let go at the end of
    the grace period (another process, or this one's next start, resumes it from its last
    step) and the last event, ``handed_over``, says where to follow it. If the run fails
    here (its store, say), the last event, ``error``, says what happened and where the run,
    let go, goes on: the response's status went out with the first event."""
    event: dict[str, Any] | None = first
    while event is not None:
        kind = str(event.get("type", "event"))
        if kind in LAST_EVENTS:  # the record and approval as the API shows them
            event = WORKFLOW_RUN_EVENTS[kind].model_validate(event).model_dump(mode="json")
        yield f"event: {kind}\ndata: {json.dumps(event, default=str)}\n\n"
        try:
            event = await anext(events, None)
        except CutOff:  # the run's step was cancelled at the cut-off: the run was let go
            if run_ids:
                data = json.dumps(handed_over_event(run_ids[-1]))
                yield f"event: handed_over\ndata: {data}\n\n"
            return
        except Exception as exc:
            # The run's own failure (a store timing out or refusing): logged, and told.
            log.exception("workflow.stream_failed", run_id=run_ids[-1] if run_ids else None)
            yield f"event: error\ndata: {json.dumps(stopped_event(exc, run_ids))}\n\n"
            return


def stopped_event(exc: Exception, run_ids: list[str]) -> dict[str, Any]:
    """The last event of a streamed workflow run that failed in this process: the error, and
    (once the run was under way) that it goes on from its last step, where to follow it."""
    error = error_of(exc)
    why = "An internal error (logged)." if error.code == "internal_error" else error.message
    if not run_ids:
        message = f"{why} No run was started: send the request again."
        return {"type": "error", "code": error.code, "message": message}
    run_id = run_ids[-1]
    message = (
        f"Workflow run {run_id} stopped in this process. {why} It goes on from its last step "
        f"when this or another process resumes it: GET /v1/workflow-runs/{run_id} for its "
        "record."
    )
    url = f"/v1/workflow-runs/{run_id}"
    return {"type": "error", "code": error.code, "message": message, "run_id": run_id, "url": url}


def handed_over_event(run_id: str) -> dict[str, Any]:
    """The last event of a streamed workflow run its process stopped before it ended."""
    return {
        "type": "handed_over",
        "run_id": run_id,
        "url": f"/v1/workflow-runs/{run_id}",
        "reason": "shutting_down",
        "message": cut_off_message(run_id),
    }
