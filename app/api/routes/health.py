"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.api.deps import ServicesDep
from app.api.errors import error_responses
from app.api.schemas.health import HealthPublic, ReadinessPublic

router = APIRouter(tags=["operations"])


@router.get("/healthz", responses=error_responses(500))
async def healthz() -> HealthPublic:
    """The process is up."""
    return HealthPublic(status="ok")


@router.get(
    "/readyz",
    response_model=ReadinessPublic,
    responses={
        503: {"model": ReadinessPublic, "description": "Not ready: `error` says why."},
        **error_responses(500),
    },
)
async def readyz(services: ServicesDep, request: Request) -> JSONResponse:
    """Ready when the checkpoint store answers; says whether a model is configured and how
    callers are authenticated."""
    body = ReadinessPublic(
        status="ready",
        checkpointer=type(services.checkpointer).__name__,
        model="configured" if services.gateway.configured else "not configured",
        auth=request.app.state.gate.mode,
    )
    status = 200
    try:
        await services.checkpointer.aget_tuple({"configurable": {"thread_id": "readyz-probe"}})
    except Exception as exc:
        body.status, body.error = "not ready", f"checkpoint store unreachable: {exc}"
        status = 503
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status)
