"""Dependencies as Annotated aliases."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Header, Request

from agents.conversations import Conversations
from app.api.errors import ApiError
from app.services import Services


def get_services(request: Request) -> Services:
    """The services opened in the app's lifespan."""
    services: Services = request.app.state.services
    return services


def get_conversations(request: Request) -> Conversations:
    """The conversation runner."""
    return get_services(request).conversations


ServicesDep = Annotated[Services, Depends(get_services)]
ConversationsDep = Annotated[Conversations, Depends(get_conversations)]


def run_target(
    services: Services, *, model: str | None, skill: str | None, workflow: str | None
) -> dict[str, Any]:
    """What a request names to answer it, checked: the keyword arguments of a run.

    ``model`` selects a profile when it names one (otherwise the default answers, as OpenAI
    clients send model names of their own); an unknown skill or workflow is a 400 naming
    the field.
    """
    if skill is not None and skill not in services.skills.registry:
        raise ApiError(
            400,
            "unknown_skill",
            f"There is no skill named {skill!r}; GET /v1/skills lists them.",
            param="skill",
        )
    installed = services.workflows.names() if workflow is not None else []
    if workflow is not None and workflow not in installed:
        listed = f"installed: {', '.join(installed)}" if installed else "no workflows are installed"
        raise ApiError(
            400,
            "unknown_workflow",
            f"There is no workflow named {workflow!r} ({listed}).",
            param="workflow",
        )
    config = services.gateway.config
    profile = model if config is not None and model in config.profiles else None
    return {"profile": profile, "skill": skill, "workflow": workflow}


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=200,
        description="A key of the client's for this request: the same request sent again "
        "with it (a retry after a timeout) gets the first one's answer instead of running "
        "again.",
    ),
]


def approver(request: Request) -> str:
    """Who decides an approval, checked here: the one place that says who may approve.

    Until API keys arrive (their issue), anyone who can reach the service may approve; the
    name comes from the decision's ``by``. This returns "" for "not known from the request".
    """
    return ""


ApproverDep = Annotated[str, Depends(approver)]


def owner(request: Request) -> str | None:
    """Whose threads a request sees and creates: the one place that says so.

    Until API keys arrive (their issue), every caller is the same local user: ``None``,
    which lists every thread and records none as anyone's.
    """
    return None


OwnerDep = Annotated[str | None, Depends(owner)]
