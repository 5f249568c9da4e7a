"""YAML an author wrote, read within bounds: no alias that contains itself, no tree too big.

A YAML alias repeats the node its anchor names, so a few hundred bytes of aliases to aliases
("billion laughs") make a tree of billions of nodes, and an alias inside its own anchor makes
an infinite one. PyYAML composes a document into a graph of distinct nodes (an alias is a
second reference to the same node) and expands it only when it is walked or when the values
are copied; so the graph is checked here, in time and memory proportional to its distinct
nodes, before anything walks it.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

# Workflows, SKILL.md frontmatter and skill.yaml are a few hundred to a few ten thousand nodes
# (a workflow node is some 10 to 40: its keys, values and templates); a workflow of 3,000
# nodes is some 60,000. What is walked, validated and copied after this check is at most this
# many nodes: a few tens of MB and a fraction of a second at worst.
MAX_NODES = 250_000
MAX_DEPTH = 200  # mappings and lists nested; what walks the values recurses

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster
_ANCHOR = re.compile(r"&([^\s,\[\]{}]+)")
_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")  # YAML's line breaks


class YamlRefused(Exception):
    """A document refused before it is expanded; ``line`` (1-based) is where, 0 for none."""

    def __init__(self, reason: str, line: int) -> None:
        super().__init__(f"{reason} (line {line})" if line else reason)
        self.reason, self.line = reason, line


def compose(text: str, *, cycles: bool = False) -> yaml.Node | None:
    """The document's node graph (``None`` for an empty document), once it is within bounds.

    ``cycles``: an alias inside the node it names is left for the caller to refuse with
    its own words (a tool schema's check names the place in the schema); it counts once.

    Raises:
        yaml.YAMLError: the text is not YAML.
        YamlRefused: an alias contains itself, or the tree would exceed ``MAX_NODES`` or
            ``MAX_DEPTH``.
    """
    root = yaml.compose(text, Loader=_LOADER)
    if root is not None:
        _check(root, text, cycles=cycles)
    return root


def construct(root: yaml.Node | None) -> Any:
    """The values of a composed document (an alias shares the value its anchor names)."""
    return None if root is None else _LOADER("").construct_document(root)


def load(text: str, *, cycles: bool = False) -> Any:
    """``yaml.safe_load`` within bounds (libyaml when it is there).

    Raises:
        yaml.YAMLError, YamlRefused: as ``compose``.
    """
    return construct(compose(text, cycles=cycles))


def _check(root: yaml.Node, text: str, *, cycles: bool) -> None:
    """Each distinct node's expanded size and depth, children first, without recursion."""
    sizes: dict[int, tuple[int, int]] = {}  # id → (nodes, depth) of its expanded tree
    open_: set[int] = set()  # the nodes around the one being expanded
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        children = _children(node)
        if finished:
            open_.discard(key)
            inner = [sizes.get(id(c), (1, 1)) for _, c in children]  # a cycle counts once
            size = 1 + sum(n for n, _ in inner)
            depth = 1 + max((d for _, d in inner), default=0)
            if size > MAX_NODES:
                raise YamlRefused(
                    f"{_named(node, text)} expands to more than {MAX_NODES:,} values (YAML "
                    "aliases repeat what their anchor names); write it out, or make it smaller",
                    _line(node),
                )
            if depth > MAX_DEPTH:
                raise YamlRefused(
                    f"{_named(node, text)} nests more than {MAX_DEPTH} levels deep; flatten it",
                    _line(node),
                )
            sizes[key] = (size, depth)
            continue
        if key in sizes:
            continue  # an alias to a node already measured
        open_.add(key)
        stack.append((node, True))
        for line, child in children:
            if id(child) not in open_:
                stack.append((child, False))
            elif not cycles:
                anchor = _named(child, text)
                raise YamlRefused(
                    f"an alias to {anchor} is inside the node it names, so it would contain "
                    "itself without end; refer to something outside it",
                    line or _line(child),
                )


def _children(node: yaml.Node) -> list[tuple[int, yaml.Node]]:
    """A node's children, each with the line of the key it is the value of (0: none)."""
    if isinstance(node, yaml.MappingNode):
        return [pair for k, v in node.value for pair in ((_line(k), k), (_line(k), v))]
    if isinstance(node, yaml.SequenceNode):
        return [(0, item) for item in node.value]
    return []


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _named(node: yaml.Node, text: str) -> str:
    """``&anchor`` when the node has one where it starts, else "the value at line N"."""
    mark = node.start_mark
    lines = _BREAK.split(text)
    found = _ANCHOR.match(lines[mark.line][mark.column :]) if mark.line < len(lines) else None
    return f"&{found.group(1)}" if found else f"the value at line {mark.line + 1}"


def reason(exc: yaml.YAMLError, offset: int = 0) -> str:
    """Why the YAML does not parse, and where; ``offset``: the lines of the file before it."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is None:
        return problem
    return f"{problem} at line {mark.line + 1 + offset}, column {mark.column + 1}"


# What pydantic says of a value of the wrong shape, in the words of YAML.
_SHAPES = {
    "tuple_type": "should be a list (`- item` lines, or `[a, b]`)",
    "list_type": "should be a list (`- item` lines, or `[a, b]`)",
    "dict_type": "should be a mapping (`key: value` lines)",
    "model_type": "should be a mapping (`key: value` lines)",
}


def validation_message(err: Any) -> str:
    """One of pydantic's errors (an item of ``ValidationError.errors()``) as a YAML file's
    author reads it: a list, not a "tuple"; without pydantic's "Value error, "."""
    shape = _SHAPES.get(str(err.get("type")))
    if shape is not None:
        return f"{shape}, not {_given(err.get('input'))}"
    return str(err["msg"]).removeprefix("Value error, ")


def _given(value: Any) -> str:
    """What was given, by its kind only (a value may be a secret: a models file's key)."""
    if value is None:
        return "empty"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, bool):
        return "true/false"
    return "a number" if isinstance(value, int | float) else "text"
