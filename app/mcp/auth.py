"""The gate in front of ``/mcp``: a Bearer key with the ``tools`` scope, or a 401 whose
``WWW-Authenticate`` challenge names the resource metadata (the MCP authorization spec)."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import ApiError
from app.auth.guard import Gate, metadata_url, no_scope
from app.mcp.server import CALLER_STATE, KEY_OWNER_STATE, SINK_STATE


class McpGate:
    """Authenticates every MCP request before the endpoint sees it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gate: Gate = scope["app"].state.gate
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            principal = await gate.authenticate(
                headers.get("authorization"), headers.get("x-on-behalf-of")
            )
            if not principal.can("tools"):
                raise no_scope(principal, "tools")
        except ApiError as error:  # a 401's challenge names this resource's metadata
            public_url = scope["app"].state.services.settings.public_url
            here = metadata_url(public_url, scope.get("scheme", "http"), headers.get("host"))
            error = Gate.located(error, here)
            await _respond(send, error.status, error.body(), dict(error.headers or {}))
            return
        state = scope.setdefault("state", {})
        state[CALLER_STATE] = None if principal.sees_all else principal.user
        state[KEY_OWNER_STATE] = principal.user
        state[SINK_STATE] = gate.usage_sink(principal)  # what its workflow runs cost counts
        await self.app(scope, receive, send)


async def _respond(
    send: Send, status: int, body: dict[str, object], headers: dict[str, str]
) -> None:
    data = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})
