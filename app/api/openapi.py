"""The OpenAPI document as the service behaves: malformed requests are 400 (FastAPI's 422
never leaves the service), and streaming routes document their Server-Sent Events with the
schema of each event's data."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from app.api.errors import ERROR_STATUSES, REDIS_LOST_DOC, ErrorResponse

REF = "#/components/schemas/"
_CHALLENGE = {
    "WWW-Authenticate": {
        "description": "The Bearer challenge (RFC 6750), naming the resource metadata "
        "(RFC 9728) on a 401 and the scope needed on a 403.",
        "schema": {"type": "string"},
    }
}
_GATE_HEADERS: dict[str, dict[str, Any]] = {
    "401": _CHALLENGE,
    "403": _CHALLENGE,
    "429": {
        "Retry-After": {
            "description": "Seconds until the key may call again.",
            "schema": {"type": "integer"},
        }
    },
}
# Models that only streamed events reference: the document's components get their schemas.
_STREAMED: dict[str, type[BaseModel]] = {}


def json_data(model: type[BaseModel]) -> dict[str, Any]:
    """An SSE ``data:`` field that holds ``model`` as JSON."""
    _STREAMED[model.__name__] = model
    return {
        "type": "string",
        "contentMediaType": "application/json",
        "contentSchema": {"$ref": REF + model.__name__},
    }


def named_events(events: Mapping[str, type[BaseModel]], description: str) -> dict[str, Any]:
    """A ``text/event-stream`` media type whose events are ``event: <name>`` and
    ``data: <JSON>``, the data's schema chosen by the name (OpenAPI 3.2's ``itemSchema``)."""
    return {
        "schema": {"type": "string", "description": description},
        "itemSchema": {
            "oneOf": [
                {
                    "type": "object",
                    "required": ["event", "data"],
                    "properties": {
                        "id": {"type": "string", "description": "The sequence number."},
                        "retry": {
                            "type": "string",
                            "description": "Milliseconds to wait before reconnecting.",
                        },
                        "event": {"const": name},
                        "data": json_data(model),
                    },
                }
                for name, model in events.items()
            ]
        },
    }


def data_events(
    models: Sequence[type[BaseModel]], *, last: str, description: str
) -> dict[str, Any]:
    """A ``text/event-stream`` media type of ``data:``-only events, each the JSON of one of
    ``models``, the last one ``data: <last>``."""
    return {
        "schema": {"type": "string", "description": description},
        "itemSchema": {
            "type": "object",
            "required": ["data"],
            "properties": {"data": {"anyOf": [*(json_data(m) for m in models), {"const": last}]}},
        },
    }


def operation_id(route: APIRoute) -> str:
    """Operation ids generated clients name their methods after: ``<tag>-<function>``
    (``chat-chat_completions``), as the full-stack FastAPI template makes them."""
    return f"{route.tags[0]}-{route.name}" if route.tags else route.name


def install_openapi(app: FastAPI, scopes_of: Callable[[Any], set[str]]) -> None:
    """Serve ``as_served`` of FastAPI's document (built once, on first request);
    ``scopes_of``: the scopes a route needs (a 403 is documented where there are some)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            scoped = {
                (str(route.path_format), method.lower()): scopes_of(route)
                for route in iter_route_contexts(app.routes)
                for method in route.methods or ()
            }
            app.openapi_schema = as_served(generate(), scoped)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def as_served(
    document: dict[str, Any], scoped: Mapping[tuple[str, str], set[str]] | None = None
) -> dict[str, Any]:
    """FastAPI's document, corrected: no 422 (the error handlers answer 400), a 400 on every
    operation with a body (it may be malformed JSON), 401, 429 and 503 (Redis lost: the
    gate's rate limit is counted there) on every operation behind the gate and 403 on those
    that need a scope (``scoped``), and the streamed models' schemas."""
    scoped = scoped or {}
    for path, path_item in document.get("paths", {}).items():
        for method, operation in path_item.items():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            if operation.get("security"):  # every door has the same lock
                needed = sorted(scoped.get((path, method), set()))
                statuses = {"401": ERROR_STATUSES[401], "429": ERROR_STATUSES[429]}
                if needed:
                    statuses["403"] = (
                        f"The key lacks the `{'`, `'.join(needed)}` scope (`insufficient_scope`)."
                    )
                for status, description in statuses.items():
                    responses.setdefault(
                        status,
                        {
                            "description": description,
                            "headers": _GATE_HEADERS[status],
                            "content": {
                                "application/json": {"schema": {"$ref": REF + "ErrorResponse"}}
                            },
                        },
                    )
                _add_redis_lost(responses)
            if "requestBody" in operation and "400" not in responses:
                responses["400"] = {
                    "description": ERROR_STATUSES[400],
                    "content": {"application/json": {"schema": {"$ref": REF + "ErrorResponse"}}},
                }
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    models: list[type[BaseModel]] = [ErrorResponse, *_STREAMED.values()]
    _, streamed = models_json_schema(
        [(m, "serialization") for m in models], ref_template=REF + "{model}"
    )
    for name, schema in _without_none(streamed.get("$defs", {})).items():
        if schemas.setdefault(name, schema) != schema:
            raise RuntimeError(f"two different schemas are named {name!r} in the document")
    for unused in ("HTTPValidationError", "ValidationError"):  # in this order
        if unused in schemas and REF + unused not in json.dumps(document):
            del schemas[unused]
    return document


def _add_redis_lost(responses: dict[str, Any]) -> None:
    """The gate's 503 (Redis lost), beside what the operation's own 503 says, if it has one."""
    own = responses.get("503")
    if own is None:
        responses["503"] = {
            "description": REDIS_LOST_DOC,
            "content": {"application/json": {"schema": {"$ref": REF + "ErrorResponse"}}},
        }
    elif REDIS_LOST_DOC not in own["description"]:
        own["description"] = f"{own['description']} {REDIS_LOST_DOC}"


def _without_none(value: Any) -> Any:
    """What FastAPI's document keeps of a schema: no null values (``"default": null``...)."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value
