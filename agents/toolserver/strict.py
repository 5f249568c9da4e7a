"""JSON Schemas for OpenAI's strict mode, and arguments sent against them made ordinary again.

Strict mode demands ``additionalProperties: false`` and every property required on each
object, and accepts a subset of keywords. An optional property becomes required and nullable
(the caller sends null for "not given"); an object without declared properties (free-form)
cannot be strict, so it becomes a string holding the object as JSON. ``loosen`` undoes both
on the way in, so the declared schema still validates every call.
"""

from __future__ import annotations

import copy
import json
from typing import Any

# Keywords strict mode accepts (OpenAI's structured outputs); the rest are dropped from the
# strict variant only: the declared schema still checks the arguments.
_KEPT = frozenset(
    {
        "type",
        "description",
        "title",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "$ref",
        "$defs",
        "definitions",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    }
)
_JSON_TEXT = " (a JSON object, as text)"


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The strict-mode variant of an object schema (the root stays an object)."""
    return _strict(copy.deepcopy(schema), root=True)


def _free_form(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "object" and not schema.get("properties")


def _strict(schema: dict[str, Any], root: bool = False) -> dict[str, Any]:
    if _free_form(schema) and not root:
        return {"type": "string", "description": schema.get("description", "") + _JSON_TEXT}
    if "oneOf" in schema and "anyOf" not in schema:
        schema["anyOf"] = schema.pop("oneOf")
    out = {k: v for k, v in schema.items() if k in _KEPT}
    if out.get("type") == "object" or "properties" in out:
        properties = out.get("properties") or {}
        required = set(out.get("required") or ())
        out["properties"] = {
            name: _strict(sub) if name in required else _nullable(_strict(sub))
            for name, sub in properties.items()
        }
        out["required"] = list(properties)
        out["additionalProperties"] = False
    if isinstance(out.get("items"), dict):
        out["items"] = _strict(out["items"])
    if "anyOf" in out:
        out["anyOf"] = [_strict(s) for s in out["anyOf"] if isinstance(s, dict)]
    for key in ("$defs", "definitions"):
        if isinstance(out.get(key), dict):
            out[key] = {name: _strict(sub) for name, sub in out[key].items()}
    return out


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type")
    if isinstance(kind, str):
        if kind != "null":
            schema["type"] = [kind, "null"]
            if "enum" in schema:
                schema["enum"] = [*schema["enum"], None]
        return schema
    if isinstance(kind, list):
        if "null" not in kind:
            schema["type"] = [*kind, "null"]
        return schema
    if "anyOf" in schema:
        schema["anyOf"] = [*schema["anyOf"], {"type": "null"}]
        return schema
    description = schema.pop("description", None)
    wrapped: dict[str, Any] = {"anyOf": [schema, {"type": "null"}]}
    if description:
        wrapped["description"] = description
    return wrapped


def loosen(schema: dict[str, Any], arguments: Any) -> Any:
    """``arguments`` as the declared ``schema`` takes them: a null for a property that is not
    required is left out, and a JSON text where a free-form object is declared is parsed (a
    text that is no JSON object is left for validation to report)."""
    if not isinstance(arguments, dict) or not isinstance(schema, dict):
        return arguments
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    out: dict[str, Any] = {}
    for name, value in arguments.items():
        sub = properties.get(name)
        if not isinstance(sub, dict):
            out[name] = value
            continue
        if value is None and name not in required and not _accepts_null(sub):
            continue
        if isinstance(value, str) and _free_form(sub):
            try:
                parsed = json.loads(value)
            except ValueError:
                parsed = value
            value = parsed if isinstance(parsed, dict) else value
        out[name] = _loosen_value(sub, value)
    return out


def _loosen_value(schema: dict[str, Any], value: Any) -> Any:
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, dict):
        return [_loosen_value(items, v) for v in value]
    return loosen(schema, value)


def _accepts_null(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(isinstance(s, dict) and _accepts_null(s) for s in schema.get("anyOf", ()))


def strict_problems(schema: Any, where: str = "parameters") -> list[str]:
    """What keeps ``schema`` from being valid in strict mode (empty when it is)."""
    if not isinstance(schema, dict):
        return [f"{where} is not a schema"]
    problems = [f"{where} uses {k!r}" for k in schema if k not in _KEPT]
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        if schema.get("additionalProperties") is not False:
            problems.append(f"{where} lacks additionalProperties: false")
        if sorted(schema.get("required") or ()) != sorted(properties):
            problems.append(f"{where} does not require every property")
        for name, sub in properties.items():
            problems += strict_problems(sub, f"{where}.{name}")
    if isinstance(schema.get("items"), dict):
        problems += strict_problems(schema["items"], f"{where}[]")
    for i, sub in enumerate(schema.get("anyOf", ())):
        problems += strict_problems(sub, f"{where}.anyOf[{i}]")
    return problems
