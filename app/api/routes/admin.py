"""Operators' calls that every service process receives (the ``admin`` scope)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from app.api.deps import ServicesDep
from app.api.errors import error_responses
from app.api.schemas.admin import ReloadPublic

router = APIRouter(prefix="/v1/admin", tags=["admin"], default_response_class=JSONResponse)


@router.post("/reload", responses=error_responses(500))
async def reload_content(services: ServicesDep) -> ReloadPublic:
    """Read the skills and workflows folders again, in this process and (with Redis) in
    every other one. Folders are watched anyway; this is for a change a process cannot see
    (a deploy onto a shared volume, a network mount without change events)."""
    report = await services.reload()
    others = await services.bus.publish("reload") if services.bus is not None else 0
    return ReloadPublic.model_validate({**report, "processes": max(others, 1)})
