"""Native threads and runs: history, and a run's typed events as Server-Sent Events."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse, StreamingResponse
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage

from agents.events import Event, RunFinished
from agents.memory.summaries import summarised_count
from app.api.deps import IdempotencyKey, ServicesDep, run_target
from app.api.errors import ApiError, error_responses
from app.api.openapi import named_events
from app.api.schemas.events import RUN_EVENTS
from app.api.schemas.threads import THREAD_HEADER, THREAD_ID_PATTERN, RunRequest, ThreadPublic

# JSONResponse renders with json.dumps, as before the response models: floats (scores, tool
# arguments) keep Python's notation, where pydantic's own JSON would write 1e-05 as 0.00001.
router = APIRouter(prefix="/v1/threads", tags=["threads"], default_response_class=JSONResponse)
ThreadId = Annotated[str, Path(pattern=THREAD_ID_PATTERN, description="The thread's id.")]
BAD_ID = "The thread id does not match its pattern (`invalid_request`, `param` names it)."


@router.get(
    "/{thread_id}",
    # Keys that do not apply to a message (name, tool calls) are left out, not null.
    response_model_exclude_unset=True,
    responses=error_responses(
        400, 404, 500, notes={400: BAD_ID, 404: "No such thread (`thread_not_found`)."}
    ),
)
async def get_thread(services: ServicesDep, thread_id: ThreadId) -> ThreadPublic:
    """The thread's active messages (with index and speaker), how many earlier ones are
    summarised, last route, loaded skills, workspace and usage."""
    state = await services.conversations.state(thread_id)
    if not state:
        raise ApiError(404, "thread_not_found", f"There is no thread {thread_id!r}.")
    # Indices count the summarised messages too: they match the summary's entries.
    summarised = summarised_count(state.get("summary"))
    messages = state.get("messages", [])
    return ThreadPublic.model_validate(
        {
            "thread_id": thread_id,
            "messages": [_message(summarised + i, m) for i, m in enumerate(messages)],
            "summarised_messages": summarised,
            "route": state.get("route"),
            "loaded_skills": state.get("loaded_skills", []),
            "workspace": state.get("workspace"),
            "usage": state.get("usage", {}),
        }
    )


@router.post(
    "/{thread_id}/runs/stream",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "The run's events as Server-Sent Events, in order: "
            "`node_started`, `route_decided`, `tool_called` / `tool_returned` (pair them by "
            "`call_id`), `token`, `error_raised`, `node_finished`, and last `run_finished` or "
            "`run_failed` (a model failure ends the run this way, with status 200).",
            "headers": THREAD_HEADER,
            "content": {
                "text/event-stream": named_events(
                    RUN_EVENTS, "`event: <type>` and `data: <JSON>` for each event."
                )
            },
        },
        **error_responses(
            400,
            413,
            500,
            notes={
                400: "The request is malformed: not JSON (`invalid_json`), against the "
                "schema (`invalid_request`: a blank `message`, a bad thread id...), or an "
                "unknown `skill` / `workflow` (`unknown_skill`, `unknown_workflow`).",
            },
        ),
    },
)
async def stream_run(
    services: ServicesDep,
    thread_id: ThreadId,
    body: RunRequest,
    idempotency_key: IdempotencyKey = None,
) -> StreamingResponse:
    """Run one turn; every decision arrives as an SSE event (``event:`` names its type).
    The same message sent again while it is answered joins the run under way."""
    target = run_target(services, model=body.model, skill=body.skill, workflow=body.workflow)
    target["idempotency_key"] = idempotency_key
    events = services.conversations.stream(thread_id, [HumanMessage(body.message)], **target)
    return StreamingResponse(
        _sse(events),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Thread-Id": thread_id},
    )


async def _sse(events: AsyncIterator[Event]) -> AsyncIterator[str]:
    async for event in events:
        yield f"event: {_name(event)}\ndata: {json.dumps(_payload(event), ensure_ascii=False)}\n\n"


def _name(event: Event) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in type(event).__name__)[1:]


def _payload(event: Event) -> dict[str, Any]:
    if isinstance(event, RunFinished):
        return {
            "thread_id": event.thread_id,
            "run_id": event.run_id,
            "answer": event.message.text,
            "usage": event.usage,
        }
    return dataclasses.asdict(event)


def _message(index: int, message: BaseMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"index": index, "role": message.type, "content": message.text}
    if message.name:
        out["name"] = message.name
    tool_calls = getattr(message, "tool_calls", None)
    if tool_calls:
        out["tool_calls"] = [
            {"id": c.get("id"), "name": c["name"], "arguments": c["args"]} for c in tool_calls
        ]
    if isinstance(message, ToolMessage):
        out["tool_call_id"] = message.tool_call_id
    return out
