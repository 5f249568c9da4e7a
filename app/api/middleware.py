"""Bind the request id (``X-Request-ID``, sent or made), the thread id and the run id to
every log line of a request and send them back as response headers; refuse bodies over the
size limit, and JSON whose text is not valid Unicode, before any route."""

from __future__ import annotations

import json
import re
import uuid

import structlog
from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agents.text import NOT_UNICODE, bad_text
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
        request_id = headers.get("x-request-id", "")
        if not _REQUEST_ID.match(request_id):  # none, or not one to echo into logs
            request_id = uuid.uuid4().hex
        structlog.contextvars.clear_contextvars()
        context = {"request_id": request_id}
        if headers.get("x-thread-id"):
            context["thread_id"] = headers["x-thread-id"]
        named = _IDS_IN_PATH.match(scope["path"])
        if named is not None:
            context.update({k: v for k, v in named.groupdict().items() if v})
        structlog.contextvars.bind_contextvars(**context)
        status = 500

        answered: dict[str, str] = {}  # the ids the route's response headers name

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                sent = list(message.get("headers", []))
                names = {k.lower() for k, _ in sent}
                for name, key in _ID_HEADERS:
                    if name in names:  # the route's (a run it started): on the last log line
                        value = next(v for k, v in sent if k.lower() == name).decode("latin-1")
                        structlog.contextvars.bind_contextvars(**{key: value})
                        # Also kept here: a streamed response sends from a task of its own,
                        # whose bindings the request's last log line does not see.
                        answered[key] = value
                    elif key in context and status < 400:
                        sent.append((name, context[key].encode("latin-1")))
                message["headers"] = [*sent, (b"x-request-id", request_id.encode("latin-1"))]
            await send(message)

        try:
            length = headers.get("content-length", "0")
            if length.isdigit() and int(length) > self.max_body_bytes:
                await self._too_large(send_with_id, int(length))
                return
            if scope["method"] in _WITH_BODY:
                try:
                    body = await self._body(self._counted(receive))
                except HTTPException as exc:  # a chunked body past the limit
                    error = error_body(
                        str(exc.detail), "invalid_request_error", "request_too_large"
                    )
                    await _respond(send_with_id, exc.status_code, error)
                    return
                problem = _unicode_problem(body)
                if problem is not None:
                    await _respond(send_with_id, 400, error_body(*problem))
                    return
                await self.app(scope, _replay(body, receive), send_with_id)
            else:
                await self.app(scope, self._counted(receive), send_with_id)
        finally:
            log.info(
                "http.request",
                method=scope["method"],
                path=scope["path"],
                status=status,
                **answered,
            )
            structlog.contextvars.clear_contextvars()

    @staticmethod
    async def _body(receive: Receive) -> bytes:
        """The whole request body (routes read it whole anyway: JSON)."""
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

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
        body = error_body(self._message(length), "invalid_request_error", "request_too_large")
        await _respond(send, 413, body)


_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:/+=-]{1,128}$")
_IDS_IN_PATH = re.compile(
    r"^/v1/threads/(?P<thread_id>[A-Za-z0-9][A-Za-z0-9._:-]{0,127})"
    r"(?:/runs/(?P<run_id>[0-9a-f-]{36}))?"
)
_ID_HEADERS = ((b"x-thread-id", "thread_id"), (b"x-run-id", "run_id"))
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _unicode_problem(body: bytes) -> tuple[str, str, str, str | None] | None:
    """The error for a JSON body that spells a lone UTF-16 surrogate (``"\\ud800"``), which
    decodes to text that is not valid Unicode: every surface refuses it the same way, before
    anything is stored. A valid pair (an emoji written as two escapes) is fine."""
    if not _SURROGATE_ESCAPE.search(body):
        return None
    try:
        value = json.loads(body)
        where = bad_text(value)
    except (ValueError, RecursionError):
        return None  # not JSON, or nested too deeply: the route says so
    if where is None:
        return None
    name = where or "the body"
    return f"{name} {NOT_UNICODE}.", "invalid_request_error", "invalid_text", where or None


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body read already, then the client's own
    messages (its disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _respond(send: Send, status: int, body: dict[str, object]) -> None:
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})
