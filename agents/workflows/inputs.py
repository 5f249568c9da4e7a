"""A run's inputs: checked against the workflow's declaration, converted to their types."""

from __future__ import annotations

import math
import re
from typing import Any

from agents.errors import BadInputs
from agents.workflows.spec import InputSpec, WorkflowSpec


def check_inputs(spec: WorkflowSpec, given: dict[str, Any]) -> dict[str, Any]:
    """The run's inputs: given values checked and converted, defaults filled in.

    Raises:
        BadInputs: naming each input that is missing, unknown or of the wrong type.
    """
    problems: dict[str, str] = {}  # each input's path (its ``param``) → what is wrong
    values: dict[str, Any] = {}
    for name in given:
        if name not in spec.inputs:
            problems[f"inputs.{name}"] = (
                f"{name!r} is not an input of {spec.name} ({sorted(spec.inputs)})"
            )
    converted, refused = convert_all(spec, given)
    for name, declared in spec.inputs.items():
        if name in refused:
            problems[f"inputs.{name}"] = f"inputs.{name} {refused[name]}"
        elif name in converted:
            values[name] = converted[name]
        elif declared.default is not None:
            values[name] = declared.default
        elif declared.required:
            problems[f"inputs.{name}"] = missing(name, declared)
    if problems:
        said = "; ".join(problems.values())
        raise BadInputs(f"workflow {spec.name!r} cannot start: {said}", param=next(iter(problems)))
    return values


def missing(name: str, declared: InputSpec) -> str:
    """That input ``name`` is missing, with what it takes: ``input 'order_id' is required (a
    string: The order to refund)``."""
    what = _ARTICLE[declared.type] + (f": {declared.description}" if declared.description else "")
    return f"input {name!r} is required ({what})"


def convert_all(spec: WorkflowSpec, given: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The declared inputs given (not None) as their types, and those that cannot be, each
    with why ("must be <type>, not <what was given>")."""
    converted: dict[str, Any] = {}
    refused: dict[str, str] = {}
    for name, declared in spec.inputs.items():
        if given.get(name) is None:
            continue
        try:
            converted[name] = convert(declared, given[name])
        except ValueError as exc:
            refused[name] = str(exc)
    return converted, refused


def convert(declared: InputSpec, value: Any) -> Any:
    """``value`` as the input's type.

    Text is read as the type, as a chat message gives every value as text ("42" → 42,
    "1,200.5" → 1200.5, "yes" → True); a number is taken as a string's text. Nothing else
    changes type: an array or an object is no string, a boolean no number, and NaN or an
    infinity no number at all.

    Raises:
        ValueError: "must be <type>, not <what was given>" (the caller names the input).
    """
    kind = declared.type
    if isinstance(value, list | dict) or (kind != "boolean" and isinstance(value, bool)):
        raise ValueError(f"must be {_ARTICLE[kind]}, not {_kind_of(value)}")
    if kind == "string":
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"must be a string, not {value}")
        out: Any = value if isinstance(value, str) else str(value)
    elif kind == "boolean":
        out = _boolean(value)
    else:
        out = _number(value, whole=kind == "integer")
    if declared.enum is not None and out not in declared.enum:
        raise ValueError(f"must be one of {list(declared.enum)}, not {out!r}")
    return out


_ARTICLE = {
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "a boolean",
}
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def _kind_of(value: Any) -> str:
    """What a value is, in JSON's words."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "a number" if isinstance(value, int | float) else repr(value)


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
    raise ValueError(f"must be a boolean (true or false), not {_kind_of(value)}")


_GROUPED = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?")


def _number(value: Any, *, whole: bool) -> int | float:
    """A finite number (an integer when ``whole``) from a number or its text."""
    wanted = "an integer" if whole else "a number"
    number: int | float
    if isinstance(value, int | float):
        number = value
    elif isinstance(value, str):
        text = value.strip()
        if _GROUPED.fullmatch(text):  # 1,250 or 12,345.5: commas group thousands
            text = text.replace(",", "")
        elif "," in text or "_" in text:  # 1,5 is a decimal comma or a list: 15 would be wrong
            raise ValueError(
                f"must be {wanted} written with digits and a decimal point (commas only "
                f"between groups of three digits), not {value!r}"
            )
        try:
            number = int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                raise ValueError(f"must be {wanted}, not {value!r}") from None
    else:
        raise ValueError(f"must be {wanted}, not {_kind_of(value)}")
    if isinstance(number, float):
        if not math.isfinite(number):
            raise ValueError(f"must be a finite number, not {value!r}")
        if number.is_integer():
            number = int(number)
        elif whole:
            raise ValueError(f"must be a whole number, not {value!r}")
    if isinstance(number, int) and not -_INT64 <= number < _INT64:  # what state can store
        if whole:
            raise ValueError(f"must be an integer within 64 bits (±{_INT64 - 1:,}), not {number}")
        try:
            number = float(number)
        except OverflowError:
            raise ValueError(f"must be a finite number, not {number}") from None
    return number


_INT64 = 2**63
