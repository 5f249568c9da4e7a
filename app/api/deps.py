"""Dependencies as Annotated aliases."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any

import structlog
from fastapi import Depends, Header, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from langchain_core.messages import BaseMessage

from agents.conversations import Conversations
from agents.echo import cut, cut_in
from agents.errors import SkilldeskError, ThreadNotFound, WorkflowNotFound
from agents.events import RunFailed, RunFinished, Token
from agents.feed import USAGE_SINK
from agents.state.spend import seconds_to_midnight
from agents.turns import ClientTurn, turn_fingerprint
from app.api.errors import ApiError
from app.auth.guard import Gate, metadata_url, no_scope
from app.auth.principal import Principal
from app.idempotency import MAX_KEY_CHARS
from app.services import Services


async def get_services(request: Request) -> Services:
    """The services opened in the app's lifespan. A coroutine, though it never waits, as
    are the other dependencies: FastAPI runs a plain function on its thread pool, a hop to
    another thread and back on every request."""
    return _services(request)


async def get_conversations(request: Request) -> Conversations:
    """The conversation runner."""
    return _services(request).conversations


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]
TARGET = "skilldesk"  # the model name of the service itself (``skilldesk/workflow/NAME``...)
ConversationsDep = Annotated[Conversations, Depends(get_conversations)]


async def claim_key(
    services: Services,
    thread_id: str,
    key: str | None,
    turn: Sequence[BaseMessage] | ClientTurn,
    target: Mapping[str, Any],
) -> tuple[str | None, str | None]:
    """Where a request with an ``Idempotency-Key`` for ``turn`` and ``target`` (its run
    options) is answered (``RunBus.claim_run``): ``(None, None)`` without a key or Redis."""
    if key is None or services.bus is None:
        return None, None
    here = services.conversations.get_run
    asked = turn_fingerprint(turn, target)
    return await services.bus.claim_run(thread_id, key, here, asked)


def answer_elsewhere(
    services: Services, run_id: str
) -> AsyncIterator[Token | RunFinished | RunFailed]:
    """The answer's events of a run another process runs (``RunBus.answer``)."""
    assert services.bus is not None  # a run found elsewhere was found through it
    return services.bus.answer(run_id)


def run_target(
    services: Services,
    *,
    model: str | None,
    skill: str | None,
    workflow: str | None,
    foreign_models: bool = False,
) -> dict[str, Any]:
    """What a request names to answer it, checked: the keyword arguments of a run.

    ``model`` selects a profile, or a target, for clients that speak only the OpenAI
    protocol: ``skilldesk`` (the router decides), ``skilldesk/workflow/NAME``,
    ``skilldesk/skill/NAME`` (``GET /v1/models`` lists them). A name that is neither is a 400
    ``unknown_model`` naming the profiles, unless ``foreign_models`` (chat completions, whose
    OpenAI clients send model names of their own): then the default profile answers. An
    unknown skill or workflow is a 400 naming the field, and so are both named at once
    (``conflicting_targets``).
    """
    skill_param = workflow_param = None
    if model is not None and (model == TARGET or model.startswith(TARGET + "/")):
        kind, _, name = model.removeprefix(TARGET).lstrip("/").partition("/")
        named = {"workflow": workflow, "skill": skill}.get(kind)
        if kind in ("workflow", "skill") and name and named not in (None, name):
            raise ApiError(
                400,
                "conflicting_targets",
                f"`model` names {kind} {name!r} and `{kind}` names {named!r}: name one.",
                param="model",
            )
        if kind == "workflow" and name:
            workflow, workflow_param = name, "model"
        elif kind == "skill" and name:
            skill, skill_param = name, "model"
        elif kind:
            raise ApiError(
                400,
                "unknown_model",
                f"{model!r} names no target: use {TARGET}, {TARGET}/workflow/NAME or "
                f"{TARGET}/skill/NAME (GET /v1/models lists them).",
                param="model",
            )
        model = None
    if skill is not None and workflow is not None:
        raise ApiError(
            400,
            "conflicting_targets",
            f"The request names skill {skill!r} and workflow {workflow!r}: name one of them "
            "(or neither, and the router decides).",
            param=workflow_param or "workflow",
        )
    if skill is not None and skill not in services.skills.registry:
        broken = services.skills.registry.not_loaded(skill)
        raise ApiError(
            400,
            "unknown_skill",
            f"Skill {skill!r} is not available: {broken}."
            if broken
            else f"There is no skill named {skill!r}; GET /v1/skills lists them.",
            param=skill_param or "skill",
        )
    installed = services.workflows.names() if workflow is not None else []
    if workflow is not None and workflow not in installed:
        try:
            services.workflow_registry.get(workflow)
            refused = WorkflowNotFound(workflow, installed)  # serving since: not matched yet
        except WorkflowNotFound as exc:  # none, or one withdrawn (a tool it needs is gone)
            refused = exc
        # Said as the workflow routes and the tool server say it (its code and message).
        message = cut_in(refused.message, workflow)
        raise ApiError(400, refused.code, message, param=workflow_param or "workflow")
    profiles = services.gateway.config.profiles if services.gateway.config is not None else {}
    if model is not None and model not in profiles and not foreign_models:
        raise _unknown_profile(model, sorted(profiles))
    profile = model if model in profiles else None
    return {"profile": profile, "skill": skill, "workflow": workflow}


def _unknown_profile(model: str, profiles: list[str]) -> ApiError:
    """A run's ``model`` that names no profile: refused rather than answered by the default,
    which the caller did not ask for (a misspelled profile is a misspelled skill)."""
    listed = f"the profiles: {', '.join(profiles)}" if profiles else "no profiles are configured"
    return ApiError(
        400,
        "unknown_model",
        f"There is no model profile named {cut(model)!r} ({listed}); leave `model` out for the "
        f"default profile, or name a target: {TARGET}, {TARGET}/workflow/NAME or "
        f"{TARGET}/skill/NAME (GET /v1/models lists them all).",
        param="model",
    )


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=MAX_KEY_CHARS,
        description="A key of the client's for this request: the same request sent again "
        "with it (a retry after a timeout) gets the first one's answer instead of running "
        "again.",
    ),
]


# A listing's page cursor: the last item's time, then its id (``Documents.find_page``).
_CURSOR = re.compile(r"-?[0-9]+(\.[0-9]+)?(e[+-]?[0-9]+)? .+")
CURSOR_PATTERN = f"^{_CURSOR.pattern}$"  # as the OpenAPI document states it


async def page_cursor(
    cursor: Annotated[
        str | None,
        Query(
            description="`next_cursor` of the previous page (none for the first page).",
            json_schema_extra={"pattern": CURSOR_PATTERN},
        ),
    ] = None,
) -> str | None:
    """A listing's ``cursor``, as a page before gave it: anything else is a 400 that says
    where cursors come from (the pattern, as pydantic would say it, tells a client nothing)."""
    if cursor is not None and _CURSOR.fullmatch(cursor) is None:
        shown = cursor if len(cursor) <= 80 else cursor[:80] + "…"
        raise ApiError(
            400,
            "invalid_request",
            f"The cursor {shown!r} is not one this service gave: send the `next_cursor` of "
            "the previous page as it came (URL-encoded), or no cursor for the first page.",
            param="cursor",
        )
    return cursor


Cursor = Annotated[str | None, Depends(page_cursor)]


bearer = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An API key (`skilldesk keys create`), or an on-behalf-of JWT. An agent "
    "acting for a user sends its own key here and the user's token in `X-On-Behalf-Of`.",
)


async def authenticate(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """The one dependency every route uses: the request's principal (401 or 429 if none)."""
    gate: Gate = request.app.state.gate
    del credentials  # read below from the header itself, malformed ones included
    try:
        principal = await gate.authenticate(
            request.headers.get("authorization"), request.headers.get("x-on-behalf-of")
        )
    except ApiError as error:  # a 401's challenge names where to learn how to sign in
        public_url = request.app.state.services.settings.public_url
        here = metadata_url(public_url, request.url.scheme, request.headers.get("host"))
        raise Gate.located(error, here) from None
    request.state.principal = principal
    USAGE_SINK.set(gate.usage_sink(principal))  # runs it starts count their tokens
    if principal.key_id is not None:
        structlog.contextvars.bind_contextvars(user=principal.user, key_id=principal.key_id)
    return principal


PrincipalDep = Annotated[Principal, Depends(authenticate)]


def needs(scope: str | None = None) -> Any:
    """A router's dependency: an authenticated principal holding ``scope`` (403 otherwise)."""

    async def check(principal: PrincipalDep) -> Principal:
        if scope is not None and not principal.can(scope):
            raise no_scope(principal, scope)
        return principal

    check.scope = scope  # type: ignore[attr-defined]  # the OpenAPI document names it
    return Depends(check)


def scopes_of(route: Any) -> set[str]:
    """The scopes a route's ``needs`` dependencies ask for (router-level ones included)."""
    found = set()
    for dependency in getattr(route, "dependencies", []):
        scope = getattr(dependency.dependency, "scope", None)
        if scope is not None:
            found.add(scope)
    return found


def approver(principal: PrincipalDep) -> str:
    """Who decides an approval: the one place that says who may approve (the ``approve``
    scope). Returns the user id, or "" for development mode's local user (the decision's
    ``by`` names them)."""
    if not principal.can("approve"):
        raise no_scope(principal, "approve")
    return principal.user or ""


ApproverDep = Annotated[str, Depends(approver)]


async def owner(principal: PrincipalDep) -> str | None:
    """Whose threads a request sees and creates: the principal's user (``None`` in
    development mode: every thread)."""
    return principal.user


OwnerDep = Annotated[str | None, Depends(owner)]


async def reach_thread(
    services: Services,
    principal: Principal,
    thread_id: str,
    *,
    may_be_new: bool = False,
    claim: bool = False,
    for_all: bool = False,
) -> bool:
    """Check that the principal may reach the thread: its own, or any for an admin or the
    local user. Another user's thread is a 404, as one that does not exist, so that ids
    cannot be probed.

    Args:
        may_be_new: a thread that does not exist yet is fine (a run creates it).
        claim: a thread that does not exist yet is made the principal's now (its record),
            so that a second request, the principal's or another user's, finds whose it
            is while the first request's run has not written it yet.
        for_all: claim for a principal who sees every thread too (an admin, or anyone
            without API keys): a request answered before its run has written anything (the
            runs API's 202) leaves the thread there for the next request.

    Returns:
        Whether this call made the thread (``claim``).

    Raises:
        ThreadNotFound: not the principal's, or (unless ``may_be_new``) no such thread.
    """
    records = services.threads.records
    if principal.sees_all:
        if not (claim and for_all) or await services.threads.exists(thread_id):
            return False
        made = await records.create(thread_id, owner=principal.user, agent=principal.agent)
        return made is not None
    record = await records.get(thread_id)
    if record is None and (may_be_new or claim) and not await services.threads.exists(thread_id):
        if not claim:
            return False
        made = await records.create(thread_id, owner=principal.user, agent=principal.agent)
        if made is not None:
            return True
        record = await records.get(thread_id)  # another request made it meanwhile
    if record is None:  # made since the first read (a run of the thread began meanwhile)
        record = await records.get(thread_id)
    if record is None or record.get("owner") != principal.user:
        raise ThreadNotFound(f"There is no thread {thread_id!r}.")
    return False


@asynccontextmanager
async def claimed_for(
    services: Services, principal: Principal, thread_id: str, *, for_all: bool = False
) -> AsyncIterator[None]:
    """``reach_thread`` with ``claim`` (and ``for_all``), for a request that starts a run: a
    new thread this request made its caller's is removed again if the request is refused
    before its run stores anything (a message with nothing new, a reused key, a stopping
    process)."""
    made = await reach_thread(services, principal, thread_id, claim=True, for_all=for_all)
    try:
        yield
    except (SkilldeskError, ApiError):
        if made and not await services.threads.has_state(thread_id):
            await services.threads.records.delete(thread_id)
        raise


async def within_budget(request: Request, principal: PrincipalDep) -> None:
    """Refuse a new run once its user spent their daily limit (SKILLDESK_DAILY_SPEND_LIMIT_USD):
    429 ``spending_limit_reached`` with ``Retry-After`` until midnight UTC."""
    services = _services(request)
    limit = services.settings.daily_spend_limit_micro_usd
    refused = await services.spend.refusal(principal.user, limit)
    if refused is not None:
        wait = seconds_to_midnight()
        raise ApiError(429, "spending_limit_reached", refused, headers={"Retry-After": str(wait)})


WithinBudget = Depends(within_budget)
