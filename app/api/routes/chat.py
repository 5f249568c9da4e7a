"""OpenAI-compatible chat completions, backed by checkpointed threads (``X-Thread-Id``)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import nullcontext
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import WithJsonSchema

from agents.events import Event, RunFailed, RunFinished, Token
from agents.threads.records import new_thread_id
from agents.turns import ClientTurn
from app.api.deps import (
    TARGET,
    IdempotencyKey,
    PrincipalDep,
    ServicesDep,
    WithinBudget,
    answer_elsewhere,
    claim_key,
    claimed_for,
    run_target,
)
from app.api.errors import ApiError, ErrorResponse, error_body, error_responses, model_error
from app.api.openapi import data_events
from app.api.schemas.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ModelPublic,
    ModelsPublic,
)
from app.api.schemas.runs import RUN_HEADERS
from app.api.schemas.threads import THREAD_ID_PATTERN
from app.api.sse import Cutoffs

# FastAPI writes these bodies with pydantic (no floats in them, so the bytes are json.dumps'):
# a completion validates and serialises in ~5 µs, where jsonable_encoder + json.dumps took ~33.
router = APIRouter(tags=["chat"])
T = TypeVar("T")
_THREAD_ID = re.compile(THREAD_ID_PATTERN)
# The header is checked by the route (400 `invalid_thread_id`), the pattern documented here.
ThreadHeader = Annotated[
    str | None,
    Header(
        description="Keep the conversation on the server under this id; without it each "
        "request is its own thread. Blank means none."
    ),
    WithJsonSchema({"type": "string", "pattern": THREAD_ID_PATTERN}),
]


@router.get("/v1/models", responses=error_responses(500))
async def list_models(services: ServicesDep) -> ModelsPublic:
    """What a chat UI's model menu offers: ``skilldesk`` (the router decides), each workflow
    (``skilldesk/workflow/NAME``) and skill (``skilldesk/skill/NAME``), then the model
    profiles, as OpenAI's model list."""
    profiles = sorted(services.gateway.config.profiles) if services.gateway.config else []
    names = [
        TARGET,
        *(f"{TARGET}/workflow/{n}" for n in sorted(services.workflows.names())),
        *(f"{TARGET}/skill/{s.name}" for s in services.skills.registry.all()),
        *(p for p in profiles if p != TARGET),
    ]
    return ModelsPublic(
        object="list",
        data=[ModelPublic(id=n, object="model", owned_by="skilldesk") for n in names],
    )


@router.post(
    "/v1/chat/completions",
    dependencies=[WithinBudget],
    response_model=ChatCompletion,
    # Only OpenAI's optional fields that Skilldesk does not send are null: leave them out.
    response_model_exclude_none=True,
    responses={
        200: {
            "description": "The answer: a `chat.completion` object, or with `stream: true` "
            "Server-Sent Events, each a `chat.completion.chunk` (a usage chunk last with "
            "`stream_options.include_usage`), then `data: [DONE]`. A model failure before "
            "the first token is an HTTP error; after it, an error event precedes `[DONE]`.",
            "headers": RUN_HEADERS,
            "content": {
                "text/event-stream": data_events(
                    [ChatCompletionChunk, ErrorResponse],
                    last="[DONE]",
                    description="`data: <chat.completion.chunk>` events, then `data: [DONE]`.",
                )
            },
        },
        **error_responses(
            400,
            404,
            409,
            413,
            500,
            502,
            503,
            504,
            notes={
                404: "`X-Thread-Id` names another user's thread (`thread_not_found`).",
                409: "The `Idempotency-Key` came before with another last user message or "
                "target on the thread (`idempotency_key_reused`): a new request needs a new key.",
                400: "The request is malformed: not JSON (`invalid_json`), against the "
                "schema (`invalid_request`), a bad `X-Thread-Id` (`invalid_thread_id`), "
                "no new user message (`no_new_message`), client-side tools "
                "(`client_tools_unsupported`), a content part the role may not send "
                "(`invalid_content`), too much text (`message_too_long`), or an unknown "
                "`skill` / `workflow`, or a `model` naming a target not installed "
                "(`unknown_skill`, `unknown_workflow`, `workflow_unavailable`, `unknown_model`). "
                "`param` names the field.",
            },
        ),
    },
)
async def chat_completions(
    body: ChatCompletionRequest,
    request: Request,
    services: ServicesDep,
    principal: PrincipalDep,
    response: Response,
    x_thread_id: ThreadHeader = None,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any] | StreamingResponse:
    """Answer a chat; with ``X-Thread-Id`` the service keeps the history between requests.

    On a thread that already has history only the messages after the request's last assistant
    message are new (system messages are taken on the first turn only), so clients may send
    either the full history or just the new message.
    """
    _no_client_tools(body)
    thread_id = _thread_id(x_thread_id)
    cutoffs: Cutoffs = request.app.state.cutoffs
    target = run_target(
        services, model=body.model, skill=body.skill, workflow=body.workflow, foreign_models=True
    )
    named = x_thread_id is not None and bool(x_thread_id.strip())  # another's: a 404
    async with claimed_for(services, principal, thread_id) if named else nullcontext():
        conversations = services.conversations
        # Which messages are new is decided against the history the run reads (one read).
        turn = ClientTurn([m.model_dump(exclude_none=True) for m in body.messages])
        target.update(idempotency_key=idempotency_key, owner=principal.user, agent=principal.agent)
        target["guard"] = None if principal.sees_all else principal.user
        created = int(time.time())
        claimed = await claim_key(services, thread_id, idempotency_key, turn, target)
        target["run_id"], theirs = claimed
        elsewhere = answer_elsewhere(services, theirs) if theirs is not None else None
        if not body.stream:
            # A retry of a request another process answers: that run's end (None in the rare
            # case its keys expired while it was read: then this process answers).
            result = None
            if elsewhere is not None:
                assert theirs is not None
                result = await _within(cutoffs, _last(elsewhere), thread_id, theirs)
            if result is None:
                feed = conversations.start(
                    thread_id, turn, **target
                )  # the run, or the one it joins
                ended = _last(feed.read())  # InvalidTurn comes first: a 400
                result = await _within(cutoffs, ended, thread_id, feed.run_id)
            assert result is not None  # a run's own events end with RunFinished or RunFailed
            ids = {"X-Thread-Id": thread_id, "X-Run-Id": result.run_id}
            if isinstance(result, RunFailed):  # the thread keeps the message: say which it is
                raise model_error(result.code, result.message, ids)
            response.headers.update(ids)
            return _completion(result, body.model, created)

        # Read up to the first answer event before answering, so a failure that comes first
        # (all retries and fallbacks exhausted) is a plain HTTP error rather than a broken stream.
        events: AsyncIterator[Event] | None = elsewhere
        run_id = theirs
        first = None
        if elsewhere is not None:
            assert theirs is not None
            first = await _within(cutoffs, _first_answer(elsewhere), thread_id, theirs)
        if events is None or first is None:
            feed = conversations.start(thread_id, turn, **target)  # the run, or the one it joins
            run_id, events = feed.run_id, feed.read()
            # InvalidTurn comes first: a 400.
            first = await _within(cutoffs, _first_answer(events), thread_id, run_id)
        assert first is not None  # a run's own events end with RunFinished or RunFailed
        assert run_id is not None  # a run elsewhere answers only for its claimed id
        ids = {"X-Thread-Id": thread_id, "X-Run-Id": run_id}
        if isinstance(first, RunFailed):
            raise model_error(first.code, first.message, ids)
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(
            _sse(
                first,
                events,
                chunk_id=f"chatcmpl-{run_id}",  # as the answer's id without streaming
                model=body.model,
                created=created,
                include_usage=include_usage,
                cutoff=(cutoffs, thread_id),
            ),
            media_type="text/event-stream",
            headers={**ids, "Cache-Control": "no-cache"},
        )


async def _within(cutoffs: Cutoffs, waiting: Awaitable[T], thread_id: str, run_id: str) -> T:
    """What ``waiting`` gives, unless the process stops first: at its grace period's end (a
    moment before uvicorn would cut the request off) a 503 ``shutting_down`` saying where the
    answer will be, rather than a bare 500 (the run goes on in another process, or in this
    one when it starts again)."""
    try:
        async with cutoffs.wait() as wait:
            return await waiting
    except TimeoutError:
        if not wait.expired():
            raise
        # Not to be sent again (OpenAI's SDKs retry a 503 unless told): the run may still
        # end here, or goes on elsewhere, and a resend could then ask it twice.
        headers = {"X-Thread-Id": thread_id, "X-Run-Id": run_id, "X-Should-Retry": "false"}
        raise ApiError(
            503, "shutting_down", _stopped(thread_id), type_="server_error", headers=headers
        ) from None


def _stopped(thread_id: str) -> str:
    return (
        "This service process stopped while answering; another process (or this one when it "
        "starts again) goes on with the run from its last step, and the answer will be in "
        f"the thread: GET /v1/threads/{thread_id} (do not send the message again)."
    )


async def _first_answer(events: AsyncIterator[Event]) -> Event | None:
    """The first token or end of a run's events; None if they end with neither (only a run
    elsewhere whose keys expired while it was read does)."""
    async for event in events:
        if isinstance(event, Token | RunFinished | RunFailed):
            return event
    return None


async def _last(events: AsyncIterator[Event]) -> RunFinished | RunFailed | None:
    """How a run's events end (None: see ``_first_answer``)."""
    async for event in events:
        if isinstance(event, RunFinished | RunFailed):
            return event
    return None


def _thread_id(header: str | None) -> str:
    if header is None or not header.strip():
        return new_thread_id()
    value = header.strip()
    if not _THREAD_ID.match(value):
        raise ApiError(
            400,
            "invalid_thread_id",
            "X-Thread-Id must be 1–128 characters of "
            "letters, digits, '.', '_', ':' or '-', starting with a letter or digit.",
            param="X-Thread-Id",
        )
    return value


def _usage(usage: dict[str, int]) -> dict[str, int]:
    prompt, completion = usage.get("input_tokens", 0), usage.get("output_tokens", 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": usage.get("total_tokens", prompt + completion),
    }


def _completion(result: RunFinished, model: str, created: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{result.run_id}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.message.text},
                "finish_reason": "stop",
            }
        ],
        "usage": _usage(result.usage),
    }


async def _sse(
    first: Event,
    rest: AsyncIterator[Event],
    *,
    chunk_id: str,
    model: str,
    created: int,
    include_usage: bool,
    cutoff: tuple[Cutoffs, str],
) -> AsyncIterator[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        payload = {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    streamed = False

    async def all_events() -> AsyncIterator[Event]:
        yield first
        cutoffs, thread_id = cutoff
        while True:
            try:
                async with cutoffs.wait() as wait:
                    event = await anext(rest, None)
            except TimeoutError:
                if not wait.expired():
                    raise
                # The process stops: the run goes on elsewhere, this stream cannot follow it.
                run_id = chunk_id.removeprefix("chatcmpl-")
                yield RunFailed(thread_id, run_id, "shutting_down", _stopped(thread_id))
                return
            if event is None:
                return
            yield event

    async for event in all_events():
        if isinstance(event, Token):
            streamed = True
            yield chunk({"content": event.text})
        elif isinstance(event, RunFinished):
            if not streamed and event.message.text:  # answers that came from no model call
                yield chunk({"content": event.message.text})
            yield chunk({}, "stop")
            if include_usage:
                payload = {
                    "id": chunk_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": _usage(event.usage),
                }
                yield f"data: {json.dumps(payload)}\n\n"
        elif isinstance(event, RunFailed):
            kind = "server_error" if event.code == "shutting_down" else "model_error"
            body = error_body(event.message, kind, event.code)
            yield f"data: {json.dumps(body, ensure_ascii=False)}\n\n"
    yield "data: [DONE]\n\n"


def _no_client_tools(body: ChatCompletionRequest) -> None:
    """Refuse tools the client offers (OpenAI's ``tools``, ``functions``): the model here
    calls the skills' tools, never the client's, so a client waiting for a tool call would
    get text instead, unsaid (its other unknown fields change nothing of the answer's shape
    and are ignored)."""
    for field in ("tools", "functions"):
        if (body.model_extra or {}).get(field):
            raise ApiError(
                400,
                "client_tools_unsupported",
                f"{field}: client-side tools are not supported: the service calls its skills' "
                "tools itself (name one with `skill`, or list them: GET /v1/skills); send the "
                "request without them.",
                param=field,
            )
