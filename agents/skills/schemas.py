"""Tool schemas checked at load as the runner will use them: valid JSON Schema 2020-12, every
pattern compiled by Python's ``re`` (what jsonschema matches with, not ECMA-262), every
``$ref`` resolved within the schema, no part that contains itself. What would fail every
call is refused with the place it is at, rather than served."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urljoin

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from jsonschema_specifications import REGISTRY as SPECIFICATIONS  # type: ignore[import-untyped]
from referencing.exceptions import NoSuchAnchor, PointerToNowhere, Unresolvable
from referencing.jsonschema import DRAFT202012

from agents.text import a_or_an

Location = tuple[str | int, ...]  # keys and indexes from the schema's root

# The class the runner checks arguments with (``arguments.schema_problems``).
VALIDATOR = Draft202012Validator


def flat_meta_schema() -> dict[str, Any]:
    """VALIDATOR's meta-schema as one schema: the vocabularies it joins with allOf merged
    (each defines other keywords, and nothing but ``type``, ``properties`` and ``$defs``),
    ``$dynamicRef: "#meta"`` as ``$ref: "#"``. The same verdicts as the original (a test
    holds it to that) in a seventh of the time: jsonschema resolves the vocabularies' $refs
    and the $dynamicRef at every level of every schema, and thousands load at start-up."""
    root = VALIDATOR.META_SCHEMA
    parts = [
        root,
        *(SPECIFICATIONS.contents(urljoin(root["$id"], p["$ref"])) for p in root["allOf"]),
    ]
    merged: dict[str, Any] = {"type": ["object", "boolean"], "properties": {}, "$defs": {}}
    for part in parts:
        for key in ("properties", "$defs"):
            merged[key].update(_local(part.get(key, {})))
    return merged


def _local(node: Any) -> Any:
    """``node`` with each reference made one within the merged meta-schema."""
    if isinstance(node, list):
        return [_local(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _local(v) for k, v in node.items()}
    if isinstance(node.get("$dynamicRef"), str):  # "#meta": any schema, the root
        del out["$dynamicRef"]
        out["$ref"] = "#"
    elif isinstance(node.get("$ref"), str):  # "#/$defs/NAME" or "meta/core#/$defs/NAME"
        out["$ref"] = "#/$defs/" + node["$ref"].rpartition("/$defs/")[2]
    return out


# With the format checks on: "regex" compiles each pattern with ``re``.
META = VALIDATOR(flat_meta_schema(), format_checker=VALIDATOR.FORMAT_CHECKER)
MAX_DEPTH = 64  # nested objects and lists; jsonschema recurses past ~200 into RecursionError
MAX_NODES = 20_000  # YAML aliases can make a small file an enormous tree
MOST = 5  # problems reported for one schema

# Where 2020-12 has subschemas (as ``referencing`` walks them).
_IN_VALUE = (
    "additionalProperties",
    "contains",
    "contentSchema",
    "else",
    "if",
    "items",
    "not",
    "propertyNames",
    "then",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_IN_ARRAY = ("allOf", "anyOf", "oneOf", "prefixItems")
_IN_MAP = ("$defs", "definitions", "dependentSchemas", "patternProperties", "properties")


class SchemaError(ValueError):
    """A schema that values cannot be checked against; ``problems`` holds each problem's
    path within the schema and what is wrong there."""

    def __init__(self, problems: list[tuple[Location, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{dotted(p)}: {m}" if p else m for p, m in problems))


def dotted(path: Location) -> str:
    """A path within a schema as ``properties.b.pattern``, ``allOf[0]``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def check_schema(schema: dict[str, Any]) -> None:
    """Refuse a schema that would fail when values are checked against it.

    Raises:
        SchemaError: each problem with its path: a part that contains itself or nests too
            deep, what the 2020-12 meta-schema refuses (a pattern that does not compile
            included), a ``$ref`` that does not resolve.
    """
    shape = _shape_problem(schema)
    if shape is not None:
        raise SchemaError([shape])
    errors = list(META.iter_errors(schema))
    problems = _meta_problems(errors)
    if all(e.validator == "format" for e in errors):  # the structure holds: follow the $refs
        problems += _reference_problems(schema)
    if problems:
        raise SchemaError(problems[:MOST])


def object_schema(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` when it is a usable JSON Schema of an object (a pydantic field validator's
    body: the ``ValueError`` or ``SchemaError`` raised names the place, and the loader adds
    the field)."""
    if value.get("type") != "object":
        raise ValueError("must be a JSON Schema with type: object")
    check_schema(value)
    return value


def _shape_problem(schema: Any) -> tuple[Location, str] | None:
    """Where the tree is infinite (a YAML alias to a node around it), too deep or too big;
    walked without recursion, as nothing else can walk such a tree."""
    stack: list[tuple[Any, Location, frozenset[int]]] = [(schema, (), frozenset())]
    seen = 0
    while stack:
        node, path, around = stack.pop()
        items: Iterator[tuple[str | int, Any]]
        if isinstance(node, dict):
            items = iter(node.items())
        elif isinstance(node, list):
            items = enumerate(node)
        else:
            continue
        if id(node) in around:
            return path, (
                "contains itself (a YAML alias to a node around it); write the recursion "
                "as a $ref, e.g. {$ref: '#'}"
            )
        if len(around) >= MAX_DEPTH:
            return path, (
                f"nests more than {MAX_DEPTH} levels deep; flatten it, or name the parts in "
                "$defs and refer to them with $ref"
            )
        seen += 1
        if seen > MAX_NODES:
            return (), f"has more than {MAX_NODES:,} parts (YAML aliases repeat what they name)"
        inner = around | {id(node)}
        stack.extend((child, (*path, key), inner) for key, child in items)
    return None


def _meta_problems(errors: list[ValidationError]) -> list[tuple[Location, str]]:
    """The best error at each path the meta-schema refused, in words."""
    by_path: dict[Location, list[ValidationError]] = {}
    for error in errors:
        path: Location = tuple(error.absolute_path)
        if "propertyNames" in error.schema_path:  # a key (of patternProperties): name it
            path = (*path, str(error.instance))
        by_path.setdefault(path, []).append(error)
    problems = []
    for path, group in by_path.items():
        error = best_match(group)
        if error is None:
            continue
        if error.validator == "format" and error.validator_value == "regex":
            why = f" ({error.cause})" if error.cause is not None else ""
            message = (
                f"{error.instance!r} does not compile in Python's re, which the values are "
                f"matched with{why}; fix it (re differs from JSON Schema's ECMA-262 in places: "
                "(?P<name>...), not (?<name>...))"
            )
        else:
            message = f"is not a valid JSON Schema (2020-12): {error.message}"
        problems.append((path, message))
    return problems


def _reference_problems(schema: dict[str, Any]) -> list[tuple[Location, str]]:
    """Each ``$ref`` (and ``$dynamicRef``) that does not lead to a schema, looked up as the
    validator does (against each subschema's base URI), with nothing fetched."""
    root = SPECIFICATIONS.resolver_with_root(DRAFT202012.create_resource(schema))
    problems: list[tuple[Location, str]] = []
    stack: list[tuple[Any, Location, Any]] = [(schema, (), root)]
    while stack:
        node, path, resolver = stack.pop()
        if not isinstance(node, dict):
            continue
        resolver = resolver.in_subresource(DRAFT202012.create_resource(node))
        for keyword in ("$ref", "$dynamicRef"):
            ref = node.get(keyword)
            if isinstance(ref, str):
                why = _unresolved(resolver, ref)
                if why is not None:
                    problems.append(((*path, keyword), why))
        stack.extend((sub, (*path, *where), resolver) for where, sub in _subschemas(node))
    return sorted(problems, key=lambda p: dotted(p[0]))


def _subschemas(node: dict[str, Any]) -> Iterator[tuple[Location, Any]]:
    for keyword in _IN_VALUE:
        if keyword in node:
            yield (keyword,), node[keyword]
    for keyword in _IN_ARRAY:
        if isinstance(node.get(keyword), list):
            yield from (((keyword, i), sub) for i, sub in enumerate(node[keyword]))
    for keyword in _IN_MAP:
        if isinstance(node.get(keyword), dict):
            yield from (((keyword, name), sub) for name, sub in node[keyword].items())


def _unresolved(resolver: Any, ref: str) -> str | None:
    """Why ``ref`` leads to no schema, or None when it does."""
    fix = "refer to a part of this schema, e.g. '#/$defs/NAME'"
    try:
        found = resolver.lookup(ref)
    except PointerToNowhere as exc:
        return f"{ref!r} does not resolve: there is nothing at {exc.ref!r}; {fix}"
    except NoSuchAnchor as exc:
        return f"{ref!r} does not resolve: no $anchor {exc.anchor!r}; {fix}"
    except Unresolvable:
        return (
            f"{ref!r} does not resolve: no such schema here, and references are not fetched "
            f"from elsewhere; {fix} (copy what it names into $defs)"
        )
    if not isinstance(found.contents, dict | bool):
        kind = type(found.contents).__name__
        return f"{ref!r} leads to {a_or_an(kind)}, not a schema; {fix}"
    return None


def unusable(exc: Exception) -> str:
    """What went wrong when a schema could not check a value, in one short line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}{'…' if len(text) > 200 else ''}"
