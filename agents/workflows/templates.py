"""Templates of workflow files: the sandboxed Jinja2 environment, the check that a template
parses and names only what it can see (declared inputs, nodes that can have run before it,
``run``), and rendering over a run's values.

A string that is a single expression (``"{{ nodes.alarms.output }}"``) keeps its value's type
(a list stays a list); any other string renders to text. Switch conditions are expressions.
Which inputs and nodes a template names is checked when the file loads; a field inside a
node's output is data (a tool may leave it out), so a missing one is empty (``None`` as a
value), as ``x.get("field")`` would be.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Container, Iterator
from typing import Any

from jinja2 import ChainableUndefined, TemplateError, TemplateSyntaxError, Undefined, nodes
from jinja2.sandbox import SandboxedEnvironment

from agents.errors import TemplateFailed
from agents.workflows.checks.findings import Finding, suggest
from agents.workflows.flow import Flow
from agents.workflows.spec import TEMPLATE_GLOBALS, SwitchNode, WorkflowSpec


def template_environment() -> SandboxedEnvironment:
    """The sandboxed Jinja2 environment templates are checked and rendered with."""
    return SandboxedEnvironment(
        autoescape=False, keep_trailing_newline=True, undefined=ChainableUndefined
    )


_ENV = template_environment()
_NONE: frozenset[str] = frozenset()
_ONE_EXPRESSION = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\}\}).)*)\}\}\s*$", re.DOTALL)


def check_templates(spec: WorkflowSpec, flow: Flow | None) -> list[Finding]:
    """Each template parses, and names only declared inputs and nodes that can have run
    before it (for ``outputs``: any node a run can reach); with no ``flow`` (the graph is
    not whole), any node there is."""
    found: list[Finding] = []
    ids = {n.id for n in spec.nodes if n.id}  # a node that failed the schema may have none
    unique = len(ids) == len(spec.nodes)  # else which node runs before which is unclear
    ancestors = flow.ancestors() if flow is not None and unique else None
    for i, node in enumerate(spec.nodes):
        before = ancestors.get(node.id, _NONE) if ancestors is not None else ids
        for field, text in node.templates():
            path = f"nodes.{i}.{field}"
            if isinstance(node, SwitchNode) and text.count("{{") > 1:
                message = "a condition is an expression: write it without {{ }}"
                found.append((node.id, path, f"{field}: {message}"))
                continue
            for message in _template_problems(text, spec, ids, before, own=node.id):
                found.append((node.id, path, f"{field}: {message}"))
    reachable = flow.reachable() if flow is not None else ids
    for key, text in spec.outputs.items():
        path = f"outputs.{key}"
        for message in _template_problems(text, spec, ids, reachable, own=None):
            found.append(("", path, f"{path}: {message}"))
    return found


def _template_problems(
    text: str, spec: WorkflowSpec, ids: set[str], allowed: Container[str], own: str | None
) -> list[str]:
    if "{" not in text:
        return []
    try:
        tree = _ENV.parse(text)
    except TemplateSyntaxError as exc:
        where = f" (line {exc.lineno} of the template)" if "\n" in text.strip() else ""
        return [f"template syntax error: {exc.message}{where}"]
    problems: list[str] = []
    every = list(tree.find_all(nodes.Node))  # one walk of the tree; each kind, in order, from it
    names = [n for n in every if isinstance(n, nodes.Name)]
    local = {n.name for n in names if n.ctx in ("store", "param")}
    if any(isinstance(n, nodes.For) for n in every):
        local.add("loop")
    if any(isinstance(n, nodes.Macro | nodes.CallBlock) for n in every):
        local |= {"caller", "varargs", "kwargs"}
    for name in names:
        if name.ctx != "load" or name.name in local or name.name in _ENV.globals:
            continue
        if name.name not in TEMPLATE_GLOBALS:
            hint = ""
            if name.name in spec.inputs:
                hint = f" — did you mean inputs.{name.name}?"
            elif name.name in ids:
                hint = f" — did you mean nodes.{name.name}.output?"
            problems.append(
                f"refers to {name.name!r}, which templates do not have; they see "
                f"{', '.join(TEMPLATE_GLOBALS)}{hint}"
            )
    for top, key in _references(every):
        if top == "inputs" and key not in spec.inputs:
            problems.append(
                f"refers to inputs.{key}, which is not declared"
                + suggest(key, spec.inputs, "the inputs")
            )
        elif top == "nodes" and key not in ids:
            problems.append(
                f"refers to nodes.{key}, which does not exist" + suggest(key, ids, "the nodes")
            )
        elif top == "nodes" and key not in allowed:
            why = (
                "its own output"
                if key == own
                else "a node that cannot have run before it (no path leads from it here)"
                if own is not None
                else "a node no run can reach"
            )
            problems.append(f"refers to nodes.{key}, {why}")
    for item in every:
        if not isinstance(item, nodes.Filter | nodes.Test):
            continue
        table = _ENV.filters if isinstance(item, nodes.Filter) else _ENV.tests
        if item.name not in table:
            kind = "filter" if isinstance(item, nodes.Filter) else "test"
            problems.append(f"unknown {kind} {item.name!r}" + suggest(item.name, table, "known"))
    return list(dict.fromkeys(problems))


def _references(every: list[nodes.Node]) -> Iterator[tuple[str, str]]:
    """``inputs.x``, ``inputs['x']``, ``nodes.y``... as (top-level name, key); ``every``: a
    template's nodes in the order of ``find_all``."""
    for attr in every:
        if (
            isinstance(attr, nodes.Getattr)
            and isinstance(attr.node, nodes.Name)
            and attr.node.name in ("inputs", "nodes")
        ):
            yield attr.node.name, attr.attr
    for item in every:
        if (
            isinstance(item, nodes.Getitem)
            and isinstance(item.node, nodes.Name)
            and item.node.name in ("inputs", "nodes")
            and isinstance(item.arg, nodes.Const)
            and isinstance(item.arg.value, str)
        ):
            yield item.node.name, item.arg.value


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
        return bool(_expression(expression)(**values))
    except TemplateError as exc:
        raise TemplateFailed(f"{where}: {exc}") from None


def _render_text(text: str, values: dict[str, Any], where: str) -> Any:
    if "{" not in text:
        return text
    try:
        single = _ONE_EXPRESSION.match(text)
        if single is not None:
            value = _expression(single["expr"])(**values)
            return None if isinstance(value, Undefined) else value
        return _template(text).render(**values)
    except TemplateError as exc:
        raise TemplateFailed(f"{where}: {exc}") from None


# Compiling a template costs about a millisecond; a workflow's templates are few and
# rendered on every run, so each is compiled once.
@functools.lru_cache(maxsize=4096)
def _expression(source: str) -> Any:
    return _ENV.compile_expression(source)


@functools.lru_cache(maxsize=4096)
def _template(source: str) -> Any:
    return _ENV.from_string(source)
