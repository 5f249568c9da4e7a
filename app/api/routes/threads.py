"""Native threads and runs: history, and a run's typed events as Server-Sent Events."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Path
from fastapi.responses import StreamingResponse
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from pydantic import BaseModel, Field, field_validator
from pydantic_core import PydanticCustomError

from agents.events import Event, RunFinished
from agents.turns import MAX_MESSAGE_CHARS
from app.api.deps import ServicesDep, run_target
from app.api.errors import ApiError

router = APIRouter(prefix="/v1/threads", tags=["threads"])
ThreadId = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]


class RunRequest(BaseModel):
    """One user message and, optionally, what should answer it."""

    message: str = Field(max_length=MAX_MESSAGE_CHARS, description="The user's message.")
    skill: str | None = Field(None, description="Answer with this skill.")
    workflow: str | None = Field(None, description="Run this workflow.")
    model: str | None = Field(None, description="A model profile name for this run.")

    @field_validator("message")
    @classmethod
    def _some_text(cls, value: str) -> str:
        if not value.strip():
            raise PydanticCustomError("blank", "the message is empty; send the user's text")
        return value


@router.get("/{thread_id}")
async def get_thread(services: ServicesDep, thread_id: ThreadId) -> dict[str, Any]:
    """The thread's messages (with speaker), last route, loaded skills, workspace and usage."""
    state = await services.conversations.state(thread_id)
    if not state:
        raise ApiError(404, "thread_not_found", f"There is no thread {thread_id!r}.")
    return {
        "thread_id": thread_id,
        "messages": [_message(i, m) for i, m in enumerate(state.get("messages", []))],
        "route": state.get("route"),
        "loaded_skills": state.get("loaded_skills", []),
        "workspace": state.get("workspace"),
        "usage": state.get("usage", {}),
    }


@router.post("/{thread_id}/runs/stream")
async def stream_run(
    services: ServicesDep, thread_id: ThreadId, body: RunRequest
) -> StreamingResponse:
    """Run one turn; every decision arrives as an SSE event (``event:`` names its type)."""
    target = run_target(services, model=body.model, skill=body.skill, workflow=body.workflow)
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
