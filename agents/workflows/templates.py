"""Templates of workflow files, rendered in a Jinja2 sandbox over a run's values.

A string that is a single expression (``"{{ nodes.alarms.output }}"``) keeps its value's type
(a list stays a list); any other string renders to text. Switch conditions are expressions.
"""

from __future__ import annotations

import re
from typing import Any

from jinja2 import StrictUndefined, TemplateError
from jinja2.sandbox import SandboxedEnvironment

from agents.errors import SkilldeskError

_ENV = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
_ONE_EXPRESSION = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\}\}).)*)\}\}\s*$", re.DOTALL)


class TemplateFailed(SkilldeskError):
    """A template could not be rendered with the run's values."""

    code = "template_failed"


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
        return bool(_ENV.compile_expression(expression, undefined_to_none=False)(**values))
    except TemplateError as exc:
        raise TemplateFailed(f"{where}: {exc}") from None


def _render_text(text: str, values: dict[str, Any], where: str) -> Any:
    if "{" not in text:
        return text
    try:
        single = _ONE_EXPRESSION.match(text)
        if single is not None:
            compiled = _ENV.compile_expression(single["expr"], undefined_to_none=False)
            return compiled(**values)
        return _ENV.from_string(text).render(**values)
    except TemplateError as exc:
        raise TemplateFailed(f"{where}: {exc}") from None
