"""Native threads: listing, creating, renaming, deleting, their history and forks, and a
turn run on one with its typed events as Server-Sent Events (or resumed). What a thread shows
(``GET /v1/threads/{thread_id}``) is in ``thread_view.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from fastapi.responses import JSONResponse, StreamingResponse
from langchain_core.messages import HumanMessage

from agents.conversations import RESUME
from agents.errors import ThreadBusy
from agents.events import Event
from app.api.deps import (
    Cursor,
    IdempotencyKey,
    OwnerDep,
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
from app.api.schemas.events import RUN_EVENTS
from app.api.schemas.runs import RUN_HEADERS, RunRequest
from app.api.schemas.threads import (
    THREAD_ID_PATTERN,
    ForkRequest,
    HistoryPublic,
    NewThread,
    ThreadListPublic,
    ThreadPatch,
    ThreadRecordPublic,
)
from app.api.sse import follow, follow_shared, frame, run_stream
from app.auth.guard import no_scope

# JSONResponse renders with json.dumps, as before the response models: floats (scores, tool
# arguments) keep Python's notation, where pydantic's own JSON would write 1e-05 as 0.00001.
router = APIRouter(prefix="/v1/threads", tags=["threads"], default_response_class=JSONResponse)
ThreadId = Annotated[str, Path(pattern=THREAD_ID_PATTERN, description="The thread's id.")]
BAD_ID = "The thread id does not match its pattern (`invalid_request`, `param` names it)."
NO_THREAD = "No such thread (`thread_not_found`)."


@router.get("", responses=error_responses(400, 500))
async def list_threads(
    services: ServicesDep,
    principal: PrincipalDep,
    owner: OwnerDep,
    limit: Annotated[int, Query(ge=1, le=100, description="Threads per page.")] = 20,
    cursor: Cursor = None,
    all_users: Annotated[
        bool, Query(alias="all", description="Every user's threads (needs `admin`).")
    ] = False,
) -> ThreadListPublic:
    """The caller's threads, most recently updated first, a page at a time."""
    if all_users:
        if not principal.can("admin"):
            raise no_scope(principal, "admin")
        owner = None
    page, after = await services.threads.page(owner=owner, limit=limit, after=cursor)
    return ThreadListPublic.model_validate(
        {"data": page, "has_more": after is not None, "next_cursor": after}
    )


@router.post(
    "",
    status_code=201,
    responses=error_responses(400, 409, 500, notes={409: "The id is taken (`thread_exists`)."}),
)
async def create_thread(
    services: ServicesDep, principal: PrincipalDep, body: NewThread | None = None
) -> ThreadRecordPublic:
    """A new, empty thread (a run creates one too: this is for a client that wants the id
    first)."""
    body = body or NewThread()
    with _id_taken(body.thread_id):
        record = await services.threads.create(
            owner=principal.user, title=body.title, thread_id=body.thread_id, agent=principal.agent
        )
    return ThreadRecordPublic.model_validate(record)


@router.patch("/{thread_id}", responses=error_responses(400, 404, 500, notes={404: NO_THREAD}))
async def rename_thread(
    services: ServicesDep, principal: PrincipalDep, thread_id: ThreadId, body: ThreadPatch
) -> ThreadRecordPublic:
    """Rename a thread."""
    await reach_thread(services, principal, thread_id)
    return ThreadRecordPublic.model_validate(await services.threads.rename(thread_id, body.title))


@router.delete(
    "/{thread_id}",
    status_code=204,
    response_class=Response,
    responses=error_responses(
        400, 404, 409, 500, notes={404: NO_THREAD, 409: "A run is under way (`thread_busy`)."}
    ),
)
async def delete_thread(
    services: ServicesDep, principal: PrincipalDep, thread_id: ThreadId
) -> Response:
    """Delete a thread: every checkpoint, its record, its attachments."""
    await reach_thread(services, principal, thread_id)
    await services.threads.delete(thread_id)
    return Response(status_code=204)


@router.get(
    "/{thread_id}/history",
    responses=error_responses(
        400,
        404,
        500,
        notes={
            404: f"{NO_THREAD[:-1]}, or `before` names no checkpoint of it "
            "(`checkpoint_not_found`)."
        },
    ),
)
async def thread_history(
    services: ServicesDep,
    principal: PrincipalDep,
    thread_id: ThreadId,
    limit: Annotated[int, Query(ge=1, le=200, description="Checkpoints per page.")] = 50,
    before: Annotated[
        str | None, Query(max_length=200, description="A checkpoint id: the page before it.")
    ] = None,
) -> HistoryPublic:
    """The thread's checkpoints, newest first: step, node, time, parent and what changed."""
    await reach_thread(services, principal, thread_id)
    entries = await services.threads.history(thread_id, limit=limit + 1, before=before)
    return HistoryPublic.model_validate({"data": entries[:limit], "has_more": len(entries) > limit})


@router.post(
    "/{thread_id}/fork",
    status_code=201,
    responses=error_responses(
        400,
        404,
        409,
        500,
        notes={
            400: "Neither or both of `checkpoint_id` and `before_message` (`invalid_request`).",
            404: "No such thread or checkpoint (`thread_not_found`, `checkpoint_not_found`: "
            "for `before_message`, no turn ended just before that message).",
            409: "The new id is taken (`thread_exists`).",
        },
    ),
)
async def fork_thread(
    services: ServicesDep,
    principal: PrincipalDep,
    owner: OwnerDep,
    thread_id: ThreadId,
    body: ForkRequest,
) -> ThreadRecordPublic:
    """A new thread from one checkpoint of this one (the original is untouched), named
    ``title``, else the source's title with ``(fork)`` after it (``(edited)`` with ``edit``;
    ``(edited 2)``... when the user has a thread of that name). To edit an earlier message:
    fork with ``before_message`` (its index) and ``edit``, then send the edited one."""
    await reach_thread(services, principal, thread_id)
    checkpoint = body.checkpoint_id
    if checkpoint is None:
        assert body.before_message is not None  # the schema asks for one of the two
        checkpoint = await services.threads.checkpoint_before(thread_id, body.before_message)
    with _id_taken(body.thread_id):
        record = await services.threads.fork(
            thread_id,
            checkpoint,
            new_thread_id=body.thread_id,
            owner=owner,
            title=body.title,
            edit=body.edit,
        )
    return ThreadRecordPublic.model_validate(record)


@router.post(
    "/{thread_id}/runs/stream",
    response_class=StreamingResponse,
    dependencies=[WithinBudget],
    responses={
        200: {
            "description": "The run's events as Server-Sent Events, in order: "
            "`node_started`, `route_decided`, `tool_called` / `tool_returned` (pair them by "
            "`call_id`), `token`, `error_raised`, `node_finished`, and last `run_finished` or "
            "`run_failed` (a model failure ends the run this way, with status 200).",
            "headers": RUN_HEADERS,
            "content": {
                "text/event-stream": named_events(
                    RUN_EVENTS,
                    "`event: <type>`, `id: <sequence>` and `data: <JSON>` for each event; a "
                    "`: keep-alive` comment while the run is idle.",
                )
            },
        },
        **error_responses(
            400,
            404,
            409,
            413,
            500,
            503,
            notes={
                400: "The request is malformed: not JSON (`invalid_json`), against the "
                "schema (`invalid_request`: a blank `message`, a bad thread id...), or an "
                "unknown `skill` / `workflow` / `model` (`unknown_skill`, `unknown_workflow`, "
                "`workflow_unavailable`, `unknown_model`).",
                404: "Another user's thread (`thread_not_found`).",
                409: "The `Idempotency-Key` came before with another message or target "
                "(`idempotency_key_reused`).",
                503: "This process is stopping (`shutting_down`): send the request again.",
            },
        ),
    },
)
async def stream_run(
    services: ServicesDep,
    principal: PrincipalDep,
    thread_id: ThreadId,
    body: RunRequest,
    idempotency_key: IdempotencyKey = None,
) -> StreamingResponse:
    """Run one turn; every decision arrives as an SSE event (``event:`` names its type,
    ``id:`` its sequence number, for `GET .../runs/{run_id}/stream` with `Last-Event-ID`).
    The same message sent again while it is answered joins the run under way; with an
    `Idempotency-Key`, the same request sent again (whichever process it reaches) reads the
    first one's run from its first event."""
    target = run_target(services, model=body.model, skill=body.skill, workflow=body.workflow)
    async with claimed_for(services, principal, thread_id):
        turn = [HumanMessage(body.message)]
        run_id, theirs = await claim_key(services, thread_id, idempotency_key, turn, target)
        keepalive = services.settings.sse_keepalive_s
        if theirs is not None and services.bus is not None:  # a retry another process answers
            shared = follow_shared(services.bus, thread_id, theirs, 0, keepalive, services.leaving)
            return run_stream(shared, thread_id, theirs)
        feed = services.conversations.start(
            thread_id,
            turn,
            **target,
            idempotency_key=idempotency_key,
            owner=principal.user,
            agent=principal.agent,
            guard=None if principal.sees_all else principal.user,
            run_id=run_id,
        )
        return run_stream(
            follow(feed, 0, keepalive, leaving=services.leaving), thread_id, feed.run_id
        )


@router.post(
    "/{thread_id}/resume",
    response_class=StreamingResponse,
    dependencies=[WithinBudget],
    responses={
        200: {
            "description": "The resumed run's events, as `runs/stream` sends them.",
            "headers": RUN_HEADERS,
            "content": {"text/event-stream": named_events(RUN_EVENTS, "As `runs/stream`.")},
        },
        **error_responses(
            400,
            404,
            409,
            500,
            notes={
                404: NO_THREAD,
                409: "The last run ended: nothing to resume (`nothing_to_resume`); a run is "
                "under way (`thread_busy`).",
            },
        ),
    },
)
async def resume_thread(
    services: ServicesDep, principal: PrincipalDep, thread_id: ThreadId
) -> StreamingResponse:
    """Go on from the thread's latest checkpoint with no new input: a run a crash or a stop
    cut off completes, its finished steps not run again."""
    await reach_thread(services, principal, thread_id)
    await services.threads.get(thread_id)
    if await services.conversations.busy_anywhere(thread_id):  # a run under way: no waiting
        raise ThreadBusy(
            f"thread {thread_id!r} is answering a message; resume it only once a run was cut off",
        )
    feed = services.conversations.start(thread_id, RESUME)
    events = feed.read()
    first = await anext(events)  # NothingToResume comes before any event: a 409
    return StreamingResponse(
        _sse(events, first),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Thread-Id": thread_id, "X-Run-Id": feed.run_id},
    )


async def _sse(events: AsyncIterator[Event], first: Event | None = None) -> AsyncIterator[str]:
    seq = 0
    if first is not None:
        seq += 1
        yield frame(first, seq)
    async for event in events:
        seq += 1
        yield frame(event, seq)


@contextmanager
def _id_taken(thread_id: str | None) -> Iterator[None]:
    """A new thread's id in use (``thread_exists``), named as the request names it: its
    ``thread_id``. Whose thread has it is not said (ids are one namespace for all users)."""
    try:
        yield
    except ThreadBusy as exc:
        if exc.code != "thread_exists":
            raise
        raise ApiError(
            409,
            "thread_exists",
            f"The thread id {thread_id!r} is taken: send another `thread_id`, or none and the "
            "service chooses one.",
            param="thread_id",
        ) from None
