"""Runs of a thread as resources: start one (followed or not), read its status, cancel it,
and join its events from any point (``Last-Event-ID``), with keep-alives on idle streams.

With Redis (``SKILLDESK_REDIS_URL``) a run that another process runs is read, joined and
cancelled through Redis (``agents.bus``), so any process answers for any run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path
from fastapi.responses import JSONResponse, Response, StreamingResponse
from langchain_core.messages import HumanMessage

from agents.errors import RunNotFound
from agents.feed import RunFeed
from app.api.deps import (
    IdempotencyKey,
    PrincipalDep,
    ServicesDep,
    WithinBudget,
    claim_key,
    claimed_for,
    reach_thread,
    run_target,
)
from app.api.errors import ApiError, error_responses
from app.api.openapi import named_events
from app.api.patterns import RUN_ID
from app.api.routes.threads import NO_THREAD, ThreadId
from app.api.schemas.events import RUN_EVENTS
from app.api.schemas.runs import RUN_HEADERS, ChatRunPublic, RunCreate, RunTracePublic
from app.api.sse import follow, follow_shared, run_stream
from app.services import Services

router = APIRouter(prefix="/v1/threads", tags=["runs"], default_response_class=JSONResponse)
RunId = Annotated[str, Path(pattern=RUN_ID, description="The run's id.")]
NO_RUN = "No such run of the thread, or it ended too long ago (`run_not_found`)."
STOPPING = "This process is stopping (`shutting_down`): send the request again."
EVENTS = {
    "text/event-stream": named_events(
        RUN_EVENTS,
        "As `runs/stream`: `id: <sequence>`, `event: <type>`, `data: <JSON>`; a comment "
        "(`: keep-alive`) while the run is idle.",
    )
}


@router.post(
    "/{thread_id}/runs",
    status_code=202,
    dependencies=[WithinBudget],
    responses={
        200: {
            "description": "With `stream: true`: the run's events as they come.",
            "headers": RUN_HEADERS,
            "content": EVENTS,
        },
        **error_responses(
            400,
            404,
            409,
            413,
            500,
            503,
            notes={
                404: "Another user's thread (`thread_not_found`).",
                409: "With `if_busy: reject`: the thread is answering another message "
                "(`thread_busy`); the `Idempotency-Key` came before with another message or target "
                "(`idempotency_key_reused`).",
                503: STOPPING,
            },
        ),
    },
)
async def create_run(
    services: ServicesDep,
    principal: PrincipalDep,
    thread_id: ThreadId,
    body: RunCreate,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    """Start a run of one message: the run at once (202; follow it at `.../stream`), or with
    `stream: true` its events. It goes on if the client disconnects, unless asked not to.
    With an `Idempotency-Key`, the same request sent again (whichever process it reaches)
    gets the first one's run."""
    target = run_target(services, model=body.model, skill=body.skill, workflow=body.workflow)
    # Answered (202) before its run has written anything: a new thread is made now, for
    # every caller, so that it is there for the next request (QA: a 404 without API keys).
    async with claimed_for(services, principal, thread_id, for_all=not body.stream):
        turn = [HumanMessage(body.message)]
        run_id, theirs = await claim_key(services, thread_id, idempotency_key, turn, target)
        if theirs is not None:  # a retry of a request another process answers: its run
            answer = await _elsewhere(services, thread_id, theirs, stream=body.stream)
            if answer is not None:
                return answer
        feed = await services.conversations.begin(  # if_busy=reject: any process's run
            thread_id,
            turn,
            **target,
            owner=principal.user,
            agent=principal.agent,
            if_busy=body.if_busy,
            guard=None if principal.sees_all else principal.user,
            idempotency_key=idempotency_key,
            run_id=run_id,
        )
        if not body.stream:
            return JSONResponse(
                _public(feed.summary()).model_dump(),
                status_code=202,
                headers={"X-Thread-Id": thread_id, "X-Run-Id": feed.run_id},
            )
        cancel = (
            (lambda: services.conversations.cancel(feed.run_id))
            if body.cancel_on_disconnect
            else None
        )
        return _stream(services, feed, 0, on_disconnect=cancel, status=200)


@router.get(
    "/{thread_id}/runs/{run_id}",
    responses=error_responses(400, 404, 500, notes={404: NO_RUN}),
)
async def get_run(
    services: ServicesDep, principal: PrincipalDep, thread_id: ThreadId, run_id: RunId
) -> ChatRunPublic:
    """A run's status (queued, running, interrupted, succeeded, failed, cancelled), from
    whichever process runs it."""
    found = await _find(services, principal, thread_id, run_id)
    return _public(found.summary() if isinstance(found, RunFeed) else found)


@router.post(
    "/{thread_id}/runs/{run_id}/cancel",
    responses=error_responses(
        400,
        404,
        409,
        500,
        notes={
            404: NO_RUN,
            409: "The run is not under way (`run_not_active`; the message names its status): "
            "it ended, or it is `interrupted`, its workflow waiting for an approval (a "
            "rejection or `POST /v1/workflow-runs/{id}/cancel` ends it). Nothing was changed.",
        },
    ),
)
async def cancel_run(
    services: ServicesDep, principal: PrincipalDep, thread_id: ThreadId, run_id: RunId
) -> ChatRunPublic:
    """Cancel a queued or running run, whichever process runs it: a queued one never runs, a
    running one stops in the step under way (a model call is cut off; a side-effecting tool
    call ends and its result is recorded for a retry). The steps it finished stay in the
    thread, every tool call with its result. Any other run is a 409 `run_not_active` naming
    its status, and stays as it was."""
    found = await _find(services, principal, thread_id, run_id)
    run = found.summary() if isinstance(found, RunFeed) else found
    if run["status"] not in ("queued", "running"):
        raise ApiError(409, "run_not_active", _not_active(thread_id, run))
    if isinstance(found, RunFeed):
        services.conversations.cancel(run_id)
        return _public(found.summary())
    assert services.bus is not None  # a run found elsewhere was found through it
    await services.bus.publish("cancel", run_id=run_id)  # its process stops it
    found["cancel_requested"] = True
    return _public(found)


@router.get(
    "/{thread_id}/runs/{run_id}/stream",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "The run's events after `Last-Event-ID` (all without it), then "
            "each as it comes, to the run's end.",
            "headers": RUN_HEADERS,
            "content": EVENTS,
        },
        **error_responses(
            400,
            404,
            500,
            notes={
                400: "A malformed run id, or a `Last-Event-ID` that is not a number or is past "
                "the run's last event (`invalid_request`, `param` `Last-Event-ID`; the message "
                "names the last id).",
                404: NO_RUN,
            },
        ),
    },
)
async def join_run(
    services: ServicesDep,
    principal: PrincipalDep,
    thread_id: ThreadId,
    run_id: RunId,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            max_length=20,
            description="The last sequence id received: what follows it is sent.",
        ),
    ] = None,
) -> StreamingResponse:
    """Join a run's events (a reconnect: what was missed, then the live events), from
    whichever process runs it. A `Last-Event-ID` past the run's last event is a 400 naming
    the last; the last one itself reads what follows it (nothing, once the run ended)."""
    found = await _find(services, principal, thread_id, run_id)
    after = 0
    if last_event_id and last_event_id.strip():
        if not last_event_id.strip().isdigit():  # read as 0, it sent every event again
            raise ApiError(
                400,
                "invalid_request",
                f"Last-Event-ID {last_event_id!r} is not an event id of this stream: send the "
                "number in the `id:` line of the last event received (or none, to read all).",
                param="Last-Event-ID",
            )
        after = int(last_event_id)
    if isinstance(found, RunFeed):
        if after > len(found.events):  # this process numbers the run's events: none came
            raise _past_the_end(run_id, after, len(found.events))
        return _stream(services, found, after)
    # Elsewhere, the count written may lag the events while the run goes on: only the count
    # of a run that ended is its last id.
    last = found.get("events")
    if found["status"] not in ("queued", "running") and last is not None and after > last:
        raise _past_the_end(run_id, after, last)
    assert services.bus is not None  # a run found elsewhere was found through it
    events = follow_shared(
        services.bus,
        thread_id,
        run_id,
        after,  # not clamped to its count: the count written may lag the events
        services.settings.sse_keepalive_s,
        services.leaving,
    )
    return run_stream(events, thread_id, run_id)


@router.get(
    "/{thread_id}/runs/{run_id}/trace",
    responses=error_responses(
        400,
        404,
        500,
        notes={404: "No such run of the thread, or no trace of it (`run_not_found`)."},
    ),
)
async def get_trace(
    services: ServicesDep, principal: PrincipalDep, thread_id: ThreadId, run_id: RunId
) -> RunTracePublic:
    """How a run's answer was reached, kept after it ended: the route with its candidates and
    scores, the nodes with their timings, tool calls, errors, usage and times."""
    await reach_thread(services, principal, thread_id)
    traces = services.conversations.traces
    found = await traces.get(thread_id, run_id) if traces is not None else None
    if found is None:
        raise RunNotFound(f"thread {thread_id!r} has no run {run_id!r} with a trace")
    return RunTracePublic.model_validate(found)


async def _find(
    services: Services, principal: Any, thread_id: str, run_id: str
) -> RunFeed | dict[str, Any]:
    """The run: its feed when this process runs it, else its status as the process running
    it wrote it in Redis."""
    await reach_thread(services, principal, thread_id)
    missing = RunNotFound(f"thread {thread_id!r} has no run {run_id!r} (or it ended long ago)")
    feed = services.conversations.get_run(run_id)
    found: RunFeed | dict[str, Any] | None = None
    if feed is not None and feed.thread_id == thread_id:
        found = feed
    elif services.bus is not None:
        shared = await services.bus.status(run_id)
        found = shared if shared is not None and shared.get("thread_id") == thread_id else None
    if found is None or not await _of_the_thread_as_it_is(services, thread_id, found):
        raise missing
    return found


async def _of_the_thread_as_it_is(
    services: Services, thread_id: str, found: RunFeed | dict[str, Any]
) -> bool:
    """Whether the run is of the thread as it is now, not of one deleted before it (whose
    runs are kept a while, by the thread's id: another user may make a thread of that id).
    A run under way is always its thread's (a new thread's record may not be written yet)."""
    summary = found.summary() if isinstance(found, RunFeed) else found
    if summary.get("status") in ("queued", "running"):
        return True
    record = await services.threads.records.get(thread_id)
    if record is None:  # deleted (or from before records: then its state is there)
        return await services.threads.exists(thread_id)
    # A run that began before the record was made belongs to an earlier thread of the id
    # (a second of slack for clocks of several machines).
    return float(summary.get("created") or 0) >= float(record.get("created") or 0) - 1.0


async def _elsewhere(
    services: Services, thread_id: str, run_id: str, *, stream: bool
) -> Response | None:
    """A run another process runs, as ``create_run`` answers a run: its status, or its
    events from the first; None if its keys expired meanwhile (then this process runs it)."""
    assert services.bus is not None  # a run found elsewhere was found through it
    if not stream:
        status = await services.bus.status(run_id)
        if status is None:
            return None
        return JSONResponse(
            _public(status).model_dump(),
            status_code=202,
            headers={"X-Thread-Id": thread_id, "X-Run-Id": run_id},
        )
    keepalive = services.settings.sse_keepalive_s
    events = follow_shared(services.bus, thread_id, run_id, 0, keepalive, services.leaving)
    return run_stream(events, thread_id, run_id)


def _stream(
    services: Services,
    feed: RunFeed,
    after: int,
    *,
    on_disconnect: Callable[[], object] | None = None,
    status: int = 200,
) -> StreamingResponse:
    keepalive = services.settings.sse_keepalive_s
    events = follow(feed, after, keepalive, on_disconnect, services.leaving)
    return run_stream(events, feed.thread_id, feed.run_id, status)


def _public(summary: dict[str, Any]) -> ChatRunPublic:
    return ChatRunPublic.model_validate(summary)


def _past_the_end(run_id: str, after: int, last: int) -> ApiError:
    """A ``Last-Event-ID`` the run never sent: a client's mistake, not a stream to wait on."""
    there = f"the last is {last}" if last else "it has sent none yet"
    return ApiError(
        400,
        "invalid_request",
        f"Last-Event-ID {after} is past the events of run {run_id}: {there}. Send the id of "
        "the last event received (or none, to read them all).",
        param="Last-Event-ID",
    )


def _not_active(thread_id: str, run: dict[str, Any]) -> str:
    """Why a run that is not under way cannot be cancelled, and what to do instead."""
    run_id, status = run["id"], run["status"]
    if status == "interrupted":
        return (
            f"Run {run_id} is not under way: it is interrupted, its workflow waiting for an "
            "approval, and nothing was cancelled. To end that workflow, cancel its run (POST "
            "/v1/workflow-runs/{id}/cancel) or have an approver reject the approval (GET "
            f"/v1/approvals?thread_id={thread_id} lists both)."
        )
    if run.get("resumed_as"):  # cut off by a process that stopped, gone on as another run
        return (
            f"Run {run_id} is not under way: it was cut off and went on as run "
            f"{run['resumed_as']}; cancel that one."
        )
    return f"Run {run_id} is not under way: it ended ({status}); there is nothing to cancel."


__all__ = ["NO_THREAD", "router"]
