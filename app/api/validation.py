"""A request's validation errors in words a client can act on: one per field.

Pydantic reports a value that fits no member of a union (``str | list[ContentPart]``) once
per member, each under a label of the member's type (``content.str``,
``content.list[ContentPart]``, ``function-after[check(), str]``): those are folded here into
one error on the field itself, saying what it must be and what was sent. A value whose type
fits a member but whose content does not (a string too long, a list with a bad item) keeps
that member's own errors, with the labels taken out of their paths. A wrong type outside a
union says the same ("must be a string, not a number"); every other error keeps pydantic's
words (or a validator's own, without "Value error, "), but for a pattern described in words
(``app.api.patterns``). A parameter is named as the client sends it (``limit``, not pydantic's
``query.limit``), saying where it goes ("limit (query parameter)"). A JSON route's body sent
without its Content-Type is told to send one; a body that is not JSON, where it breaks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from app.api.patterns import in_words

Loc = tuple[str | int, ...]

# Where a parameter goes, by the first segment of its errors' ``loc`` (the body's is left out).
_SOURCES = {
    "query": "query parameter",
    "path": "path parameter",
    "header": "header",
    "cookie": "cookie",
}
_UNSEEN: Any = object()  # the value sent at a place, when it is not known
_BEFORE, _AFTER = 24, 12  # characters of a body that is not JSON quoted around its fault

# Pydantic's labels of union members: scalar types, generic and validator schemas
# (``list[...]``, ``function-after[...]``, ``literal[...]``, ``tagged-union[...]``), and
# classes by name (models, typed dicts). A segment of that form is a label only where it is
# no key of the value sent there (a dict's ``Accept``, a typed dict's ``Name``) and two or
# more errors carry different ones at the same place (see ``_unions``): a union's members.
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
# What a text that does not read as a value must be (a query parameter is always a text).
_BY_PARSING = {
    "int_parsing": "an integer",
    "float_parsing": "a number",
    "bool_parsing": "true or false",
}
# A member the value's type did not fit at all (rather than one whose content was wrong).
_MISFITS = ("none_required", "literal_error", "is_instance_of", "enum")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a request: the field (dotted) and what to say of it."""

    param: str | None  # None: the body as a whole
    text: str  # the sentence, naming the field
    type: str  # pydantic's error type (``string_too_long``...)


@dataclass(frozen=True)
class _Where:
    """Where a request's errors are: a kind of parameter, or the body and what was sent."""

    kind: str | None = None  # "query parameter"...; None: the body
    sent: Any = _UNSEEN  # the body as parsed, to tell its keys from union labels


def problems(errors: Sequence[Mapping[str, Any]], body: Any = _UNSEEN) -> list[Problem]:
    """``RequestValidationError.errors()`` as problems, one per field, in their order.

    ``body``: the request's body as parsed (``RequestValidationError.body``).
    """
    by_source: dict[str, list[tuple[Loc, Mapping[str, Any]]]] = {}
    for err in errors:
        loc = tuple(err.get("loc", ()))
        source = str(loc[0]) if loc and loc[0] in (*_SOURCES, "body") else "body"
        by_source.setdefault(source, []).append((loc[1:] if loc[:1] == (source,) else loc, err))
    found: dict[tuple[str | None, str], Problem] = {}
    for source, located in by_source.items():
        where = _Where(_SOURCES.get(source), body if source == "body" else _UNSEEN)
        for problem in _fold(located, where):
            found.setdefault((problem.param, problem.text), problem)
    return list(found.values())


def not_json(detail: Mapping[str, Any], text: Any) -> str:
    """Why a body is not JSON (FastAPI's ``json_invalid`` error ``detail`` of ``text``, the
    body decoded), and where: line, column, offset, and the text either side."""
    reason = str((detail.get("ctx") or {}).get("error", "")).removesuffix(" at")
    loc = tuple(detail.get("loc", ()))
    at = loc[-1] if loc else None
    if not isinstance(text, str) or not isinstance(at, int) or not 0 <= at <= len(text):
        return f"The request body is not valid JSON{f' ({reason})' if reason else ''}."
    line = text.count("\n", 0, at) + 1
    column = at - text.rfind("\n", 0, at)  # from 1: rfind is -1 on the first line
    before = ("…" if at > _BEFORE else "") + text[max(0, at - _BEFORE) : at]
    after = text[at : at + _AFTER] + ("…" if len(text) > at + _AFTER else "")
    if not after:
        near = f"the body ends after {before!r}"
    else:
        near = f"found {after!r} " + (f"after {before!r}" if before else "at the start")
    return (
        f"The request body is not valid JSON: {reason or 'unreadable'} at line {line}, "
        f"column {column} (character offset {at}): {near}."
    )


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


def _fold(located: list[tuple[Loc, Mapping[str, Any]]], where: _Where) -> list[Problem]:
    """Problems of ``located`` errors, each union's members' errors folded into one."""
    unions = _unions(located, where.sent)
    # In the order of their first errors: a plain error by itself, a union's by its field.
    groups: dict[Loc | int, list[tuple[Loc, Mapping[str, Any]]]] = {}
    for i, (loc, err) in enumerate(located):
        at = unions.get(loc)
        groups.setdefault(i if at is None else loc[:at], []).append((loc, err))
    out: list[Problem] = []
    for key, members in groups.items():
        if isinstance(key, int):
            out.append(_plain(*members[0], where))
            continue
        at = len(key)
        fitted = [(m[:at] + m[at + 1 :], e) for m, e in members if not _misfit(m, at, e)]
        if fitted:  # the value's type fits a member: what is wrong inside it
            out.extend(_fold(fitted, where))
        else:
            out.append(_misfit_all(key, members, where))
    return out


def _unions(located: list[tuple[Loc, Mapping[str, Any]]], sent: Any) -> dict[Loc, int]:
    """For each error under a union, where in its path the member's label is: the first
    segment that is one, where errors under one path carry two or more labels."""
    candidates: dict[Loc, int] = {}
    labels: dict[Loc, set[str]] = {}
    for loc, err in located:
        at = _label_at(loc, err, sent)
        if at is not None:
            candidates[loc] = at
            labels.setdefault(loc[:at], set()).add(str(loc[at]))
    return {loc: at for loc, at in candidates.items() if len(labels[loc[:at]]) > 1}


def _label_at(loc: Loc, err: Mapping[str, Any], sent: Any) -> int | None:
    """The first segment of ``loc`` that may be a union member's label: of a label's form,
    not the field a ``missing`` error names, and no key of the value ``sent`` there (unless
    the error is about that whole value, as a member's is: ``{"ContentPart": ...}`` handed
    to a member ``ContentPart``)."""
    value = sent
    for i, part in enumerate(loc):
        named = i == len(loc) - 1 and err.get("type") == "missing"
        key = isinstance(value, Mapping) and part in value and err.get("input") is not value
        if _label(part) and not named and not key:
            return i
        value = _child(value, part)
    return None


def _child(value: Any, part: str | int) -> Any:
    """The value at ``part`` of ``value`` as sent, or ``_UNSEEN``."""
    if isinstance(value, Mapping) and part in value:
        return value[part]
    if isinstance(value, list) and isinstance(part, int) and -len(value) <= part < len(value):
        return value[part]
    return _UNSEEN


def _label(part: str | int) -> bool:
    return isinstance(part, str) and bool(
        part in _SCALARS or _GENERIC.fullmatch(part) or _CLASS.fullmatch(part)
    )


def _misfit(loc: Loc, at: int, err: Mapping[str, Any]) -> bool:
    """Whether the error says the value is not of the member's type at all."""
    kind = str(err.get("type"))
    at_root = len(loc) == at + 1
    return at_root and (kind.endswith(("_type", "_parsing")) or kind in _MISFITS)


def _misfit_all(field: Loc, members: list[tuple[Loc, Mapping[str, Any]]], where: _Where) -> Problem:
    """One problem for a value that fits none of a union's members."""
    at = len(field)
    wanted = list(dict.fromkeys(_wanted(str(m[at]), e) for m, e in members))
    either = ", ".join(wanted[:-1]) + f" or {wanted[-1]}" if len(wanted) > 1 else wanted[0]
    given = _given(members[0][1].get("input"))
    text = f"{_shown(field, where, 'the body')} must be {either}, not {given}"
    return Problem(_dotted(field), text, "union_mismatch")


def _plain(loc: Loc, err: Mapping[str, Any], where: _Where) -> Problem:
    name, kind = _dotted(loc), str(err.get("type"))
    wanted = _BY_TYPE.get(kind) if kind.endswith("_type") else None
    if wanted is not None:
        text = f"{_shown(loc, where, 'the body')} must be {wanted}, not {_given(err.get('input'))}"
        return Problem(name, text, kind)
    words = in_words((err.get("ctx") or {}).get("pattern"))
    if kind == "string_pattern_mismatch" and words is not None:
        return Problem(name, f"{_shown(loc, where, 'the body')} {words}", kind)
    if kind in _BY_PARSING:
        return Problem(name, f"{_shown(loc, where, 'the body')} must be {_BY_PARSING[kind]}", kind)
    bound = _bound(kind, err)
    if bound is not None:
        return Problem(name, f"{_shown(loc, where, 'the body')} {bound}", kind)
    message = str(err.get("msg")).removeprefix("Value error, ")  # a validator's own words
    return Problem(name, f"{_shown(loc, where, 'body')}: {message}", kind)


_LENGTHS = {
    "string_too_long": ("at most", "max_length", "character"),
    "string_too_short": ("at least", "min_length", "character"),
    "too_long": ("at most", "max_length", "item"),
    "too_short": ("at least", "min_length", "item"),
}


def _bound(kind: str, err: Mapping[str, Any]) -> str | None:
    """A length out of its bounds in words, with the length sent ("must be at most 100,000
    characters, not 100,001"), or None for another error."""
    if kind not in _LENGTHS:
        return None
    side, key, unit = _LENGTHS[kind]
    limit = (err.get("ctx") or {}).get(key)
    if not isinstance(limit, int):
        return None
    value = err.get("input")
    sent = f", not {len(value):,}" if isinstance(value, str | list | tuple | dict) else ""
    verb = "be" if unit == "character" else "have"
    return f"must {verb} {side} {limit:,} {unit}{'' if limit == 1 else 's'}{sent}"


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


def _shown(loc: Loc, where: _Where, whole: str) -> str:
    """The field as a message names it: dotted, with where a parameter goes; ``whole`` for
    the body as a whole."""
    name = _dotted(loc)
    if name is None:
        return whole
    return f"{name} ({where.kind})" if where.kind else name
