"""A tool call's arguments checked before its handler runs: JSON, an object, valid Unicode,
and what the tool's parameters schema asks (each offending field named)."""

from __future__ import annotations

import json
from typing import Any

from agents.errors import SchemaUnusable
from agents.skills.schemas import VALIDATOR, unusable
from agents.text import NOT_UNICODE, bad_text


def parse_arguments(
    tool: str, schema: dict[str, Any], arguments: dict[str, Any] | str | None
) -> tuple[dict[str, Any], str | None]:
    """The arguments of a call to ``tool`` as a dict, or the problem with them (naming each
    offending field): not JSON, not an object, not text, or against ``schema``.

    Raises:
        SchemaUnusable: ``schema`` itself could not check them (see ``schema_problems``).
    """
    if arguments is None or arguments == "":
        arguments = {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return {}, (
                f"the arguments of {tool} are not valid JSON ({exc.msg} at "
                f"position {exc.pos}); send a JSON object matching its parameters"
            )
    if not isinstance(arguments, dict):
        return {}, f"the arguments of {tool} must be a JSON object"
    where = bad_text(arguments)
    if where is not None:
        return {}, f"invalid arguments for {tool}: {where or 'the arguments'} {NOT_UNICODE}"
    parts = schema_problems(schema, arguments)
    if parts:
        return {}, f"invalid arguments for {tool}: " + "; ".join(parts)
    return dict(arguments), None


def schema_problems(schema: dict[str, Any], value: Any, most: int = 5) -> list[str]:
    """Where ``value`` breaks ``schema``, one ``field: what is wrong`` each (the first
    ``most``); empty when it matches.

    Raises:
        SchemaUnusable: the check itself failed, whatever the validator raised (a pattern
            Python's re does not compile, a $ref to nothing, recursion past Python's limit),
            so that callers answer a tool error with a stable code, never a crash.
    """
    try:
        validator = VALIDATOR(schema, format_checker=VALIDATOR.FORMAT_CHECKER)
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    except Exception as exc:
        raise SchemaUnusable(unusable(exc)) from exc
    parts = []
    for err in errors[:most]:
        where = ".".join(str(p) for p in err.absolute_path)
        message = _said(err)
        if err.context:  # anyOf/oneOf: say what each alternative wanted
            options = sorted({_said(e) for e in err.context})[:4]
            message = "expected one of: " + " | ".join(options)
        elif err.validator == "type" and err.validator_value == "object":
            message = _not_an_object(err.instance) or message
        parts.append(_short(f"{where}: {message}" if where else message))
    return parts


def _said(err: Any) -> str:
    """The validator's message, a broken ``pattern`` quoted as written in the schema (the
    validator quotes it with ``repr``, which doubles each backslash: ``'^\\\\s*'``)."""
    if err.validator == "pattern" and isinstance(err.validator_value, str):
        return f"{err.instance!r} does not match '{err.validator_value}'"
    return str(err.message)


def _not_an_object(value: Any) -> str | None:
    """Why a text sent where an object belongs is none: JSON text of an object is taken
    there (strict-mode callers send free-form objects so), so a text that is no JSON at all
    is told as such, not as "not of type 'object'"."""
    if not isinstance(value, str):
        return None
    try:
        json.loads(value)
    except json.JSONDecodeError as exc:
        return f"is not valid JSON ({exc.msg} at position {exc.pos}); send a JSON object"
    return None


def _short(problem: str, most: int = 400) -> str:
    """``problem`` cut in its middle past ``most`` characters: the validator's message
    quotes the value, which a caller may have made megabytes long, and the message goes back
    to it (or to the model) whole otherwise; its start names the field, its end the rule."""
    if len(problem) <= most:
        return problem
    cut = len(problem) - most
    return f"{problem[: most // 2]}…[{cut:,} characters]…{problem[-most // 2 :]}"
