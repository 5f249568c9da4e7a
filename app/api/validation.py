"""A request's validation errors in words a client can act on: one per field.

Pydantic reports a value that fits no member of a union (``str | list[ContentPart]``) once
per member, each under a label of the member's type (``content.str``,
``content.list[ContentPart]``, ``function-after[check(), str]``): those are folded here into
one error on the field itself, saying what it must be and what was sent. A value whose type
fits a member but whose content does not (a string too long, a list with a bad item) keeps
that member's own errors, with the labels taken out of their paths. A wrong type outside a
union says the same ("must be a string, not a number"); every other error keeps pydantic's
words (or a validator's own, without "Value error, "). And a JSON route's body sent without
its Content-Type is told to send one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import Request

Loc = tuple[str | int, ...]

# Pydantic's labels of union members: scalar types, generic and validator schemas
# (``list[...]``, ``function-after[...]``, ``literal[...]``, ``tagged-union[...]``), and
# classes by name (models, typed dicts). A segment counts as a label only where two or more
# errors carry different ones at the same place (see ``_unions``): a union's members.
_SCALARS = {
    "str": "a string",
    "constrained-str": "a string",
    "int": "an integer",
    "constrained-int": "an integer",
    "float": "a number",
    "constrained-float": "a number",
    "bool": "true or false",
    "none": "null",
}
_GENERIC = re.compile(r"(?P<kind>[a-z][a-z-]*)\[(?P<inner>.*)\]", re.DOTALL)
_CLASS = re.compile(r"[A-Z][A-Za-z0-9]*")
# What an error of a wrong type says the value must be, when no label says it.
_BY_TYPE = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "none_required": "null",
}
# A member the value's type did not fit at all (rather than one whose content was wrong).
_MISFITS = ("none_required", "literal_error", "is_instance_of", "enum")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a request: the field (dotted) and what to say of it."""

    param: str | None  # None: the body as a whole
    text: str  # the sentence, naming the field
    type: str  # pydantic's error type (``string_too_long``...)


def problems(errors: Sequence[Mapping[str, Any]]) -> list[Problem]:
    """``RequestValidationError.errors()`` as problems, one per field, in their order."""
    located: list[tuple[Loc, Mapping[str, Any]]] = [
        (tuple(p for p in err.get("loc", ()) if p != "body"), err) for err in errors
    ]
    found: dict[tuple[str | None, str], Problem] = {}
    for problem in _fold(located):
        found.setdefault((problem.param, problem.text), problem)
    return list(found.values())


def not_sent_as_json(request: Request, errors: Sequence[Any]) -> str | None:
    """Why a JSON route's body was not read, when it came without ``Content-Type:
    application/json`` (``curl -d`` sends it as a form): FastAPI then hands the model the
    raw text, and pydantic says "Input should be a valid dictionary"."""
    whole = [err for err in errors if tuple(err.get("loc", ())) == ("body",)]
    if not whole or not isinstance(whole[0].get("input"), str | bytes):
        return None
    sent = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if sent == "application/json" or sent.endswith("+json"):
        return None
    how = f"as {sent!r}" if sent else "without a Content-Type"
    return (
        f"The request body was sent {how}; send it as JSON with the header "
        "`Content-Type: application/json` (curl: -H 'Content-Type: application/json')."
    )


def _fold(located: list[tuple[Loc, Mapping[str, Any]]]) -> list[Problem]:
    """Problems of ``located`` errors, each union's members' errors folded into one."""
    unions = _unions(located)
    # In the order of their first errors: a plain error by itself, a union's by its field.
    groups: dict[Loc | int, list[tuple[Loc, Mapping[str, Any]]]] = {}
    for i, (loc, err) in enumerate(located):
        at = unions.get(loc)
        groups.setdefault(i if at is None else loc[:at], []).append((loc, err))
    out: list[Problem] = []
    for key, members in groups.items():
        if isinstance(key, int):
            out.append(_plain(*members[0]))
            continue
        at = len(key)
        fitted = [(m[:at] + m[at + 1 :], e) for m, e in members if not _misfit(m, at, e)]
        if fitted:  # the value's type fits a member: what is wrong inside it
            out.extend(_fold(fitted))
        else:
            out.append(_misfit_all(key, members))
    return out


def _unions(located: list[tuple[Loc, Mapping[str, Any]]]) -> dict[Loc, int]:
    """For each error under a union, where in its path the member's label is: the first
    segment that looks like one, where errors under one path carry two or more labels."""
    candidates: dict[Loc, int] = {}
    labels: dict[Loc, set[str]] = {}
    for loc, _ in located:
        at = next((i for i, part in enumerate(loc) if _label(part)), None)
        if at is not None:
            candidates[loc] = at
            labels.setdefault(loc[:at], set()).add(str(loc[at]))
    return {loc: at for loc, at in candidates.items() if len(labels[loc[:at]]) > 1}


def _label(part: str | int) -> bool:
    return isinstance(part, str) and bool(
        part in _SCALARS or _GENERIC.fullmatch(part) or _CLASS.fullmatch(part)
    )


def _misfit(loc: Loc, at: int, err: Mapping[str, Any]) -> bool:
    """Whether the error says the value is not of the member's type at all."""
    kind = str(err.get("type"))
    at_root = len(loc) == at + 1
    return at_root and (kind.endswith(("_type", "_parsing")) or kind in _MISFITS)


def _misfit_all(field: Loc, members: list[tuple[Loc, Mapping[str, Any]]]) -> Problem:
    """One problem for a value that fits none of a union's members."""
    at = len(field)
    wanted = list(dict.fromkeys(_wanted(str(m[at]), e) for m, e in members))
    either = ", ".join(wanted[:-1]) + f" or {wanted[-1]}" if len(wanted) > 1 else wanted[0]
    name = _dotted(field)
    given = _given(members[0][1].get("input"))
    return Problem(name, f"{name or 'the body'} must be {either}, not {given}", "union_mismatch")


def _plain(loc: Loc, err: Mapping[str, Any]) -> Problem:
    name, kind = _dotted(loc), str(err.get("type"))
    wanted = _BY_TYPE.get(kind) if kind.endswith("_type") else None
    if wanted is not None:
        text = f"{name or 'the body'} must be {wanted}, not {_given(err.get('input'))}"
        return Problem(name, text, kind)
    message = str(err.get("msg")).removeprefix("Value error, ")  # a validator's own words
    return Problem(name, f"{name or 'body'}: {message}", kind)


def _wanted(label: str, err: Mapping[str, Any]) -> str:
    """What a union member's label says the value may be, in words."""
    if label in _SCALARS:
        return _SCALARS[label]
    generic = _GENERIC.fullmatch(label)
    if generic is not None:
        kind, inner = generic["kind"], generic["inner"]
        if kind in ("list", "tuple", "set", "frozenset"):
            items = _plural(inner)
            return f"a list of {items}" if items else "a list"
        if kind == "dict":
            return "an object"
        if kind == "literal":
            return f"one of {inner.replace(',', ', ')}"
        if kind.startswith("function-") and ", " in inner:  # the validated type follows
            return _wanted(inner.split(", ", 1)[1], err)
    elif _CLASS.fullmatch(label):
        words = _words(label)
        return f"{'an' if words[0] in 'aeiou' else 'a'} {words}"
    fallback = _BY_TYPE.get(str(err.get("type")))
    return fallback or str(err.get("msg")).removeprefix("Input should be ")


def _plural(label: str) -> str | None:
    """A list's items, when their label names them: ``ContentPart`` is content parts."""
    if _CLASS.fullmatch(label):
        return _words(label) + "s"
    return {"str": "strings", "int": "integers", "float": "numbers"}.get(label) or (
        "objects" if label.startswith("dict[") else None
    )


def _words(name: str) -> str:
    """A class's name as words: ``ContentPart`` is "content part"."""
    return re.sub(r"(?<!^)(?=[A-Z])", " ", name).lower()


def _given(value: Any) -> str:
    """What was sent, by its kind only (never its value: it may be long, or a secret)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str | bytes):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    return "an object"


def _dotted(loc: Loc) -> str | None:
    return ".".join(str(p) for p in loc) or None
