"""Who am I, and the protected resource's metadata (RFC 9728) that MCP clients discover."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.api.deps import PrincipalDep, needs
from app.api.errors import error_responses
from app.api.schemas.auth import PrincipalPublic, ResourceMetadataPublic
from app.auth.guard import METADATA
from app.auth.principal import SCOPES
from app.mcp.transport import PATH as MCP_PATH

router = APIRouter(tags=["auth"])


@router.get("/v1/me", dependencies=[needs()], responses=error_responses(500))
async def whoami(request: Request, principal: PrincipalDep) -> PrincipalPublic:
    """The principal the credentials sent act as (never the key itself), and what its
    user's runs cost today."""
    services = request.app.state.services
    limit = services.settings.daily_spend_limit_micro_usd
    spent = await services.spend.spent(principal.user) if principal.user else None
    return PrincipalPublic(
        user=principal.user,
        scopes=sorted(principal.scopes),
        key_id=principal.key_id,
        agent=principal.agent,
        auth=request.app.state.gate.mode,
        spent_today_micro_usd=spent,
        daily_limit_micro_usd=limit or None,
    )


@router.get(METADATA, responses=error_responses(500))
@router.get(METADATA + MCP_PATH, responses=error_responses(500), include_in_schema=False)
async def resource_metadata(request: Request) -> ResourceMetadataPublic:
    """Where MCP clients learn which authorization servers this resource trusts."""
    settings = request.app.state.services.settings
    return ResourceMetadataPublic(
        resource=base_url(request) + MCP_PATH,
        authorization_servers=list(settings.oauth_authorization_servers),
        bearer_methods_supported=["header"],
        scopes_supported=list(SCOPES),
        resource_documentation=base_url(request) + "/docs",
    )


def base_url(request: Request) -> str:
    """The service's public base URL: the setting, else the URL the request came to."""
    configured = request.app.state.services.settings.public_url
    return str(configured or str(request.base_url)).rstrip("/")
