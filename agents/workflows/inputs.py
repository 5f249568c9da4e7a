"""A run's inputs: checked against the workflow's declaration, converted to their types."""

from __future__ import annotations

from typing import Any

from agents.errors import BadInputs
from agents.workflows.spec import InputSpec, WorkflowSpec


def check_inputs(spec: WorkflowSpec, given: dict[str, Any]) -> dict[str, Any]:
    """The run's inputs: given values checked and converted, defaults filled in.

    Raises:
        BadInputs: naming each input that is missing, unknown or of the wrong type.
    """
    problems: list[str] = []
    values: dict[str, Any] = {}
    for name in given:
        if name not in spec.inputs:
            problems.append(f"{name!r} is not an input of {spec.name} ({sorted(spec.inputs)})")
    for name, declared in spec.inputs.items():
        if given.get(name) is None:
            if declared.default is not None:
                values[name] = declared.default
            elif declared.required:
                problems.append(f"{name!r} is required: {declared.description or declared.type}")
            continue
        try:
            values[name] = convert(declared, given[name])
        except (TypeError, ValueError) as exc:
            problems.append(f"{name!r}: {exc}")
    if problems:
        raise BadInputs(f"workflow {spec.name!r} cannot start: " + "; ".join(problems))
    return values


def convert(declared: InputSpec, value: Any) -> Any:
    """``value`` as the input's type (text from a message becomes a number...)."""
    kind = declared.type
    if kind == "string":
        out: Any = str(value)
    elif kind == "boolean":
        out = (
            value if isinstance(value, bool) else str(value).strip().lower() in ("true", "yes", "1")
        )
    elif kind == "integer":
        out = int(str(value).strip())
    else:
        number = float(str(value).strip().replace(",", ""))
        out = int(number) if number.is_integer() else number
    if declared.enum is not None and out not in declared.enum:
        raise ValueError(f"must be one of {list(declared.enum)}")
    return out
