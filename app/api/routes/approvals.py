"""The approvers' inbox: pending approvals, and decisions that resume their runs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from agents.errors import AlreadyDecided
from agents.workflows.records import decision_taken
from app.api.deps import ApproverDep, Cursor, ServicesDep
from app.api.errors import CUT_OFF, ApiError, error_responses, handed_over
from app.api.schemas.threads import THREAD_ID_PATTERN
from app.api.schemas.workflows import ApprovalPublic, ApprovalsPublic, Decision, RunPublic
from app.api.sse import Cutoffs

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])


@router.get("", responses=error_responses(400, 500))
async def list_approvals(
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=500, description="Approvals per page.")] = 500,
    cursor: Cursor = None,
    thread_id: Annotated[
        str | None,
        Query(description="Only those of runs on this thread.", pattern=THREAD_ID_PATTERN),
    ] = None,
) -> ApprovalsPublic:
    """Approvals waiting for a decision, newest first, a page at a time, each with its run,
    workflow and thread; and how many wait in all (on every thread)."""
    pending, after = await services.engine.approvals_page(limit, cursor, thread_id)
    return ApprovalsPublic(
        approvals=[ApprovalPublic.model_validate(a) for a in pending],
        total=await services.engine.waiting(),
        next_cursor=after,
    )


@router.post(
    "/{approval_id}",
    responses=error_responses(
        400,
        404,
        409,
        500,
        503,
        notes={
            404: "No approval by that id was ever asked (`approval_not_found`).",
            409: "It was decided already (`already_decided`: the message says how, by whom "
            "and when, so a client sending its decision again can tell whether it was its "
            "own), or its run ended without a decision.",
            503: CUT_OFF,
        },
    ),
)
async def decide(
    request: Request,
    services: ServicesDep,
    approval_id: str,
    body: Decision,
    approver: ApproverDep,
) -> RunPublic:
    """Approve or reject; the run resumes with no new input (a rejection follows the gate's
    reject branch) and the thread it came from is told how it ended. The run goes on to its
    end (or next approval) should the client go away meanwhile."""
    resumed: list[str] = []
    cutoffs: Cutoffs = request.app.state.cutoffs
    try:
        with handed_over(services, resumed):
            record = await cutoffs.detached(
                services.workflow_turns.decide(
                    approval_id,
                    approved=body.decision == "approve",
                    by=approver or body.by,
                    comment=body.comment,
                    post=services.conversations.post,
                    on_start=resumed.append,
                )
            )
    except AlreadyDecided as exc:
        run = await services.engine.asked_by(approval_id)
        raise ApiError(409, exc.code, _decided_already(run, approval_id, exc.message)) from None
    return RunPublic.model_validate(record)


def _decided_already(run: dict[str, Any], approval_id: str, reason: str) -> str:
    """What a 409 ``already_decided`` tells: the decision taken, by whom and when, so that a
    client that sends its decision again (its answer lost) can tell whether it was its own.
    ``reason``: the engine's, for an approval whose run ended without a decision."""
    taken = decision_taken(run, approval_id)
    where = f"GET /v1/workflow-runs/{run['id']} shows run {run['id']}, now {run['status']}"
    if taken is None:
        return f"{reason[:1].upper()}{reason[1:]}; nothing was changed. {where}."
    how = "approved" if taken.get("approved") else "rejected"
    by = f"by {taken['by']}" if taken.get("by") else "by an approver not named"
    at = taken.get("at")
    when = (
        f" at {datetime.fromtimestamp(at, UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"
        if isinstance(at, int | float)
        else ""
    )
    said = f" (comment: {taken['comment']!r})" if taken.get("comment") else ""
    return (
        f"Approval {approval_id} was decided already: {how} {by}{when}{said}. This request "
        f"changed nothing; if that decision was this client's (sent again after a lost "
        f"answer), it stands. {where}."
    )
