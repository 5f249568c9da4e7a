"""Bind a request id (and the thread id header) to every log line of a request; refuse
bodies over the size limit before they are read."""

from __future__ import annotations

import json
import uuid

import structlog
from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_body

log = structlog.get_logger("app.request")


class RequestContextMiddleware:
    """Pure ASGI middleware, so the bound context also covers streamed responses."""

    def __init__(self, app: ASGIApp, max_body_bytes: int = 16 * 1024 * 1024) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

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
            length = headers.get("content-length", "0")
            if length.isdigit() and int(length) > self.max_body_bytes:
                await self._too_large(send_with_id, int(length))
                return
            await self.app(scope, self._counted(receive), send_with_id)
        finally:
            log.info("http.request", method=scope["method"], path=scope["path"], status=status)
            structlog.contextvars.clear_contextvars()

    def _counted(self, receive: Receive) -> Receive:
        """``receive`` that stops a body without Content-Length (chunked) at the limit."""
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise HTTPException(413, detail=self._message(received, "at least "))
            return message

        return counted

    def _message(self, length: int, at_least: str = "") -> str:
        return (
            f"The request body is {at_least}{length:,} bytes; the limit is "
            f"{self.max_body_bytes:,} (SKILLDESK_MAX_REQUEST_BYTES)."
        )

    async def _too_large(self, send: Send, length: int) -> None:
        message = self._message(length)
        body = json.dumps(
            error_body(message, "invalid_request_error", "request_too_large")
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
