"""Bind a request id (and the thread id header) to every log line of a request."""

from __future__ import annotations

import uuid

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = structlog.get_logger("app.request")


class RequestContextMiddleware:
    """Pure ASGI middleware, so the bound context also covers streamed responses."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        request_id = headers.get("x-request-id") or uuid.uuid4().hex
        structlog.contextvars.clear_contextvars()
        context = {"request_id": request_id}
        if headers.get("x-thread-id"):
            context["thread_id"] = headers["x-thread-id"]
        structlog.contextvars.bind_contextvars(**context)
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            log.info("http.request", method=scope["method"], path=scope["path"], status=status)
            structlog.contextvars.clear_contextvars()
