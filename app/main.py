"""The FastAPI application factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.routing import Route

from app.api.errors import install_error_handlers
from app.api.middleware import RequestContextMiddleware
from app.api.openapi import install_openapi, operation_id
from app.api.routes import approvals, chat, health, skills, threads, tools, workflows
from app.mcp.transport import PATH as MCP_PATH
from app.mcp.transport import McpEndpoint
from app.services import freeze_startup_heap, open_services, warm_up
from app.settings import Settings, load_settings
from app.web import mount as mount_web


def create_app(settings: Settings | None = None, *, freeze_heap: bool = False) -> FastAPI:
    """Build the app; services open in the lifespan, so a bad configuration stops start-up.

    ``freeze_heap``: the server process (``skilldesk serve``) warms up (``warm_up``), then
    freezes what start-up built (``freeze_startup_heap``); an app made in tests or embedded
    elsewhere does neither.
    """
    settings = settings or load_settings()
    mcp = McpEndpoint()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_services(settings) as services:
            app.state.services = services
            async with mcp.serve(services.tools, settings.host):
                if freeze_heap:
                    await warm_up(services)
                    freeze_startup_heap()
                yield

    app = FastAPI(
        title="Skilldesk",
        version="0.1.0",
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
    )
    app.add_middleware(RequestContextMiddleware, max_body_bytes=settings.max_request_bytes)
    install_error_handlers(app)
    install_openapi(app)
    app.include_router(health.router)
    app.include_router(chat.router)
    app.include_router(skills.router)
    app.include_router(tools.router)
    app.include_router(threads.router)
    app.include_router(workflows.router)
    app.include_router(approvals.router)
    # The exact path, no redirect to /mcp/ (a mount would answer /mcp with one).
    app.router.routes.append(Route(MCP_PATH, endpoint=mcp))
    mount_web(app)
    return app
