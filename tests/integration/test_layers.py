"""The layers of DESIGN.md §1 hold: imports point down, agents' packages form no import
cycle, and every package imports on its own."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# DESIGN.md §1, top to bottom: a module imports its own layer and the layers below it.
LAYERS = ("app", "agents")
# Ours as well, and above every layer: no layer imports them.
ABOVE = ("tests", "bench")


@dataclass(frozen=True)
class Import:
    """One name imported by one module, with where it is written."""

    module: str
    file: str
    line: int
    target: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} imports {self.target}"


def module_name(path: Path) -> str:
    """``agents/router/router.py`` -> ``agents.router.router``; a package is its folder."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of every layer, by dotted name."""
    return {
        module_name(path): path for layer in LAYERS for path in sorted((ROOT / layer).rglob("*.py"))
    }


def _targets(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: resolved against the importing module's package
        anchor = package.split(".")[: package.count(".") + 2 - node.level]
        base = ".".join([*anchor, *([node.module] if node.module else [])])
    # `from agents import errors` imports the module agents.errors, not the package.
    named = (f"{base}.{alias.name}" for alias in node.names)
    return list(dict.fromkeys(name if name in modules() else base for name in named))


@cache
def imports(layer: str) -> tuple[Import, ...]:
    """Every import written in a layer, inside functions and ``TYPE_CHECKING`` blocks too."""
    found: list[Import] = []
    for name, path in modules().items():
        if name.partition(".")[0] != layer:
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        file = path.relative_to(ROOT).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                found += [Import(name, file, node.lineno, t) for t in _targets(node, package)]
    return tuple(sorted(found, key=lambda i: (i.file, i.line, i.target)))


def _top(name: str) -> str:
    return name.partition(".")[0]


def _listing(found: Iterable[Import]) -> str:
    return "\n".join(f"  {i}" for i in found)


def test_agents_import_nothing_of_app_tests_or_bench() -> None:
    wrong = [i for i in imports("agents") if _top(i.target) in {"app", "tests", "bench"}]
    if wrong:
        pytest.fail(
            "agents/ is the brain, importable without the service shell, tests or benchmarks "
            f"(DESIGN.md §1):\n{_listing(wrong)}",
            pytrace=False,
        )


@pytest.mark.parametrize("layer", LAYERS)
def test_a_layer_imports_only_itself_and_the_layers_below(layer: str) -> None:
    allowed = LAYERS[LAYERS.index(layer) :]
    forbidden = {*LAYERS, *ABOVE} - set(allowed)
    wrong = [i for i in imports(layer) if _top(i.target) in forbidden]
    if wrong:
        pytest.fail(
            f"{layer}/ may import only {', '.join(allowed)} of ours:\n{_listing(wrong)}",
            pytrace=False,
        )


def package_of(module: str) -> str:
    """The node of the package graph: ``agents.router.router`` -> ``agents.router``; a
    top-level module (``agents.run``) is a node of its own."""
    return ".".join(module.split(".")[:2])


def package_edges() -> dict[tuple[str, str], list[Import]]:
    """Package -> package imports inside agents/, with the imports that make each."""
    edges: dict[tuple[str, str], list[Import]] = {}
    for i in imports("agents"):
        source, target = package_of(i.module), package_of(i.target)
        if _top(target) == "agents" and source != target:
            edges.setdefault((source, target), []).append(i)
    return edges


def strongly_connected(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Tarjan's components of a small graph; a cycle lies within one of more than one node."""
    graph: dict[str, list[str]] = {}
    for source, target in edges:
        graph.setdefault(source, []).append(target)
        graph.setdefault(target, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _shortest_cycle(start: str, members: set[str], edges: Iterable[tuple[str, str]]) -> list[str]:
    """A shortest path ``start -> ... -> start`` through one component's members."""
    following: dict[str, list[str]] = {}
    for source, target in sorted(edges):
        if source in members and target in members:
            following.setdefault(source, []).append(target)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in following.get(node, []):
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if target not in came_from:
                came_from[target] = node
                queue.append(target)
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def _describe(component: list[str], edges: dict[tuple[str, str], list[Import]]) -> str:
    cycle = _shortest_cycle(component[0], set(component), edges)
    lines = [f"import cycle between {', '.join(component)}: {' -> '.join(cycle)}"]
    for (source, target), found in sorted(edges.items()):
        if source in component and target in component:
            lines.append(f"  {source} -> {target}:")
            lines += [f"    {i}" for i in found]
    return "\n".join(lines)


def test_the_packages_of_agents_import_each_other_without_a_cycle() -> None:
    edges = package_edges()
    cycles = [c for c in strongly_connected(edges) if len(c) > 1]
    if cycles:
        pytest.fail("\n".join(_describe(c, edges) for c in cycles), pytrace=False)


def test_a_cycle_is_reported_naming_its_packages() -> None:
    edges = [("a.x", "a.y"), ("a.y", "a.z"), ("a.z", "a.x"), ("a.z", "a.w"), ("a.w", "a.w")]
    assert [c for c in strongly_connected(edges) if len(c) > 1] == [["a.x", "a.y", "a.z"]]
    assert _shortest_cycle("a.y", {"a.x", "a.y", "a.z"}, edges) == ["a.y", "a.z", "a.x", "a.y"]


def packages() -> list[str]:
    """Every folder of Python modules under the layers, found by walking them."""
    folders = [d for layer in LAYERS for d in [ROOT / layer, *(ROOT / layer).rglob("*")]]
    return sorted(
        module_name(d / "__init__.py") for d in folders if d.is_dir() and any(d.glob("*.py"))
    )


@pytest.fixture(scope="module")
def fresh_imports() -> Iterator[dict[str, subprocess.Popen[str]]]:
    """``import <package>`` in a fresh interpreter per package, all started at once."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    running = {
        name: subprocess.Popen(
            [sys.executable, "-c", f"import {name}"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in packages()
    }
    yield running
    for process in running.values():
        process.kill()
        process.wait()


@pytest.mark.parametrize("package", packages())
def test_each_package_imports_alone_in_a_fresh_interpreter(
    package: str, fresh_imports: dict[str, subprocess.Popen[str]]
) -> None:
    _, stderr = fresh_imports[package].communicate(timeout=120)
    if fresh_imports[package].returncode != 0:
        pytest.fail(f"`import {package}` alone fails:\n{stderr}", pytrace=False)
