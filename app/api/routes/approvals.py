"""The approvers' inbox: pending approvals, and decisions that resume their runs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from app.api.deps import ApproverDep, ServicesDep
from app.api.errors import CUT_OFF, error_responses, handed_over
from app.api.schemas.threads import THREAD_ID_PATTERN, Cursor
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
            409: "It was decided already, or its run ended without a decision (`already_decided`).",
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
    return RunPublic.model_validate(record)
