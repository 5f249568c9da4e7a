"""MCP over streamable HTTP at exactly ``/mcp``, in the service's own app and process.

Two session managers of the SDK serve it: a client that opens a session (``initialize``
without a session id, then requests with its ``Mcp-Session-Id``) gets one that lives, and
hears ``notifications/tools/list_changed`` and ``resources/list_changed`` on its stream when
skills or workflows reload; any other request is served statelessly, on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import pydantic_core
import structlog
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.types import Message, Receive, Scope, Send

from agents.echo import cut, json_type
from agents.toolserver.catalogue import ToolCatalogue
from app.mcp.server import Sessions, build_server

log = structlog.get_logger(__name__)
PATH = "/mcp"
WATCH_EVERY_S = 0.5
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# The versions the SDK serves: by the initialize handshake, or request by request (2026).
SPOKEN = (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)
# How deep a body may nest arrays and objects: as deep as the SDK's parser (pydantic_core's)
# reads. The transport parses with it too, so the two never disagree on a body.
MAX_NESTING = 200
# The service refuses a body over SKILLDESK_MAX_REQUEST_BYTES before any route, /mcp included
# (413 `request_too_large`, app.api.middleware), and the transport reads the body whole before
# the SDK does: the SDK's own limit (4 MiB, answered in plain text) would be a second, lower one.
NO_SDK_BODY_LIMIT = sys.maxsize
# What a POST body parses to when it is not JSON (the SDK answers it), or nests too deeply.
NOT_JSON, TOO_DEEP = object(), object()
EXAMPLE = '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'  # what an Invalid Request shows


class McpEndpoint:
    """The ASGI app at ``/mcp``; it answers 503 until ``serve`` has started it."""

    def __init__(self) -> None:
        self._stateful: StreamableHTTPSessionManager | None = None
        self._stateless: StreamableHTTPSessionManager | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._stateful is None or self._stateless is None:
            await _unavailable(send)
            return
        posted = scope.get("method") == "POST"
        body = await _body(receive) if posted else b""
        message = _parse(body) if posted else NOT_JSON  # parsed once, as the SDK parses it
        version = _unspoken_version(scope, message)
        if version is not None:  # the SDK would ask for the 2026 protocol's _meta envelope
            await _reply(send, 400, version)
            return
        if not posted:
            await self._stateful.handle_request(scope, receive, send)
            return
        if message is TOO_DEEP:  # the SDK would say "recursion limit exceeded", or "Parse error"
            await _reply(send, 400, _too_deep())
            return
        refused = _not_a_message(message)
        if refused is not None:  # the SDK would answer -32602 with pydantic's whole report
            await _reply(send, 400, refused)
            return
        refused = _bad_params(message)
        if refused is not None:  # the SDK would say "Invalid request parameters", no more
            await _reply(send, 200, refused)
            return
        headers = dict(scope.get("headers") or ())
        if b"mcp-session-id" in headers:
            manager = self._stateful
        else:
            manager = self._stateful if _opens_session(message) else self._stateless
        await manager.handle_request(scope, _replay(body, receive), send)

    @contextlib.asynccontextmanager
    async def serve(self, catalogue: ToolCatalogue, host: str) -> AsyncIterator[Sessions]:
        """Serve ``catalogue`` until the context ends; yields the sessions kept. Bound to a
        loopback ``host``, requests must name a loopback host and origin (DNS rebinding)."""
        sessions = Sessions()
        server = build_server(catalogue, sessions)
        security = _loopback_only() if host in LOOPBACK else None
        stateful = StreamableHTTPSessionManager(
            server, security_settings=security, max_request_body_size=NO_SDK_BODY_LIMIT
        )
        stateless = StreamableHTTPSessionManager(
            server,
            stateless=True,
            security_settings=security,
            max_request_body_size=NO_SDK_BODY_LIMIT,
        )
        async with stateful.run(), stateless.run():
            self._stateful, self._stateless = stateful, stateless
            watching = asyncio.create_task(_watch(catalogue, sessions, stateful))
            try:
                yield sessions
            finally:
                self._stateful = self._stateless = None
                sessions.listen.close()
                watching.cancel()
                await asyncio.gather(watching, return_exceptions=True)


async def _watch(
    catalogue: ToolCatalogue, sessions: Sessions, manager: StreamableHTTPSessionManager
) -> None:
    """Tell the open sessions when a reload changed the skills or the workflows."""
    seen = catalogue.version()
    while True:
        await asyncio.sleep(WATCH_EVERY_S)
        # The manager's table of live sessions: the SDK has no public view of it.
        sessions.keep(set(getattr(manager, "_server_instances", {})))
        version = catalogue.version()
        if version != seen:
            seen = version
            told = await sessions.lists_changed()
            log.info("mcp.lists_changed", sessions=told)


def _loopback_only() -> TransportSecuritySettings:
    """What the SDK itself sets for a server on a loopback address."""
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


def _parse(body: bytes) -> Any:
    """A POST body's JSON value, parsed as the SDK parses it: ``TOO_DEEP`` when it nests arrays
    and objects deeper than ``MAX_NESTING`` levels, ``NOT_JSON`` when it is no JSON otherwise.
    (``json.loads`` raised RecursionError for a body nested some 1,000 levels deep.)"""
    try:
        return pydantic_core.from_json(body)
    except ValueError as exc:
        return TOO_DEEP if str(exc).startswith("recursion limit exceeded") else NOT_JSON


def _too_deep() -> dict[str, Any]:
    """The JSON-RPC parse error for a body nested too deeply (no id: none could be read)."""
    message = (
        "Parse error: the request body nests arrays and objects too deeply "
        f"(more than {MAX_NESTING} levels)"
    )
    return {"jsonrpc": "2.0", "id": None, "error": {"code": PARSE_ERROR, "message": message}}


def _opens_session(message: Any) -> bool:
    """Whether a POST body's ``message`` is an ``initialize`` request (alone or in a batch)."""
    messages = message if isinstance(message, list) else [message]
    return any(isinstance(m, dict) and m.get("method") == "initialize" for m in messages)


def _unspoken_version(scope: Scope, message: Any) -> dict[str, Any] | None:
    """The JSON-RPC error for an ``MCP-Protocol-Version`` header naming a version this server
    does not speak (the spec: 400 Bad Request), or None."""
    asked = next((v for k, v in scope.get("headers") or () if k == b"mcp-protocol-version"), None)
    if asked is None:
        return None
    requested = asked.decode("latin-1")
    if requested in SPOKEN:
        return None
    shown = cut(requested)
    error = {
        "code": UNSUPPORTED_PROTOCOL_VERSION,
        "message": f"Unsupported protocol version {shown!r}: this server speaks "
        + ", ".join(SPOKEN),
        "data": {"supported": list(SPOKEN), "requested": shown},
    }
    return {"jsonrpc": "2.0", "id": _request_id(message), "error": error}


def _request_id(message: Any) -> Any:
    """A single request's id, for an error answering it (None when there is none, or it is
    none JSON-RPC allows)."""
    ident = message.get("id") if isinstance(message, dict) else None
    return ident if _is_id(ident) else None


def _is_id(value: Any) -> bool:
    """Whether ``value`` is a request id the SDK takes: a string or an integer."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _not_a_message(message: Any) -> dict[str, Any] | None:
    """JSON-RPC's Invalid Request (-32600) for a body that is JSON but no JSON-RPC 2.0
    message, saying what it lacks or has wrong; None for a message (or a body that is no
    JSON, which the SDK answers)."""
    if message is NOT_JSON:
        return None
    if isinstance(message, list):
        problems = ["the body is an array (a batch): send one message per request"]
    elif not isinstance(message, dict):
        problems = [f"the body is {json_type(message)}, not a JSON object"]
    else:
        problems = _envelope_problems(message)
    if not problems:
        return None
    text = f"Invalid Request: {'; '.join(problems)} (a request is {EXAMPLE})"
    error = {"code": INVALID_REQUEST, "message": text}
    return {"jsonrpc": "2.0", "id": _request_id(message), "error": error}


def _envelope_problems(message: dict[str, Any]) -> list[str]:
    """What keeps ``message`` from being a JSON-RPC 2.0 request, notification or response
    (its params are checked apart)."""
    problems = []
    if "jsonrpc" not in message:
        problems.append('"jsonrpc": "2.0" is missing')
    elif message["jsonrpc"] != "2.0":
        sent = message["jsonrpc"]
        shown = json.dumps(cut(sent)) if isinstance(sent, str) else json_type(sent)
        problems.append(f'"jsonrpc" must be "2.0", not {shown}')
    ident = message.get("id")
    if "method" in message:  # a request, or without an id a notification
        if not isinstance(message["method"], str):
            problems.append(f'"method" must be a string, not {json_type(message["method"])}')
        if ident is not None and not _is_id(ident):
            problems.append(f'"id" must be a string or an integer, not {json_type(ident)}')
    elif "result" in message:  # a response to a request of the server's
        if not _is_id(ident):
            problems.append(f'"id" must be a string or an integer, not {json_type(ident)}')
        if not isinstance(message["result"], dict):
            problems.append(f'"result" must be an object, not {json_type(message["result"])}')
    elif "error" in message:
        error = message["error"]
        if ident is not None and not _is_id(ident):
            problems.append(f'"id" must be a string, an integer or null, not {json_type(ident)}')
        code = error.get("code") if isinstance(error, dict) else None
        integer = isinstance(code, int) and not isinstance(code, bool)
        if not (integer and isinstance(error.get("message"), str)):
            problems.append('"error" must be an object with an integer "code" and a "message"')
    else:
        problems.append('"method" is missing')
    return problems


def _bad_params(message: Any) -> dict[str, Any] | None:
    """A JSON-RPC error naming what is wrong in a message's params: not an object, or in a
    ``tools/call`` request the tool's name or its arguments; None when nothing is (or the
    body is no JSON, which the SDK answers)."""
    if not isinstance(message, dict):
        return None
    params = message.get("params")
    if message.get("method") != "tools/call":
        if params is None or isinstance(params, dict):
            return None
        param, problem = "params", f"must be an object, not {json_type(params)}"
    elif not isinstance(params, dict):
        param, problem = (
            "params",
            f"must be an object with the tool's name and arguments, not {_kind(params)}",
        )
    elif not isinstance(params.get("name"), str):
        param, problem = (
            "params.name",
            f"must be the tool's name (a string), not {_kind(params.get('name'))}",
        )
    elif params.get("arguments") is not None and not isinstance(params["arguments"], dict):
        param = "params.arguments"
        problem = (
            f"must be a JSON object (the tool's arguments by name), not "
            f"{_kind(params['arguments'])} (tools/list gives each tool's inputSchema)"
        )
    else:
        return None
    error = {
        "code": INVALID_PARAMS,
        "message": f"Invalid params: {param} {problem}",
        "data": {"param": param},
    }
    return {"jsonrpc": "2.0", "id": _request_id(message), "error": error}


def _kind(value: Any) -> str:
    """How a member's JSON value is named in an error (``missing`` when it is absent)."""
    return "missing" if value is None else json_type(value)


async def _reply(send: Send, status: int, message: dict[str, Any]) -> None:
    body = json.dumps(message).encode()
    headers: list[Any] = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the body read already, then what the client sends."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _unavailable(send: Send) -> None:
    error = {"code": -32603, "message": "starting up"}
    await _reply(send, 503, {"jsonrpc": "2.0", "id": None, "error": error})
