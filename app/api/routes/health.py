"""Liveness, readiness and metrics."""

from __future__ import annotations

import hmac

import structlog
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from agents import metrics
from app.api.deps import ServicesDep
from app.api.errors import ApiError, error_responses
from app.api.schemas.health import HealthPublic, ReadinessPublic

log = structlog.get_logger(__name__)
router = APIRouter(tags=["operations"])


@router.get("/healthz", responses=error_responses(500))
@router.head("/healthz", include_in_schema=False)  # load balancers and uptime checks: HEAD
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
@router.head("/readyz", include_in_schema=False)
async def readyz(services: ServicesDep, request: Request) -> JSONResponse:
    """Ready when the checkpoint store and Redis (when configured) answer; says whether a
    model is configured and how callers are authenticated."""
    body = ReadinessPublic(
        status="ready",
        checkpointer=type(services.checkpointer).__name__,
        model="configured" if services.gateway.configured else "not configured",
        auth=request.app.state.gate.mode,
    )
    status = 200
    if services.conversations.stopping is not None:  # a load balancer stops sending runs
        body.status, body.error = "not ready", "stopping: takes no new runs"
        return JSONResponse(body.model_dump(exclude_none=True), status_code=503)
    try:
        await services.checkpointer.aget_tuple({"configurable": {"thread_id": "readyz-probe"}})
    except Exception as exc:
        body.status, body.error = "not ready", f"checkpoint store unreachable: {exc}"
        status = 503
    if status == 200 and services.bus is not None:  # keyed requests need it (rate limits)
        try:
            await services.bus.ping()
        except Exception as exc:
            problem = str(exc) or type(exc).__name__
            body.status, body.error = (
                "not ready",
                f"Redis (SKILLDESK_REDIS_URL) unreachable: {problem}",
            )
            status = 503
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status)


@router.get(
    "/metrics",
    response_class=Response,  # no media type of its own: errors stay documented as JSON
    responses={
        200: {
            "description": "Prometheus text format: turns, routes, model calls, tokens and "
            "latency by profile, tool calls by skill, errors by code, workflow runs by status, "
            "approvals waiting, runs under way, checkpoint write time (`skilldesk_*`).",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        **error_responses(
            401,
            500,
            notes={
                401: "`SKILLDESK_METRICS_TOKEN` is set and the request does not bear it "
                "(`invalid_metrics_token`)."
            },
        ),
    },
)
async def metrics_text(services: ServicesDep, request: Request) -> Response:
    """What this process counted since it started, for a Prometheus scrape (with
    `SKILLDESK_METRICS_TOKEN` set: for a scraper that bears it)."""
    token = services.settings.metrics_token
    if token is not None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        expected = token.get_secret_value().encode()
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), expected):
            raise ApiError(
                401,
                "invalid_metrics_token",
                "GET /metrics needs the metrics token: Authorization: Bearer <token>.",
                headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
            )
    try:  # approvals wait in the store, whichever process asked for them: counted there
        await services.engine.waiting()
    except Exception:
        log.warning("metrics.approvals_uncounted", exc_info=True)
    return PlainTextResponse(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)
