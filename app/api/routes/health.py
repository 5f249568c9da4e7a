"""Liveness and readiness."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from app.api.deps import ServicesDep

router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(services: ServicesDep) -> JSONResponse:
    """Ready when the checkpoint store answers; says whether a model is configured."""
    body: dict[str, Any] = {
        "status": "ready",
        "checkpointer": type(services.checkpointer).__name__,
        "model": "configured" if services.gateway.configured else "not configured",
    }
    try:
        await services.checkpointer.aget_tuple({"configurable": {"thread_id": "readyz-probe"}})
    except Exception as exc:
        body.update(status="not ready", error=f"checkpoint store unreachable: {exc}")
        return JSONResponse(body, status_code=503)
    return JSONResponse(body)
