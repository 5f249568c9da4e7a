"""Templates of workflow files, rendered in a Jinja2 sandbox over a run's values.

A string that is a single expression (``"{{ nodes.alarms.output }}"``) keeps its value's type
(a list stays a list); any other string renders to text. Switch conditions are expressions.
Which inputs and nodes a template names is checked when the file loads; a field inside a
node's output is data (a tool may leave it out), so a missing one is empty (``None`` as a
value), as ``x.get("field")`` would be.
"""

from __future__ import annotations

import re
from typing import Any

from jinja2 import ChainableUndefined, TemplateError, Undefined
from jinja2.sandbox import SandboxedEnvironment

from agents.errors import TemplateFailed

_ENV = SandboxedEnvironment(undefined=ChainableUndefined, autoescape=False)
_ONE_EXPRESSION = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\}\}).)*)\}\}\s*$", re.DOTALL)


def environment() -> SandboxedEnvironment:
    """The sandbox every workflow template renders in (the loader parses with it too)."""
    return _ENV


def render(value: Any, values: dict[str, Any], where: str = "") -> Any:
    """``value`` with every string in it rendered (dicts and lists walked).

    Raises:
        TemplateFailed: naming ``where`` and what went wrong.
    """
    if isinstance(value, str):
        return _render_text(value, values, where)
    if isinstance(value, dict):
        return {k: render(v, values, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [render(v, values, f"{where}.{i}") for i, v in enumerate(value)]
    return value


def condition(expression: str, values: dict[str, Any], where: str = "") -> bool:
    """Whether ``expression`` (a Jinja expression) holds for the run's values."""
    try:
        return bool(_ENV.compile_expression(expression)(**values))
    except TemplateError as exc:
        raise TemplateFailed(f"{where}: {exc}") from None


def _render_text(text: str, values: dict[str, Any], where: str) -> Any:
    if "{" not in text:
        return text
    try:
        single = _ONE_EXPRESSION.match(text)
        if single is not None:
            value = _ENV.compile_expression(single["expr"])(**values)
            return None if isinstance(value, Undefined) else value
        return _ENV.from_string(text).render(**values)
    except TemplateError as exc:
        raise TemplateFailed(f"{where}: {exc}") from None
