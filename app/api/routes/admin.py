"""Operators' calls that every service process receives (the ``admin`` scope)."""

from __future__ import annotations

from typing import Annotated

import structlog
from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from app.api.deps import Cursor, PrincipalDep, ServicesDep
from app.api.errors import ApiError, error_responses
from app.api.patterns import KEY_ID
from app.api.schemas.admin import KeyCreate, KeyCreated, KeyList, KeyPublic, ReloadPublic
from app.auth.guard import Gate
from app.auth.keys import key_view

KeyId = Annotated[str, Path(pattern=KEY_ID, description="The key's public id (key_...).")]

log = structlog.get_logger(__name__)

router = APIRouter(prefix="/v1/admin", tags=["admin"], default_response_class=JSONResponse)


@router.post("/reload", responses=error_responses(500))
async def reload_content(services: ServicesDep) -> ReloadPublic:
    """Read the skills and workflows folders again, in this process and (with Redis) in
    every other one. Folders are watched anyway; this is for a change a process cannot see
    (a deploy onto a shared volume, a network mount without change events)."""
    report = await services.reload()
    others = await services.bus.publish("reload") if services.bus is not None else 0
    return ReloadPublic.model_validate({**report, "processes": max(others, 1)})


@router.get("/keys", responses=error_responses(400))
async def list_keys(
    services: ServicesDep,
    user: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500, description="Keys per page.")] = 100,
    cursor: Cursor = None,
) -> KeyList:
    """The API keys (of one user when ``user`` is given), never the keys themselves: the
    newest first, a page at a time; the first page ends with the keys from the settings."""
    keys, after = await services.keys.page(user, limit, cursor)
    return KeyList.model_validate({"data": [key_view(k) for k in keys], "next_cursor": after})


@router.post(
    "/keys",
    status_code=201,
    responses=error_responses(
        400,
        notes={
            400: "A field against the schema (`invalid_request`, `param` names it), or the "
            "first key (in development mode: none exists yet) without the `admin` scope "
            "(`first_key_needs_admin`): include `admin` in its scopes."
        },
    ),
)
async def create_key(
    services: ServicesDep,
    principal: PrincipalDep,
    body: KeyCreate,
    response: Response,
    request: Request,
) -> KeyCreated:
    """Make a key for a user. The answer carries the key this once (and is not to be cached):
    the store keeps only its hash. Every service process on the same store accepts it at
    once. The first key (in development mode: none exists yet) must include ``admin``: it
    ends development mode, and without it nobody could manage keys here."""
    gate: Gate = request.app.state.gate
    if await gate.first_key_without_admin(body.scopes):
        raise ApiError(
            400,
            "first_key_needs_admin",
            "No API key exists yet (development mode), and this first one lacks the 'admin' "
            "scope: it would end development mode with no key able to make or revoke keys "
            "through the API. Include 'admin' in its scopes, then make the other keys with "
            "it; or make any key on the service's store with `skilldesk keys create USER "
            "--scope SCOPE`.",
            param="scopes",
        )
    token, key = await services.keys.create(body.user, body.scopes, body.name, body.expires_in_s)
    gate.key_made()  # development mode ends with its first key, at once
    response.headers["Cache-Control"] = "no-store"
    log.info(
        "auth.key_created",
        key_id=key.id,
        for_user=key.user,
        scopes=list(key.scopes),
        by_user=principal.user,
        by_key=principal.key_id,
    )
    return KeyCreated.model_validate({**key_view(key), "key": token})


@router.delete(
    "/keys/{key_id}",
    responses=error_responses(
        400,
        404,
        409,
        notes={
            409: "Revoked already, or a bootstrap key (`key_from_settings`): remove it "
            "from SKILLDESK_API_KEYS or the keys file and restart."
        },
    ),
)
async def revoke_key(services: ServicesDep, principal: PrincipalDep, key_id: KeyId) -> KeyPublic:
    """Revoke a key: requests with it are refused from now on, in every process (it is kept,
    marked revoked, so that a request with it is told so)."""
    outcome, key = await services.keys.revoke(key_id)
    if outcome == "from_settings":
        raise ApiError(
            409,
            "key_from_settings",
            f"{key_id} comes from SKILLDESK_API_KEYS or the keys file: remove it there and "
            "restart the service.",
        )
    if outcome == "revoked_already":
        raise ApiError(409, "key_revoked_already", f"The API key {key_id} was revoked already.")
    if key is None:
        raise ApiError(404, "key_not_found", f"There is no API key {key_id}.")
    log.info(
        "auth.key_revoked",
        key_id=key_id,
        for_user=key.user,
        by_user=principal.user,
        by_key=principal.key_id,
    )
    return KeyPublic.model_validate(key_view(key))
