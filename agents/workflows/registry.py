"""The workflow registry: one YAML file per workflow in one folder, by name, reloadable in place.

A file whose edit breaks it keeps serving its last good version, and its problems stay in
``errors`` until it is fixed (all of them at once, the installed world's included). The
installed world (tools, skills, model profiles) is checked at every reload and again by
``recheck`` when it changes: a workflow that names a tool or skill no longer installed is
withdrawn (reported in ``errors``, ``get`` says why) rather than left to fail half-way
through a run, after side effects; it serves again by itself once what it needs is back.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from agents.errors import WorkflowNotFound, WorkflowProblem
from agents.owners import OwnersFile
from agents.workflows.checks.findings import Finding
from agents.workflows.checks.installed import Tools, check_installed
from agents.workflows.loader import SUFFIXES, Workflow, inspect_workflow, line_of
from agents.workflows.spec import WorkflowNode, WorkflowSpec

if TYPE_CHECKING:
    from agents.skills.registry import SkillRegistry

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class WorkflowReport:
    """What one (re)load or recheck changed; ``errors`` are the problems it found anew."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    errors: list[WorkflowProblem] = field(default_factory=list)

    @property
    def changed_anything(self) -> bool:
        """Whether the set of serving workflows changed."""
        return bool(self.added or self.changed or self.removed)


@dataclass
class _File:
    """One file: what it holds now, and the last version of it that served."""

    stamp: tuple[int, int]
    read: Workflow | None  # its current content as far as the checks read it (to check only)
    problems: list[WorkflowProblem]  # the file's own problems (current content)
    good: Workflow | None = None  # the last version that served

    @property
    def latest(self) -> Workflow | None:
        """Its current content, when that passes the file's own checks."""
        return None if self.problems else self.read


@dataclass
class _World:
    tools: Tools | None = None
    skills: Collection[str] | None = None
    profiles: Collection[str] | None = None


def is_workflow_file(path: Path) -> bool:
    """Whether a folder's registry reads ``path``: a YAML file, not hidden (``.``, ``_``)."""
    return path.suffix in SUFFIXES and not path.name.startswith((".", "_")) and path.is_file()


class WorkflowRegistry:
    """The workflows of one folder (``*.yaml``/``*.yml`` directly in it) by name.

    Args:
        directory: The folder.
        tools: Installed tools (names, or name → JSON Schema of the parameters, which also
            checks the arguments); ``None``: not checked.
        skills: Installed skill names; ``None``: not checked.
        profiles: Configured model profile names; ``None``: not checked.
        owners: Where the file owning each workflow name is kept across restarts; ``None``:
            in memory only.
    """

    def __init__(
        self,
        directory: Path,
        *,
        tools: Tools | None = None,
        skills: Collection[str] | None = None,
        profiles: Collection[str] | None = None,
        owners: OwnersFile | None = None,
    ) -> None:
        self.directory = directory
        self._owners_file = owners
        self.version = 0
        self.errors: list[WorkflowProblem] = []
        self._lock = threading.RLock()
        self._world = _World(tools, skills, profiles)
        self._files: dict[Path, _File] = {}
        self._serving: dict[str, Workflow] = {}
        # name → the file that serves it, or is withdrawn, or holds it but does not read
        self._owners: dict[str, Path] = {
            name: directory / file for name, file in (owners.read() if owners else {}).items()
        }
        self._unavailable: dict[str, str] = {}  # name → why it is not serving

    def reload(self) -> WorkflowReport:
        """Scan the folder; read what is new or changed, drop what is gone."""
        paths = self._paths()
        with self._lock:
            files: dict[Path, _File] = {}
            for path in paths:
                try:
                    stat = path.stat()
                except OSError:
                    continue  # deleted while we looked
                stamp = (stat.st_mtime_ns, stat.st_size)
                known = self._files.get(path)
                if known is not None and known.stamp == stamp:
                    files[path] = known
                    continue
                read, problems = inspect_workflow(path)
                good = known.good if known is not None else None
                files[path] = _File(stamp, read, problems, good)
            self._files = files
            return self._resolve()

    def recheck(
        self,
        tools: Tools | None = None,
        skills: Collection[str] | None = None,
        profiles: Collection[str] | None = None,
    ) -> WorkflowReport:
        """Check every workflow against a new installed world (skills reloaded, say); each
        argument left ``None`` is not checked."""
        with self._lock:
            self._world = _World(tools, skills, profiles)
            return self._resolve()

    def not_installed(self, spec: WorkflowSpec, done: Collection[str] = ()) -> list[str]:
        """What the nodes of ``spec`` not in ``done`` name that is not installed now (tools,
        skills, model profiles), each as ``node 'ID': why``: a run of a withdrawn workflow
        would fail there."""
        with self._lock:
            world = self._world
        found = check_installed(
            spec, tools=world.tools, skills=world.skills, profiles=world.profiles
        )
        return [f"node {node!r}: {why}" for node, _, why in found if node not in done]

    def _paths(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.iterdir() if is_workflow_file(p))

    def _resolve(self) -> WorkflowReport:
        """Choose what serves from each file, given the world; report what changed."""
        errors: list[WorkflowProblem] = []
        unavailable: dict[str, str] = {}
        chosen: dict[Path, Workflow] = {}
        withdrawn: dict[Path, Workflow] = {}
        reasons: dict[Path, str] = {}
        for path, entry in self._files.items():
            # The world's problems of what the file holds, also when it has its own: one
            # pass says every problem, not the next once the first is fixed.
            current = self._world_problems(entry.read) if entry.read else []
            errors += sorted([*entry.problems, *current], key=lambda p: p.line)
            latest = current if entry.latest is not None else []
            if entry.latest is not None and not latest:
                chosen[path] = entry.latest
                continue
            good = self._world_problems(entry.good) if entry.good else []
            if entry.good is not None and not good:
                chosen[path] = entry.good  # the last good version keeps serving
                continue
            if entry.latest is None:
                errors += good  # why the last good version does not serve either
            held = entry.latest or entry.good
            if held is not None:
                withdrawn[path] = held
                reasons[path] = self._reason((latest or good or entry.problems)[0])
        serving, owners = self._unique_names(chosen, withdrawn, errors)
        for path, held in withdrawn.items():
            if owners.get(held.name) == path or held.name not in owners:
                unavailable[held.name] = reasons[path]
        for name, path in owners.items():
            if name not in serving and path not in withdrawn and self._files[path].problems:
                unavailable[name] = self._reason(self._files[path].problems[0])
        # What the files hold that does not serve (_sub_workflows checks what does).
        unserved = [
            f.read
            for f in self._files.values()
            if f.read is not None and serving.get(f.read.name) is not f.read
        ]
        self._sub_workflows(serving, errors, unavailable)
        errors += _sub_workflow_problems(unserved, serving)
        for name, workflow in serving.items():
            self._files[owners[name]].good = workflow
        report = self._report(serving, errors)
        self._record(owners)
        self._serving, self._owners = serving, owners
        self._unavailable = {n: r for n, r in unavailable.items() if n not in serving}
        self.errors = _unique(errors)
        if report.changed_anything:
            self.version += 1
        self._log(report)
        return report

    def _world_problems(self, workflow: Workflow) -> list[WorkflowProblem]:
        world = self._world
        found = check_installed(
            workflow.spec, tools=world.tools, skills=world.skills, profiles=world.profiles
        )
        return [workflow.problem(f) for f in found]

    def _unique_names(
        self,
        chosen: dict[Path, Workflow],
        withdrawn: dict[Path, Workflow],
        errors: list[WorkflowProblem],
    ) -> tuple[dict[str, Workflow], dict[str, Path]]:
        """One file per name: the file that served it keeps it (also after a restart, from
        the owners file), else the file written longest ago, then by name.

        A file that served a name keeps it while withdrawn (``withdrawn``: the files that do
        not serve, with what they hold) or while it does not read at all, so that it serves
        again once valid and a duplicate stays refused meanwhile; ``owners`` names it,
        ``serving`` does not.
        """
        serving: dict[str, Workflow] = {}
        owners: dict[str, Path] = {
            w.name: p for p, w in withdrawn.items() if self._owners.get(w.name) == p
        }
        for name, path in self._owners.items():
            if path in self._files and path not in chosen and path not in withdrawn:
                owners.setdefault(name, path)  # what it holds now is unknown: it keeps it
        incumbents = [p for p in chosen if self._owners.get(chosen[p].name) == p]
        newcomers = sorted(
            (p for p in chosen if p not in incumbents),
            key=lambda p: (self._files[p].stamp[0], p),  # modification time, then name
        )
        for path in [*incumbents, *newcomers]:
            workflow = chosen[path]
            if workflow.name in owners:
                other = owners[workflow.name]
                errors.append(
                    WorkflowProblem(
                        str(path),
                        "",
                        line_of(workflow.lines, "name"),
                        f"name: workflow {workflow.name!r} is already defined by {other}; "
                        "workflow names are unique — rename one",
                    )
                )
                continue
            serving[workflow.name], owners[workflow.name] = workflow, path
        return serving, owners

    def _record(self, owners: dict[str, Path]) -> None:
        """Keep ``owners`` in the owners file, when they changed."""
        record = {name: path.name for name, path in owners.items()}
        if self._owners_file is not None and record != {
            name: path.name for name, path in self._owners.items()
        }:
            self._owners_file.save(record)

    def _sub_workflows(
        self,
        serving: dict[str, Workflow],
        errors: list[WorkflowProblem],
        unavailable: dict[str, str],
    ) -> None:
        """Withdraw workflows that run a workflow that is not serving, or run each other."""
        while True:
            dropped: dict[str, list[WorkflowProblem]] = {}
            specs = {n: w.spec for n, w in serving.items()}
            for name, workflow in serving.items():
                found = check_installed(workflow.spec, workflows=specs)
                found += nesting_loop(workflow, serving)
                if found:
                    dropped[name] = [workflow.problem(f) for f in found]
            if not dropped:
                return
            for name, problems in dropped.items():
                del serving[name]
                unavailable[name] = self._reason(problems[0])
                errors += problems

    def _reason(self, problem: WorkflowProblem) -> str:
        """Why a workflow does not serve, as its requesters read it: its file (named within
        the workflows folder, not by the server's path), line and node, and the problem."""
        file = Path(problem.file)
        if file.is_relative_to(self.directory):
            problem = replace(problem, file=str(file.relative_to(self.directory)))
        return str(problem)

    def _report(
        self, serving: dict[str, Workflow], errors: list[WorkflowProblem]
    ) -> WorkflowReport:
        before = self._serving
        known = set(self.errors)
        return WorkflowReport(
            added=sorted(n for n in serving if n not in before),
            changed=sorted(
                n
                for n in serving
                if n in before and serving[n].fingerprint != before[n].fingerprint
            ),
            removed=sorted(n for n in before if n not in serving),
            errors=[p for p in _unique(errors) if p not in known],
        )

    def _log(self, report: WorkflowReport) -> None:
        for problem in report.errors:
            log.warning(
                "workflow.invalid",
                file=problem.file,
                node=problem.node,
                line=problem.line,
                error=problem.message,
            )
        if report.changed_anything:
            log.info(
                "workflows.reloaded",
                added=report.added,
                changed=report.changed,
                removed=report.removed,
                total=len(self._serving),
            )

    def get(self, name: str) -> Workflow:
        """The workflow by name; raises WorkflowNotFound naming close matches, or why a
        workflow of that name is not serving."""
        with self._lock:
            try:
                return self._serving[name]
            except KeyError:
                reason = self._unavailable.get(name, "") or self._not_loaded(name)
                raise WorkflowNotFound(name, list(self._serving), reason) from None

    def _not_loaded(self, name: str) -> str:
        """Why the file named for workflow ``name`` (``name.yaml``) did not load, or ""."""
        problems = [p for p in self.errors if Path(p.file).stem == name]
        if not problems:
            return ""
        said = "; ".join(str(p) for p in problems[:3])
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        return f"its file did not load: {said}{more}"

    def names(self) -> list[str]:
        """The serving workflows' names, sorted."""
        with self._lock:
            return sorted(self._serving)

    def all(self) -> list[Workflow]:
        """Every serving workflow, by name."""
        with self._lock:
            return [self._serving[k] for k in sorted(self._serving)]

    def __contains__(self, name: object) -> bool:
        return name in self._serving

    def __len__(self) -> int:
        return len(self._serving)


def nesting_loop(workflow: Workflow, serving: dict[str, Workflow]) -> list[Finding]:
    """A finding when ``workflow`` runs itself again through its sub-workflows."""
    start = workflow.name
    todo: list[list[str]] = [[start]]
    seen: set[str] = set()
    while todo:
        chain = todo.pop()
        current = serving.get(chain[-1])
        for node in current.spec.nodes if current is not None else ():
            if not isinstance(node, WorkflowNode) or node.workflow == chain[-1]:
                continue
            if node.workflow == start:
                first = chain[1] if len(chain) > 1 else start
                index, via = next(
                    (i, n.id)
                    for i, n in enumerate(workflow.spec.nodes)
                    if isinstance(n, WorkflowNode) and n.workflow == first
                )
                loop = " → ".join([*chain, start])
                message = f"workflow: runs {first!r}, which runs this one again ({loop}); "
                return [
                    (via, f"nodes.{index}.workflow", message + "workflows cannot nest in a loop")
                ]
            if node.workflow not in seen:
                seen.add(node.workflow)
                todo.append([*chain, node.workflow])
    return []


def _sub_workflow_problems(
    unserved: list[Workflow], serving: dict[str, Workflow]
) -> list[WorkflowProblem]:
    """The sub-workflow problems of what files hold that does not serve (a broken edit, a
    version withdrawn): said with its other problems, not once those are fixed."""
    specs = {n: w.spec for n, w in serving.items()}
    found: list[WorkflowProblem] = []
    for workflow in unserved:
        findings = check_installed(workflow.spec, workflows=specs)
        if workflow.name:  # a name that fails the schema is left empty: it names nothing
            findings += nesting_loop(workflow, {**serving, workflow.name: workflow})
        found += [workflow.problem(f) for f in findings]
    return found


def skills_world(skills: SkillRegistry) -> dict[str, Any]:
    """``tools`` (name → parameters) and ``skills`` (names) of a SkillRegistry, as
    ``WorkflowRegistry(..., **skills_world(registry))`` and ``recheck`` take them."""
    live = skills.all()
    return {
        "tools": {tool.name: tool.parameters for skill in live for tool in skill.tools},
        "skills": {skill.name for skill in live},
    }


def _unique(problems: list[WorkflowProblem]) -> list[WorkflowProblem]:
    return list(dict.fromkeys(problems))
