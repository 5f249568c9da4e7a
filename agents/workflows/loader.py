"""Read one workflow file: YAML with line marks, the schema, then every check of checks/
(on what the schema lets through when it fails, ``salvage.py``: one pass finds every problem).

Every problem names the file, the node id ("" for the file as a whole) and the line where the
YAML parser puts the node or field, so an author goes straight to it.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import yaml
from pydantic import ValidationError

from agents import yamlsafe
from agents.errors import WorkflowLoadError, WorkflowProblem
from agents.text import a_or_an
from agents.workflows.checks.findings import Finding
from agents.workflows.checks.graph import check_graph
from agents.workflows.checks.installed import Tools, check_installed
from agents.workflows.flow import Flow, flow_of
from agents.workflows.salvage import Salvage, salvage
from agents.workflows.spec import NODE_KINDS, NODE_TYPES, WorkflowSpec
from agents.workflows.templates import check_templates

SUFFIXES = (".yaml", ".yml")
SCHEMA_HINT = "see agents/workflows/workflow.schema.json"

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Workflow:
    """A loaded workflow: its spec, its flow and where it came from.

    Attributes:
        lines: Dotted field path (``nodes.2.tool``) → the line the YAML parser gives it; kept
            so that later checks (a tool that disappeared) name the line too.
    """

    name: str
    spec: WorkflowSpec
    path: Path
    flow: Flow
    fingerprint: str
    lines: Mapping[str, int] = field(default_factory=dict, repr=False, compare=False)

    def problem(self, finding: Finding) -> WorkflowProblem:
        """A finding of checks/ as a problem naming this file and the line."""
        return _problem(str(self.path), self.lines, finding)


def load_workflow(
    path: Path,
    *,
    tools: Tools | None = None,
    skills: Collection[str] | None = None,
    profiles: Collection[str] | None = None,
    workflows: Mapping[str, WorkflowSpec] | Collection[str] | None = None,
) -> Workflow:
    """Load and check one workflow file.

    The installed world is optional: each of ``tools``, ``skills``, ``profiles`` (model
    profile names) and ``workflows`` (loaded workflows' names, or their specs by name, which
    also check that no sub-workflow can wait for an approval) is checked only when given.

    Raises:
        WorkflowLoadError: listing every problem, each naming the file, the node and the line.
    """
    workflow, problems = inspect_workflow(path)
    if workflow is not None:
        found = check_installed(
            workflow.spec, tools=tools, skills=skills, profiles=profiles, workflows=workflows
        )
        problems += [workflow.problem(f) for f in found]
    if problems or workflow is None:
        raise WorkflowLoadError(sorted(problems, key=lambda p: p.line))
    return workflow


def read_workflow(path: Path) -> Workflow:
    """Load one workflow file with every check that needs only the file itself.

    Raises:
        WorkflowLoadError: listing every problem, each naming the file, the node and the line.
    """
    workflow, problems = inspect_workflow(path)
    if problems or workflow is None:
        raise WorkflowLoadError(problems)
    return workflow


def inspect_workflow(path: Path) -> tuple[Workflow | None, list[WorkflowProblem]]:
    """Every problem of the file itself, and the workflow as far as the checks can read it,
    for the checks of the installed world (``None`` when nothing is readable: no YAML, no
    list of nodes).

    With problems, the workflow is for checking only, never to serve: a node that fails the
    schema is an ``UnreadNode`` in its place (``salvage.py``).

    An unexpected error (a bug in a check) is the file's problem, with the traceback in the
    log: it must not fail the reload, or the start, of every other workflow.
    """
    try:
        workflow, problems = _checked(path)
    except Exception as exc:
        log.exception("workflow.read_failed", file=str(path))
        message = (
            f"could not be checked: {type(exc).__name__}: {exc} (a bug in Skilldesk; the "
            "service log has the traceback)"
        )
        return None, [WorkflowProblem(str(path), "", 0, message)]
    return workflow, sorted(problems, key=lambda p: p.line)


def _checked(path: Path) -> tuple[Workflow | None, list[WorkflowProblem]]:
    file = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return None, [WorkflowProblem(file, "", 0, f"cannot be read: {exc.strerror or exc}")]
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        return None, [WorkflowProblem(file, "", 0, "is not UTF-8 text; save it as UTF-8")]
    data, lines, problems = parse_yaml(text, file)
    if data is None:
        return None, problems
    try:
        read = Salvage(WorkflowSpec.model_validate(data), whole=True)
    except ValidationError as exc:
        # Every schema problem, then what the other checks find in the rest of the file.
        problems += [_problem(file, lines, f) for f in schema_findings(exc, data)]
        salvaged = salvage(data, exc)
        if salvaged is None:
            return None, problems
        read = salvaged
    spec = read.spec
    flow = flow_of(spec)
    graph = flow if read.whole else None  # a node or an edge is missing: no graph checks
    findings = [*check_graph(spec, graph), *check_templates(spec, graph)]
    problems += [_problem(file, lines, read.in_file(f)) for f in findings]
    digest = hashlib.sha256(raw).hexdigest()
    return Workflow(spec.name, spec, path, flow, digest, lines), problems


def parse_yaml(text: str, file: str) -> tuple[Any, dict[str, int], list[WorkflowProblem]]:
    """The document, each field's line, and the problems (a syntax error: no document).

    A duplicate key is a problem: YAML would silently keep the last one. So is an alias that
    contains itself or a tree too big once aliases are expanded (``yamlsafe``).
    """
    try:
        root = yamlsafe.compose(text)
    except yamlsafe.YamlRefused as exc:
        return None, {}, [WorkflowProblem(file, "", exc.line, exc.reason)]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        reason = getattr(exc, "problem", None) or str(exc)
        line = mark.line + 1 if mark is not None else 0
        column = f", column {mark.column + 1}" if mark is not None else ""
        message = f"is not valid YAML: {reason} (line {line}{column})"
        return None, {}, [WorkflowProblem(file, "", line, message)]
    if not isinstance(root, yaml.MappingNode):
        message = "must be a YAML mapping with name, description and nodes"
        line = root.start_mark.line + 1 if root is not None else 0
        return None, {}, [WorkflowProblem(file, "", line, message)]
    lines: dict[str, int] = {"": 1}
    duplicates: list[tuple[str, int]] = []
    _walk(root, "", lines, duplicates)
    data = yamlsafe.construct(root)
    problems = [
        WorkflowProblem(file, node, line, f"{_field(path, node)}: is given twice; keep one")
        for path, line in duplicates
        for node in [_node_of(data, path)]
    ]
    return data, lines, problems


def _walk(node: yaml.Node, path: str, lines: dict[str, int], duplicates: list[Any]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode):
                continue
            child = f"{path}.{key.value}" if path else str(key.value)
            if child in lines:
                duplicates.append((child, key.start_mark.line + 1))
                continue
            lines[child] = key.start_mark.line + 1
            _walk(value, child, lines, duplicates)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            child = f"{path}.{i}" if path else str(i)
            lines[child] = item.start_mark.line + 1
            _walk(item, child, lines, duplicates)


def line_of(lines: Mapping[str, int], path: str) -> int:
    """The line of ``path``, or of its nearest parent that the file has."""
    while path not in lines and path:
        path = path.rpartition(".")[0]
    return lines.get(path, 0)


def _problem(file: str, lines: Mapping[str, int], finding: Finding) -> WorkflowProblem:
    node, path, message = finding
    return WorkflowProblem(file, node, line_of(lines, path), message)


def _node_of(data: Any, path: str) -> str:
    """The id of the node a dotted path is inside (``nodes.3.tool`` → that node's id)."""
    parts = path.split(".")
    if len(parts) >= 2 and parts[0] == "nodes" and parts[1].isdigit():
        nodes = data.get("nodes") if isinstance(data, dict) else None
        index = int(parts[1])
        if isinstance(nodes, list) and index < len(nodes) and isinstance(nodes[index], dict):
            node_id = nodes[index].get("id")
            return node_id if isinstance(node_id, str) else ""
    return ""


# Schema errors, in the author's terms.

_UNIONS = {
    "on_error": "must be fail, continue or {goto: <node id>}",
    "next": "must be a node id or a list of node ids",
    "version": "must be a number or a text, e.g. 1 or '2.1'",
}


def schema_findings(exc: ValidationError, data: Any) -> list[Finding]:
    """Pydantic's errors as findings on the file's own paths (one per field).

    A union (``on_error``, ``next``) reports one message, not one per member it tried; a
    list that is too short because its items failed reports the items only.
    """
    found: list[Finding] = []
    seen_unions: set[str] = set()
    errors = exc.errors()
    paths = [_data_path(err["loc"], data) for err in errors]
    for err, (path, union) in zip(errors, paths, strict=True):
        if err["type"] == "too_short" and any(
            p != path and p.startswith(f"{path}.") for p, _ in paths
        ):
            continue  # the items' own errors say it
        if union is not None:
            if union in seen_unions:
                continue
            seen_unions.add(union)
            deeper = [p for p, u in paths if u == union and p != union]
            if not deeper or not isinstance(_value_at(data, union), dict):
                field_name = union.rpartition(".")[2]
                message = _UNIONS.get(field_name, "has the wrong type")
                node = _node_of(data, union)
                found.append((node, union, f"{_field(union, node)}: {message}"))
                continue
        if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            path = f"{path}.kind"
        node = _node_of(data, path)
        found.append((node, path, f"{_field(path, node)}: {_message(err, path, data)}"))
    return found


def _field(path: str, node: str) -> str:
    """A path as the message names it: within the node when the problem names the node."""
    parts = path.split(".")
    if node and len(parts) > 2 and parts[0] == "nodes":
        return ".".join(parts[2:])
    return path or "the file"


def _data_path(loc: tuple[int | str, ...], data: Any) -> tuple[str, str | None]:
    """The dotted path into the file of an error's ``loc`` (pydantic's union tags left
    out), and the path of the union field when the error came from one of its members."""
    parts: list[str] = []
    current = data
    union: str | None = None
    for i, element in enumerate(loc):
        last = i == len(loc) - 1
        at_node = len(parts) == 2 and parts[0] == "nodes" and isinstance(current, dict)
        if at_node and not last and element == current.get("kind") and i == 2:
            continue  # the node kind's tag
        in_list = isinstance(current, list) and isinstance(element, int) and element < len(current)
        if in_list or (isinstance(current, dict) and element in current):
            current = current[element]
        elif isinstance(current, dict) and last:
            current = None  # a missing field
        else:
            union = union or ".".join(parts)  # a union member's tag
            continue
        parts.append(str(element))
    return ".".join(parts), union


def _value_at(data: Any, path: str) -> Any:
    current = data
    for part in path.split(".") if path else []:
        if isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        elif isinstance(current, dict):
            current = current.get(part)
        else:
            return None
    return current


def _message(err: Any, path: str, data: Any) -> str:
    kind = err["type"]
    name = path.rpartition(".")[2]
    if kind == "missing":
        return "is required"
    if kind == "union_tag_invalid":
        given = _value_at(data, path)
        close = difflib.get_close_matches(str(given), NODE_KINDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"unknown node kind {given!r}{hint} (the kinds: {', '.join(NODE_KINDS)})"
    if kind == "union_tag_not_found":
        return f"has no kind; add `kind:` with one of: {', '.join(NODE_KINDS)}"
    if kind == "extra_forbidden":
        return f"is not a known field; check its spelling ({_fields_hint(path, data)})"
    if kind == "string_pattern_mismatch" and name in ("id", "goto", "otherwise", "on_reject"):
        return (
            f"{err.get('input')!r} is not a valid node id: use lowercase letters, digits and "
            "underscores, starting with a letter (templates reach it as nodes.<id>)"
        )
    if kind == "string_pattern_mismatch" and name in ("name", "workflow"):
        return (
            f"{err.get('input')!r} is not a valid workflow name: use lowercase letters, digits "
            "and single hyphens"
        )
    if kind == "too_short" and path == "nodes":
        return "needs at least one node"
    return yamlsafe.validation_message(err)


def _fields_hint(path: str, data: Any) -> str:
    """The fields allowed where an unknown one was found (a node of a known kind, the file)."""
    parent = path.rpartition(".")[0]
    model: Any = None
    if parent == "":
        model, what = WorkflowSpec, "a workflow"
    elif parent.count(".") == 1 and parent.startswith("nodes."):
        kind = _value_at(data, f"{parent}.kind")
        model = NODE_TYPES.get(kind) if isinstance(kind, str) else None
        what = f"{a_or_an(str(kind))} node"
    if model is None:
        return SCHEMA_HINT
    names = [f.alias or n for n, f in model.model_fields.items()]
    return f"{what} has: {', '.join(names)}"
