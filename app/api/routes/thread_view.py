"""What ``GET /v1/threads/{thread_id}`` shows of a thread: its messages (with index and
speaker, those a summary compressed marked), route, skills, workspace, files, usage and the
approvals its workflow runs wait for."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from langchain_core.messages import BaseMessage, ToolMessage

from agents.memory.summaries import summarised_count
from agents.state.records import ThreadRecord
from agents.state.traces import ThreadRuns
from app.api.deps import PrincipalDep, ServicesDep, reach_thread
from app.api.errors import ApiError, error_responses
from app.api.routes.threads import BAD_ID, NO_THREAD, ThreadId
from app.api.schemas.thread_view import AttachmentPublic, ThreadPublic
from app.api.schemas.workflows import ApprovalPublic

WAITING_SHOWN = 100  # a thread's waiting approvals it shows, newest first

# As the other thread routes (``threads.py``): rendered with json.dumps.
router = APIRouter(prefix="/v1/threads", tags=["threads"], default_response_class=JSONResponse)


@router.get(
    "/{thread_id}",
    # Keys that do not apply to a message (name, tool calls) are left out, not null.
    response_model_exclude_unset=True,
    responses=error_responses(400, 404, 500, notes={400: BAD_ID, 404: NO_THREAD}),
)
async def get_thread(
    services: ServicesDep,
    principal: PrincipalDep,
    thread_id: ThreadId,
    summarised: Annotated[
        bool,
        Query(
            description="Include the messages a summary took out of the active history "
            "(marked `summarised`); false: the active messages only."
        ),
    ] = True,
) -> ThreadPublic:
    """The thread's messages (with index and speaker; those a summary compressed marked),
    how many earlier ones are summarised, last route, loaded skills, workspace, usage, and
    the approvals its workflow runs wait for (to whoever may read it: a user without the
    `approve` scope sees what waits too)."""
    await reach_thread(services, principal, thread_id)
    state = await services.conversations.state(thread_id)
    record = await services.threads.records.get(thread_id)
    if not state and record is None:
        raise ApiError(404, "thread_not_found", f"There is no thread {thread_id!r}.")
    # A thread made empty (POST /v1/threads), or whose first run has not written yet: no
    # messages so far. Indices count the summarised messages too: they match the summary's entries.
    count = summarised_count(state.get("summary"))
    traces = services.conversations.traces
    runs = await traces.runs(thread_id) if traces is not None else ThreadRuns()
    earlier = await services.threads.summarised(thread_id, count) if summarised else []
    shown = [{**_message(i, m, runs), "summarised": True} for i, m in earlier]
    messages = state.get("messages", [])
    attachments = list(state.get("attachments", []))
    # Files a workflow's tool made for the thread: stored, and in its state only once a turn
    # of the thread has run since (the files of the thread all the same).
    known = {a.get("id") for a in attachments}
    attachments += [
        a
        for a in await services.attachments.of_thread(thread_id)
        if a.get("kind") == "generated" and a.get("id") not in known
    ]
    waiting, _ = await services.engine.approvals_page(WAITING_SHOWN, None, thread_id)
    return ThreadPublic.model_validate(
        {
            "thread_id": thread_id,
            **(_record_fields(record) if record is not None else {}),
            "messages": shown + [_message(count + i, m, runs) for i, m in enumerate(messages)],
            "summarised_messages": count,
            "route": state.get("route"),
            "loaded_skills": state.get("loaded_skills", []),
            "workspace": state.get("workspace"),
            "attachments": [AttachmentPublic.of(thread_id, a) for a in attachments],
            "usage": state.get("usage", {}),
            "waiting_approvals": [ApprovalPublic.model_validate(a) for a in waiting],
        }
    )


def _record_fields(record: ThreadRecord) -> dict[str, Any]:
    """What a thread's record adds to the thread: title, status, and the run under way."""
    fields: dict[str, Any] = {"title": record["title"], "status": record.get("status", "idle")}
    if fields["status"] == "running" and record.get("run_id"):
        fields["run_id"] = record["run_id"]
    return fields


def _message(index: int, message: BaseMessage, runs: ThreadRuns | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"index": index, "role": message.type, "content": message.text}
    if runs and message.id in runs.answers:  # the answer of a run whose trace is kept
        out["run_id"] = runs.answers[message.id]
    if runs and message.id in runs.failed:  # the run that came after it failed
        out["failed_run"] = runs.failed[message.id]
    if message.name:
        out["name"] = message.name
    tool_calls = getattr(message, "tool_calls", None)
    # Calls whose arguments were not JSON (refused; each has its result) are listed too: a
    # result with no call before it would read as a stray.
    invalid = getattr(message, "invalid_tool_calls", None)
    if tool_calls or invalid:
        out["tool_calls"] = [
            {"id": c.get("id"), "name": c["name"], "arguments": c["args"]} for c in tool_calls or ()
        ] + [
            {
                "id": c.get("id"),
                "name": c.get("name") or "",
                "arguments": {},
                "unreadable_arguments": str(c.get("args") or ""),
            }
            for c in invalid or ()
        ]
    if isinstance(message, ToolMessage):
        out["tool_call_id"] = message.tool_call_id
    return out
