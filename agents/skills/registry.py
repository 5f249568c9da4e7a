"""The skill registry: a dict of loaded skills plus clear errors, reloadable in place."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from agents.errors import SkillLoadError, SkillNotFound, SkillProblem
from agents.owners import OwnersFile
from agents.skills.loader import CONFIG_FILE, SKILL_FILE, Skill, fingerprint, load_skill
from agents.skills.spec import ToolSpec

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ReloadReport:
    """What one (re)load changed."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    errors: list[SkillProblem] = field(default_factory=list)

    @property
    def changed_anything(self) -> bool:
        """Whether the set of live skills changed."""
        return bool(self.added or self.changed or self.removed)


class SkillRegistry:
    """Skills of one folder by name; tools by name across all skills.

    A folder whose edit breaks it keeps serving its last good version, and the error is kept
    in ``errors`` until it is fixed.

    Args:
        directory: The folder.
        owners: Where the owner of each tool name is kept across restarts; ``None``: in
            memory only.
        extra: Skill folders from elsewhere, loaded as if they had just been dropped into
            ``directory`` (a candidate checked against the installed skills, nothing
            copied): one takes the place of the folder's skill of its name, and is newer
            than every skill of the folder (a tool name no record gives goes to theirs).
    """

    def __init__(
        self, directory: Path, owners: OwnersFile | None = None, extra: Iterable[Path] = ()
    ) -> None:
        self.directory = directory
        self.extra = tuple(extra)
        self._owners_file = owners
        self._owners = owners.read() if owners is not None else {}  # tool → skill
        self.version = 0
        self._lock = threading.RLock()
        self._skills: dict[str, Skill] = {}
        self._tools: dict[str, tuple[Skill, ToolSpec]] = {}
        self._changing: frozenset[str] = frozenset()  # skills with a side-effecting tool
        self._fingerprints: dict[str, str] = {}
        self._load_errors: list[SkillProblem] = []  # the folders' own, kept until fixed
        self.errors: list[SkillProblem] = []

    def reload(self) -> ReloadReport:
        """Scan the folder; load what is new or changed, drop what is gone."""
        folders = self._folders()
        report = ReloadReport()
        with self._lock:
            skills = dict(self._skills)
            fingerprints: dict[str, str] = {}
            for name, folder in folders.items():
                stamp = fingerprint(folder)
                fingerprints[name] = stamp
                if self._fingerprints.get(name) == stamp and name in skills:
                    continue
                try:
                    skill = load_skill(folder)
                except SkillLoadError as exc:
                    report.errors.extend(exc.problems)
                    continue
                (report.changed if name in skills else report.added).append(name)
                for warning in skill.warnings:
                    log.warning("skill.warning", skill=name, warning=warning)
                skills[name] = skill
            for name in list(skills):
                if name not in folders:
                    del skills[name]
                    report.removed.append(name)
            # Errors of unchanged broken skills stay reported until they are fixed; duplicate
            # tool names are found again at every reload, as the skills around them change.
            kept = [
                p
                for p in self._load_errors
                if p.skill in folders
                and self._fingerprints.get(p.skill) == fingerprints.get(p.skill)
            ]
            load_errors = [*kept, *report.errors]
            errors = list(load_errors)
            newcomers = frozenset(p.name for p in self.extra)
            tools, duplicates, owners = _tool_table(skills, folders, self._owners, newcomers)
            for skill_name in duplicates:
                report.errors.extend(duplicates[skill_name])
                errors.extend(duplicates[skill_name])
                skills.pop(skill_name, None)
                for listed in (report.added, report.changed):
                    if skill_name in listed:
                        listed.remove(skill_name)
            self._skills, self._tools = skills, tools
            self._changing = frozenset(
                name
                for name, skill in skills.items()
                if any(tool.side_effects for tool in skill.config.tools)
            )
            # Logged once per change of a skill's folder: a problem of a folder unchanged
            # since the last reload, found again (a broken folder is read again each time;
            # a duplicate name is found again), was told already.
            told = set(self.errors)
            news = [
                p
                for p in _unique(report.errors)
                if p not in told or self._fingerprints.get(p.skill) != fingerprints.get(p.skill)
            ]
            self._fingerprints, self.errors = fingerprints, _unique(errors)
            self._load_errors = _unique(load_errors)
            if owners != self._owners:
                self._owners = owners
                if self._owners_file is not None:
                    self._owners_file.save(owners)
            if report.changed_anything:
                self.version += 1
        for problem in news:
            log.warning(
                "skill.invalid",
                skill=problem.skill,
                file=problem.file,
                field=problem.field,
                error=problem.message,
            )
        if report.changed_anything:
            # Counts and the first few names: a start-up with 1,000 skills is one short line.
            log.info(
                "skills.reloaded",
                added=len(report.added),
                changed=len(report.changed),
                removed=len(report.removed),
                total=len(self._skills),
                **{
                    f"{what}_names": _first(names)
                    for what, names in (
                        ("added", report.added),
                        ("changed", report.changed),
                        ("removed", report.removed),
                    )
                    if names
                },
            )
        return report

    def _folders(self) -> dict[str, Path]:
        return {**skill_folders(self.directory), **{p.name: p for p in self.extra}}

    def get(self, name: str) -> Skill:
        """The skill by name; raises SkillNotFound naming close matches, or why a folder of
        that name did not load."""
        with self._lock:
            try:
                return self._skills[name]
            except KeyError:
                reason = self.not_loaded(name)
                raise SkillNotFound("skill", name, list(self._skills), reason) from None

    def not_loaded(self, name: str) -> str:
        """Why skill ``name``'s folder did not load (its problems, with where), or ""."""
        problems = [p for p in self.errors if p.skill == name]
        if not problems:
            return ""
        said = "; ".join(str(p).removeprefix(f"skill {name!r}, ") for p in problems[:3])
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        return f"its folder did not load: {said}{more}"

    def tool(self, name: str) -> tuple[Skill, ToolSpec]:
        """The skill and spec of a tool by its (globally unique) name."""
        with self._lock:
            try:
                return self._tools[name]
            except KeyError:
                raise SkillNotFound("tool", name, list(self._tools)) from None

    def changes_anything(self, names: Iterable[str] | None = None) -> bool:
        """Whether any of the skills ``names`` (None: any installed skill) has a tool with
        side effects."""
        changing = self._changing
        return bool(changing) if names is None else not changing.isdisjoint(names)

    def all(self) -> list[Skill]:
        """Every live skill, by name."""
        with self._lock:
            return [self._skills[k] for k in sorted(self._skills)]

    def __contains__(self, name: object) -> bool:
        return name in self._skills

    def __len__(self) -> int:
        return len(self._skills)


def skill_folders(directory: Path) -> dict[str, Path]:
    """The skill folders of ``directory`` by name, as the service reads them: not those
    whose name starts with ``.`` or ``_`` (hidden, or put aside)."""
    if not directory.is_dir():
        return {}
    return {
        p.name: p
        for p in sorted(directory.iterdir())
        if p.is_dir() and not p.name.startswith((".", "_"))
    }


def _tool_table(
    skills: dict[str, Skill],
    folders: dict[str, Path],
    recorded: dict[str, str],
    newcomers: frozenset[str] = frozenset(),
) -> tuple[dict[str, tuple[Skill, ToolSpec]], dict[str, list[SkillProblem]], dict[str, str]]:
    """Tools by name, the skills refused, and each tool's owner.

    A skill that owns a tool keeps it: a newcomer declaring the same name is refused,
    whatever the alphabetical order, also after a restart (``recorded``, from the owners
    file) and while the owner's folder is there but does not load. A name nobody owns goes
    to the skill defined longest ago (``_defined``; ``newcomers``, just dropped in, after
    every other), then by name.
    """
    held = {
        tool: owner
        for tool, owner in recorded.items()
        if owner in folders
        and (owner not in skills or any(t.name == tool for t in skills[owner].tools))
    }
    incumbents = set(held.values())
    order = sorted(
        skills, key=lambda n: (n not in incumbents, n in newcomers, _defined(folders[n]), n)
    )
    tools: dict[str, tuple[Skill, ToolSpec]] = {}
    duplicates: dict[str, list[SkillProblem]] = {}
    for name in order:
        skill = skills[name]
        clash = {
            t.name: tools[t.name][0].name if t.name in tools else held[t.name]
            for t in skill.tools
            if t.name in tools or held.get(t.name, name) != name
        }
        if clash:
            duplicates[name] = [
                SkillProblem(
                    name,
                    "skill.yaml",
                    f"tools ({tool})",
                    f"tool name {tool!r} is already defined by skill {owner!r}; "
                    "tool names are global — rename it",
                )
                for tool, owner in clash.items()
            ]
            continue
        for tool in skill.tools:
            tools[tool.name] = (skill, tool)
    return tools, duplicates, {**held, **{t: skill.name for t, (skill, _) in tools.items()}}


def _defined(folder: Path) -> int:
    """When a skill was defined, as far as the folder tells: the older modification time of
    its SKILL.md and skill.yaml (ns)."""
    times = []
    for name in (SKILL_FILE, CONFIG_FILE):
        with contextlib.suppress(OSError):
            times.append((folder / name).stat().st_mtime_ns)
    return min(times, default=0)


def _unique(problems: list[SkillProblem]) -> list[SkillProblem]:
    seen: set[SkillProblem] = set()
    out = []
    for p in problems:
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def _first(names: list[str], most: int = 5) -> str:
    """The first ``most`` names, and how many more there are."""
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more"
