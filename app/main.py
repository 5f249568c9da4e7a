"""The FastAPI application factory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.routing import Route

from app.api.deps import needs, scopes_of
from app.api.errors import install_error_handlers
from app.api.middleware import RequestContextMiddleware
from app.api.openapi import install_openapi, operation_id
from app.api.routes import (
    admin,
    approvals,
    attachments,
    auth,
    chat,
    feedback,
    health,
    runs,
    skills,
    thread_view,
    threads,
    tools,
    workflows,
)
from app.api.sse import Cutoffs
from app.auth.guard import Gate
from app.auth.obo import load_verifier
from app.auth.ratelimit import rate_limiter
from app.mcp.auth import McpGate
from app.mcp.transport import PATH as MCP_PATH
from app.mcp.transport import McpEndpoint
from app.services import Services, freeze_startup_heap, open_services, warm_up
from app.settings import Settings, load_settings
from app.web import mount as mount_web


def create_app(
    settings: Settings | None = None, *, freeze_heap: bool = False, stores_checked: bool = False
) -> FastAPI:
    """Build the app; services open in the lifespan, so a bad configuration stops start-up.

    ``freeze_heap``: the server process (``skilldesk serve``) warms up (``warm_up``), then
    freezes what start-up built (``freeze_startup_heap``); an app made in tests or embedded
    elsewhere does neither. ``stores_checked``: the caller reached the stores already
    (``skilldesk serve``: ``check_stores``, for its clean exit before the server starts).
    """
    settings = settings or load_settings()
    mcp = McpEndpoint()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_services(settings, stores_checked=stores_checked) as services:
            app.state.services = services
            loop = asyncio.get_running_loop()
            cutoffs = app.state.cutoffs = Cutoffs(settings.shutdown_grace_s)

            def stop() -> None:  # take no new runs; streamed workflow runs end by the grace
                services.conversations.drain()
                cutoffs.stop()

            # Called from a signal handler (``skilldesk serve`` on SIGTERM).
            app.state.drain = lambda: loop.call_soon_threadsafe(stop)
            gate = _gate(settings, services)
            await gate.start(settings.host)  # no keys on a public address: refuses to start
            app.state.gate = gate
            try:
                async with mcp.serve(services.tools, settings.host):
                    if freeze_heap:
                        await warm_up(services)
                        freeze_startup_heap()
                    yield
            finally:
                # Work requests left going (a client that went away) lets go of its runs
                # while the store is open, to be resumed as a stop's are.
                await cutoffs.aclose()
                if gate.limiter is not None:
                    await gate.limiter.aclose()

    app = FastAPI(
        title="Skilldesk",
        version="0.1.0",
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
        docs_url=None,  # app.web serves /docs from its vendored copy; no ReDoc (a CDN's)
        redoc_url=None,
    )
    app.add_middleware(RequestContextMiddleware, max_body_bytes=settings.max_request_bytes)
    install_error_handlers(app)
    install_openapi(app, scopes_of)
    # One lock on every door: each router's scope (a tool call on /v1/skills needs `tools`).
    app.include_router(health.router)
    app.include_router(auth.router)
    app.include_router(chat.router, dependencies=[needs("chat")])
    app.include_router(skills.router, dependencies=[needs()])
    app.include_router(tools.router, dependencies=[needs("tools")])
    app.include_router(threads.router, dependencies=[needs("chat")])
    app.include_router(thread_view.router, dependencies=[needs("chat")])
    app.include_router(attachments.router, dependencies=[needs("chat")])
    app.include_router(feedback.router, dependencies=[needs("chat")])
    app.include_router(runs.router, dependencies=[needs("chat")])
    app.include_router(workflows.router, dependencies=[needs("chat")])
    app.include_router(approvals.router, dependencies=[needs("approve")])
    app.include_router(admin.router, dependencies=[needs("admin")])
    # The exact path, no redirect to /mcp/ (a mount would answer /mcp with one).
    app.router.routes.append(Route(MCP_PATH, endpoint=McpGate(mcp)))
    mount_web(app)
    return app


def _gate(settings: Settings, services: Services) -> Gate:
    """The authentication gate the settings describe."""
    secret = settings.obo_secret.get_secret_value() if settings.obo_secret else None
    verifier = load_verifier(
        issuer=settings.obo_issuer,
        audience=settings.obo_audience,
        secret=secret,
        public_key_file=settings.obo_public_key_file,
        jwks_file=settings.obo_jwks_file,
        leeway_s=settings.obo_leeway_s,
    )
    return Gate(
        services.keys,
        verifier=verifier,
        limiter=rate_limiter(
            settings.rate_limit_per_minute,
            settings.redis_url,
            settings.rate_limit_tokens_per_minute,
            settings.redis_prefix,
        ),
        tokens_per_minute=settings.rate_limit_tokens_per_minute,
        spend=services.spend,
        disabled=settings.auth_disabled,
    )
