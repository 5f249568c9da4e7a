"""The approvers' inbox: pending approvals, and decisions that resume their runs."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import ApproverDep, ServicesDep
from app.api.errors import error_responses
from app.api.schemas.workflows import ApprovalPublic, ApprovalsPublic, Decision, RunPublic

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])


@router.get("", responses=error_responses(500))
async def list_approvals(services: ServicesDep) -> ApprovalsPublic:
    """Approvals waiting for a decision, each with its run, workflow and thread."""
    pending = await services.engine.approvals()
    return ApprovalsPublic(
        approvals=[ApprovalPublic.model_validate(a) for a in pending],
        total=await services.engine.waiting(),
    )


@router.post(
    "/{approval_id}",
    responses=error_responses(
        400,
        404,
        409,
        500,
        notes={
            404: "No pending approval by that id (`run_not_found`).",
            409: "It was decided already (`already_decided`).",
        },
    ),
)
async def decide(
    services: ServicesDep, approval_id: str, body: Decision, approver: ApproverDep
) -> RunPublic:
    """Approve or reject; the run resumes with no new input (a rejection follows the gate's
    reject branch) and the thread it came from is told how it ended."""
    record = await services.workflow_turns.decide(
        approval_id,
        approved=body.decision == "approve",
        by=approver or body.by,
        comment=body.comment,
        post=services.conversations.post,
    )
    return RunPublic.model_validate(record)
