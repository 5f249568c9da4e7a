"""Feedback on a run: confirms or removes the examples it taught the router."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse

from agents.errors import RunNotFound
from app.api.deps import PrincipalDep, ServicesDep, reach_thread
from app.api.errors import error_responses
from app.api.patterns import FEEDBACK_RUN_ID
from app.api.schemas.learning import FeedbackPublic, FeedbackRequest, LearnedExamplePublic
from app.api.schemas.threads import THREAD_ID_PATTERN

router = APIRouter(prefix="/v1/threads", tags=["threads"], default_response_class=JSONResponse)
ThreadId = Annotated[str, Path(pattern=THREAD_ID_PATTERN, description="The thread's id.")]
RunId = Annotated[
    str,
    Path(pattern=FEEDBACK_RUN_ID, description="The run's id (`run_finished` carries it)."),
]


@router.post(
    "/{thread_id}/runs/{run_id}/feedback",
    responses=error_responses(
        400,
        404,
        500,
        notes={
            400: 'The body is not `{"rating": "up" | "down", "comment": ...}`, or an id '
            "does not match its pattern (`invalid_request`).",
            404: "No such thread (`thread_not_found`), or no such run of the thread with "
            "its trace kept (`run_not_found`).",
        },
    ),
)
async def run_feedback(
    services: ServicesDep,
    principal: PrincipalDep,
    thread_id: ThreadId,
    run_id: RunId,
    body: FeedbackRequest,
) -> FeedbackPublic:
    """Up or down on a run's answer, with a comment. Up confirms the examples the run taught
    the router (the per-skill cap keeps confirmed ones longest); down removes them. The
    feedback itself is kept either way."""
    await reach_thread(services, principal, thread_id)  # 404 for another user's thread
    await services.threads.get(thread_id)  # and for one that does not exist
    traces = services.conversations.traces
    if traces is not None and await traces.get(thread_id, run_id) is None:
        raise RunNotFound(
            f"Thread {thread_id!r} has no run {run_id!r} whose answer is kept (a thread keeps "
            "its last runs' traces); GET /v1/threads/{id} gives each answer its run_id."
        )
    touched = []
    if services.learned is not None:
        touched = await services.learned.feedback(thread_id, run_id, body.rating, body.comment)
    return FeedbackPublic(
        thread_id=thread_id,
        run_id=run_id,
        rating=body.rating,
        examples=[LearnedExamplePublic.model_validate(asdict(e)) for e in touched],
    )
