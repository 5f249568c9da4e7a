"""Checking answers against the service's OpenAPI document: the operation a request reaches,
JSON bodies and Server-Sent Events against the documented schemas (``$ref``s resolved from
the document's components)."""

from __future__ import annotations

import json
import re
from typing import Any

from httpx import Response
from jsonschema import Draft202012Validator

Document = dict[str, Any]


def operation(document: Document, method: str, path: str) -> tuple[str, dict[str, Any]]:
    """The documented path template and operation a request reaches (literal segments beat
    parameters, as in the router)."""
    for template in sorted(document["paths"], key=lambda t: t.count("{")):
        pattern = "^" + re.sub(r"\{[^}/]+\}", "[^/]+", template) + "$"
        if re.match(pattern, path) and method.lower() in document["paths"][template]:
            return template, dict(document["paths"][template][method.lower()])
    raise AssertionError(f"{method} {path} is not in the document")


def closed(schema: Any) -> Any:
    """The schema with every object that lists its properties closed to others, so that an
    answer carrying an undocumented key fails (objects documented as open stay open)."""
    if isinstance(schema, dict):
        out = {key: closed(value) for key, value in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [closed(value) for value in schema]
    return schema


def errors_of(schema: dict[str, Any], value: Any, document: Document) -> list[str]:
    """Why ``value`` breaks ``schema`` (empty if it does not)."""
    validator = Draft202012Validator({**schema, "components": document["components"]})
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(value)
    ]


def sse_events(text: str) -> list[dict[str, str]]:
    """Server-Sent Events as dicts of their fields (``event``, ``data``...)."""
    events = []
    for block in text.strip().split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ")
            fields[name] = f"{fields[name]}\n{value}" if name in fields else value
        events.append(fields)
    return events


def event_errors(
    item_schema: dict[str, Any], event: dict[str, str], document: Document
) -> list[str]:
    """Why an event breaks the documented ``itemSchema``: its fields, then its data, as JSON,
    against the ``contentSchema`` of the variant its ``event`` name selects (or a ``const``)."""
    problems = errors_of(item_schema, event, document)
    variants = [
        v
        for v in item_schema.get("oneOf", [item_schema])
        if v["properties"].get("event", {}).get("const") in (None, event.get("event"))
    ]
    if problems or not variants:
        return problems or [f"no event named {event.get('event')!r} is documented"]
    data = [v["properties"]["data"] for v in variants]
    options = [o for d in data for o in d.get("anyOf", [d])]
    if any(o.get("const") == event["data"] for o in options):
        return []
    payload = json.loads(event["data"])
    found = [
        errors_of(o["contentSchema"], payload, document) for o in options if "contentSchema" in o
    ]
    return [] if any(not f for f in found) else [f"{event}: {found}"]


def check_documented(document: Document, method: str, path: str, response: Response) -> None:
    """The answer's status, content type and headers are documented for its operation, and
    its body validates against the documented schema, closed (no undocumented keys)."""
    _, documented_operation = operation(document, method, path)
    responses = documented_operation["responses"]
    status = str(response.status_code)
    assert status in responses, (
        f"{method} {path} answered {status}; documented: {sorted(responses)}"
    )
    documented = responses[status]
    for header in documented.get("headers", {}):
        assert header in response.headers, f"{header} is documented for {status} but not sent"
    content = documented.get("content", {})
    if response.status_code == 204:  # no content: nothing to validate
        assert not content, f"{method} {path} 204 documents a body"
        assert not response.content
        return
    media = response.headers["content-type"].split(";")[0]
    if "*/*" in content:  # a file served as it is: any type, a body of bytes
        assert response.content
        return
    if media == "text/plain":  # text of its own format (Prometheus): documented as a string
        assert media in content
        assert response.text
        return
    assert media in content, f"{method} {path} {status} sent {media}; documented: {list(content)}"
    strict = closed(document)
    if media == "text/event-stream":
        item_schema = closed(content[media]["itemSchema"])
        events = sse_events(response.text)
        assert events, "an empty stream"
        assert [p for e in events for p in event_errors(item_schema, e, strict)] == []
    else:
        problems = errors_of(closed(content[media]["schema"]), response.json(), strict)
        assert problems == [], response.text
