"""Read one skill folder (tier 1: frontmatter and skill.yaml only; no handler is imported)."""

from __future__ import annotations

import ast
import hashlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from agents import yamlsafe
from agents.errors import SkillLoadError, SkillProblem
from agents.skills.schemas import SchemaError
from agents.skills.spec import (
    COMPATIBILITY_LIMIT,
    DESCRIPTION_LIMIT,
    HANDLER_PATTERN,
    TOOL_NAME_PATTERN,
    Frontmatter,
    SkillConfig,
    ToolSpec,
    is_valid_name,
)

SKILL_FILE = "SKILL.md"
CONFIG_FILE = "skill.yaml"
REFERENCE_DIRS = ("references", "reference")


@dataclass(frozen=True)
class Skill:
    """A loaded skill, as the index and the definition tier see it."""

    name: str
    description: str
    path: Path
    frontmatter: Frontmatter
    config: SkillConfig
    fingerprint: str
    references: tuple[str, ...] = field(default=())
    warnings: tuple[str, ...] = field(default=())  # loaded, but something was left out
    # References left out (links that leave the folder, past the cap), as problems: what
    # `skilldesk skills validate` and `GET /v1/skills` list among the warnings.
    left_out: tuple[SkillProblem, ...] = field(default=())
    # Limits of the Agent Skills spec this skill breaks while still usable (it loads, as
    # other hosts load it; `skilldesk skills validate --strict` fails it).
    deviations: tuple[SkillProblem, ...] = field(default=())
    # The folder's Python files as they were when it loaded (relative path: source), which
    # its handlers are imported from: a broken edit keeps this version serving, even in a
    # worker started after it (``agents.skills.importing.import_handler``). Empty for a skill
    # without handlers, or with more code than ``MAX_CODE_BYTES`` (imported from the folder).
    code: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def all_warnings(self) -> tuple[SkillProblem, ...]:
        """What loaded with a warning: references left out, the spec's limits broken."""
        return (*self.left_out, *self.deviations)

    @property
    def tools(self) -> tuple[ToolSpec, ...]:
        """The functions this skill offers."""
        return self.config.tools

    @property
    def instruction_only(self) -> bool:
        """A skill with no tools: the model follows its instructions alone."""
        return not self.config.tools

    def index_text(self) -> str:
        """What retrieval sees: name, description, triggers and examples."""
        parts = [
            self.name.replace("-", " "),
            self.description,
            *self.config.triggers,
            *self.config.examples,
        ]
        return "\n".join(parts)

    def body(self) -> str:
        """The SKILL.md instructions (tier 2: read on demand, not at start-up; read again
        only when the file changed, looked at most once every ``BODY_CHECK_S``)."""
        path = self.path / SKILL_FILE
        now = time.monotonic()
        known = _BODIES.get(path)
        if known is not None and now - known[1] < BODY_CHECK_S:
            return known[2]
        stat = path.stat()
        version = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if known is not None and known[0] == version:
            _BODIES[path] = (version, now, known[2])
            return known[2]
        body = split_frontmatter(path.read_text(encoding="utf-8"))[1].strip()
        _BODIES[path] = (version, now, body)
        return body


# SKILL.md bodies by file, with the (mtime, size, inode) they were read at and when that was
# last looked at: an expert's prompt needs its skill's body once or twice a turn, and under
# load even a stat a turn shows (a system call, the GIL let go and taken back).
_BODIES: dict[Path, tuple[tuple[int, int, int], float, str]] = {}
BODY_CHECK_S = 1.0


MAX_CODE_BYTES = 4 * 1024 * 1024


def code_of(folder: Path) -> dict[str, str]:
    """The folder's Python files (relative path: source), or none past ``MAX_CODE_BYTES``
    or when one cannot be read (the handlers' check reports what is wrong)."""
    code: dict[str, str] = {}
    size = 0
    for path in sorted(folder.rglob("*.py")):
        if "__pycache__" in path.parts or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return {}
        size += len(text)
        if size > MAX_CODE_BYTES:
            return {}
        code[path.relative_to(folder).as_posix()] = text
    return code


def fingerprint(folder: Path) -> str:
    """Cheap change detector for a folder: names, sizes and mtimes of its files."""
    digest = hashlib.sha1()
    for path in sorted(
        p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    ):
        stat = path.stat()
        digest.update(f"{path.relative_to(folder)}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def split_frontmatter(text: str) -> tuple[str | None, str]:
    """Split ``---`` YAML frontmatter from the Markdown body."""
    text = text.removeprefix("\ufeff")
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None, text
    for i, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            return "".join(lines[1:i]), "".join(lines[i + 1 :])
    return None, text


def _read_frontmatter(path: Path) -> str | None:
    # Reads only up to the closing '---': the body is tier 2.
    with path.open(encoding="utf-8") as handle:
        first = handle.readline().removeprefix("\ufeff")
        if first.strip() != "---":
            return None
        collected: list[str] = []
        for line in handle:
            if line.strip() == "---":
                return "".join(collected)
            collected.append(line)
    return None


def load_skill(folder: Path) -> Skill:
    """Load one skill folder.

    Raises:
        SkillLoadError: listing every problem, each naming the file, the field and the fix.
    """
    name = folder.name
    problems: list[SkillProblem] = []
    # Stamped first, then the code read (below), then checked from what was read: an edit
    # made meanwhile changes the stamp after this one, and the next reload takes it.
    stamp = fingerprint(folder)

    def problem(file: str, field_: str, message: str) -> None:
        problems.append(SkillProblem(name, file, field_, message))

    skill_md = folder / SKILL_FILE
    _BODIES.pop(skill_md, None)  # a skill loaded (again) reads its body afresh
    if not skill_md.is_file():
        problem(
            SKILL_FILE,
            "",
            f"missing; every skill folder needs a {SKILL_FILE} with "
            "frontmatter (name, description) — `skilldesk skills new NAME` scaffolds one",
        )
        raise SkillLoadError(problems)
    try:
        raw = _read_frontmatter(skill_md)
    except UnicodeDecodeError:
        problem(SKILL_FILE, "", "is not UTF-8 text; save it as UTF-8")
        raise SkillLoadError(problems) from None
    if raw is None:
        problem(
            SKILL_FILE,
            "frontmatter",
            "no YAML frontmatter; start the file with '---', "
            "then 'name:' and 'description:' lines, then '---'",
        )
        raise SkillLoadError(problems)
    deviations: list[SkillProblem] = []
    frontmatter = _parse_frontmatter(raw, problem, name, deviations)
    if frontmatter is not None and frontmatter.name != name:
        fix = (
            "rename one"
            if is_valid_name(name)
            else f"rename the folder to {frontmatter.name!r} (a folder's name is the skill's: "
            "lowercase letters, digits and single hyphens)"
        )
        problem(
            SKILL_FILE,
            "name",
            f"is {frontmatter.name!r} but the folder is {name!r}; "
            f"the Agent Skills format requires them to be equal — {fix}",
        )
    config = _parse_config(folder, problem)
    code = code_of(folder) if config is not None and config.tools else {}
    if config is not None:
        _check_handlers(folder, config, problem, code)
    if problems or frontmatter is None or config is None:
        raise SkillLoadError(problems)
    references, warnings = list_references(folder)
    return Skill(
        name=name,
        description=frontmatter.description.strip(),
        path=folder,
        frontmatter=frontmatter,
        config=config,
        fingerprint=stamp,
        references=references,
        warnings=(*warnings, *(str(d) for d in deviations)),
        left_out=tuple(SkillProblem(name, "references", "", w) for w in warnings),
        deviations=tuple(deviations),
        code=code,
    )


MAX_REFERENCES = 200
MAX_REFERENCE_NAMES_CHARS = 8_000  # the list goes into prompts and error messages


def list_references(folder: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A skill's reference documents (paths relative to its folder), and what was left out.

    Only files inside the skill's folder are listed: no link that leaves it is followed
    (a ``references/`` that links to a system folder would put thousands of foreign names
    in every prompt). The list is capped in count and in characters.
    """
    root = folder.resolve()
    found: list[str] = []
    warnings: list[str] = []
    for directory in REFERENCE_DIRS:
        base = folder / directory
        if not base.is_dir():
            continue
        if not base.resolve().is_relative_to(root):
            warnings.append(f"{directory}/ links outside the skill's folder; it is not listed")
            continue
        for current, dirs, files in os.walk(base):  # links to folders are not descended
            dirs.sort()
            for name in dirs:
                path = Path(current) / name
                if path.is_symlink() and not path.resolve().is_relative_to(root):
                    warnings.append(
                        f"{path.relative_to(folder)}/ links outside the skill's folder; "
                        "it is not listed"
                    )
            for name in sorted(files):
                path = Path(current) / name
                if not path.resolve().is_relative_to(root):
                    warnings.append(f"{path.relative_to(folder)} links outside the skill's folder")
                elif path.is_file():
                    found.append(str(path.relative_to(folder)))
    kept: list[str] = []
    chars = 0
    for name in found:
        chars += len(name) + 2
        if len(kept) >= MAX_REFERENCES or chars > MAX_REFERENCE_NAMES_CHARS:
            warnings.append(
                f"{len(found) - len(kept)} of {len(found)} references are not listed (at most "
                f"{MAX_REFERENCES}, {MAX_REFERENCE_NAMES_CHARS:,} characters of names)"
            )
            break
        kept.append(name)
    return tuple(kept), tuple(warnings)


def _parse_frontmatter(
    raw: str, problem: Any, folder: str, deviations: list[SkillProblem]
) -> Frontmatter | None:
    try:
        data = yamlsafe.load(raw)
    except yamlsafe.YamlRefused as exc:  # lines of SKILL.md: the frontmatter starts at 2
        problem(SKILL_FILE, "frontmatter", f"{exc.reason} (line {exc.line + 1})")
        return None
    except yaml.YAMLError as exc:
        problem(SKILL_FILE, "frontmatter", f"is not valid YAML: {yamlsafe.reason(exc, 1)}")
        return None
    if not isinstance(data, dict):
        problem(SKILL_FILE, "frontmatter", "must be a YAML mapping with name and description")
        return None
    deviations.extend(_tolerated(data, folder))
    try:
        return Frontmatter.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            problem(SKILL_FILE, _loc(err["loc"]), _message(err))
        return None


def _tolerated(data: dict[str, Any], folder: str) -> list[SkillProblem]:
    """Limits of the spec that a usable skill breaks, each a warning naming the field and
    the fix (as the reference ``skills-ref`` validator reports them); ``data`` is mended
    where the skill is served otherwise (a name in another case is served as its folder's)."""
    found: list[SkillProblem] = []

    def deviation(field_: str, message: str) -> None:
        found.append(SkillProblem(folder, SKILL_FILE, field_, message))

    name = data.get("name")
    in_another_case = isinstance(name, str) and name != folder and name.lower() == folder
    if in_another_case and is_valid_name(folder):
        deviation(
            "name",
            f"is {name!r}, the folder {folder!r} in another case; served as {folder!r} — "
            "write the name in lowercase, as the folder",
        )
        data["name"] = folder
    description = data.get("description")
    if isinstance(description, str) and len(description.strip()) > DESCRIPTION_LIMIT:
        deviation(
            "description",
            f"has {len(description.strip()):,} characters, over the spec's "
            f"{DESCRIPTION_LIMIT:,}; loaded whole — shorten it to {DESCRIPTION_LIMIT:,} "
            "or fewer (move details into the body) so that every host accepts it",
        )
    compatibility = data.get("compatibility")
    if isinstance(compatibility, str) and len(compatibility) > COMPATIBILITY_LIMIT:
        deviation(
            "compatibility",
            f"has {len(compatibility):,} characters, over the spec's {COMPATIBILITY_LIMIT}; "
            f"shorten it to {COMPATIBILITY_LIMIT} or fewer",
        )
    return found


def _parse_config(folder: Path, problem: Any) -> SkillConfig | None:
    path = folder / CONFIG_FILE
    if not path.is_file():
        return SkillConfig()
    try:
        # An alias inside its own anchor is left to the tool schemas' check, which names
        # the place in the schema; anything else with one fails its field's type.
        data = yamlsafe.load(path.read_text(encoding="utf-8"), cycles=True) or {}
    except yamlsafe.YamlRefused as exc:
        problem(CONFIG_FILE, "", str(exc))
        return None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        reason = yamlsafe.reason(exc) if isinstance(exc, yaml.YAMLError) else "not UTF-8"
        problem(CONFIG_FILE, "", f"is not valid YAML: {reason}")
        return None
    if not isinstance(data, dict):
        problem(CONFIG_FILE, "", "must be a YAML mapping (triggers, examples, tools...)")
        return None
    try:
        return SkillConfig.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            cause = err.get("ctx", {}).get("error")
            if isinstance(cause, SchemaError):  # a tool schema: each place within it
                for within, message in cause.problems:
                    problem(CONFIG_FILE, _loc((*err["loc"], *within), data), message)
            else:
                problem(CONFIG_FILE, _loc(err["loc"], data), _message(err))
        return None


def _check_handlers(
    folder: Path, config: SkillConfig, problem: Any, code: dict[str, str] | None = None
) -> None:
    """Resolve each 'module:function' statically (ast), so nothing is imported at start-up;
    from ``code`` (``code_of``) where it holds the module: what its handlers will run."""
    parsed: dict[str, set[str] | str] = {}
    for i, tool in enumerate(config.tools):
        module, function = tool.handler.split(":")
        file = Path(*module.split(".")).with_suffix(".py")
        first = module not in parsed
        if first:
            parsed[module] = _functions(folder / file, (code or {}).get(file.as_posix()))
        functions = parsed[module]
        where = f"tools[{i}].handler"
        if isinstance(functions, str):
            if first:  # a module that does not parse is one problem, not one per tool
                problem(CONFIG_FILE, where, f"{tool.handler!r}: {file} {functions}")
        elif function not in functions:
            problem(
                CONFIG_FILE,
                where,
                f"{tool.handler!r}: {file} defines no top-level "
                f"function {function!r}; define it or fix the name",
            )
    for broken, why in _broken_siblings(code or {}, list(parsed)):
        problem(broken, "", why)


def _broken_siblings(code: dict[str, str], handlers: list[str]) -> list[tuple[str, str]]:
    """The modules of the skill's folder that its handler modules import relatively
    (``from .helper import x``), directly or through one another, and that do not parse:
    (file, why). Checked with the handlers, so that a broken helper is reported when the
    skill loads (its last good version serving on) rather than failing its tool calls."""
    broken: list[tuple[str, str]] = []
    seen: set[str] = set()
    todo = list(handlers)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        file = next(
            (f for f in ("/".join(parts) + ".py", "/".join([*parts, "__init__.py"])) if f in code),
            None,
        )
        if file is None:
            continue
        try:
            tree = ast.parse(code[file], filename=file)
        except SyntaxError as exc:
            why = f"does not parse: {exc.msg} (line {exc.lineno}); a handler imports it, fix it"
            if module not in handlers:  # a handler module's own is reported with its tool
                broken.append((file, why))
            continue
        package = parts if file.rpartition("/")[2] == "__init__.py" else parts[:-1]
        for node in _run_at_import(tree.body):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            if node.level - 1 > len(package):
                continue  # beyond the skill's package: the import fails at the call
            target = [*package[: len(package) - node.level + 1], *(node.module or "").split(".")]
            target = [t for t in target if t]
            todo += [".".join(target[:n]) for n in range(1, len(target) + 1)]
            todo += [".".join([*target, alias.name]) for alias in node.names]
    return broken


def _run_at_import(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements a module runs when it is imported: its top level, into the blocks of
    ``if``, ``try``, ``with`` and class bodies, not into functions (imports there may never
    run) nor ``if TYPE_CHECKING:`` blocks."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name != "TYPE_CHECKING":
                yield from _run_at_import(node.body)
            yield from _run_at_import(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse):
                yield from _run_at_import(block)
            yield from _run_at_import(node.finalbody)
        elif isinstance(node, ast.With | ast.ClassDef):
            yield from _run_at_import(node.body)


def _functions(path: Path, text: str | None = None) -> set[str] | str:
    """The top-level names a handler module (``text``, else read) defines, or why it cannot
    be read."""
    try:
        source = path.read_text(encoding="utf-8") if text is None else text
        tree = ast.parse(source, filename=str(path))
    except FileNotFoundError:
        return "is missing; create it or fix the reference"
    except SyntaxError as exc:
        return f"does not parse: {exc.msg} (line {exc.lineno}); fix the code"
    except UnicodeDecodeError:
        return "is not UTF-8 text; save it as UTF-8"
    except OSError as exc:
        return f"cannot be read ({exc.strerror}); fix the file"
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    names |= {
        t.id
        for n in tree.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    return names


def _loc(loc: tuple[int | str, ...], data: Any = None) -> str:
    out = ""
    node = data
    for part in loc:
        if isinstance(part, int):
            label = ""
            if isinstance(node, list) and part < len(node) and isinstance(node[part], dict):
                label = f" ({node[part].get('name')})" if node[part].get("name") else ""
            out += f"[{part}]{label}"
        else:
            out += f".{part}" if out else str(part)
        try:
            node = node[part] if node is not None else None
        except (KeyError, IndexError, TypeError):
            node = None
    return out


def _message(err: Any) -> str:
    msg = yamlsafe.validation_message(err)
    if err["type"] == "missing":
        return "is required"
    if err["type"] == "extra_forbidden":
        return "is not a known field; check its spelling (see skill.schema.json)"
    pattern = (err.get("ctx") or {}).get("pattern")
    if err["type"] == "string_pattern_mismatch" and pattern == TOOL_NAME_PATTERN:
        given = str(err.get("input"))
        return (
            f"{given!r} is not valid: a letter or underscore first, then letters, digits, "
            f"underscores and hyphens, 64 characters at most (it has {len(given)})"
        )
    if err["type"] == "string_pattern_mismatch" and pattern == HANDLER_PATTERN:
        return (
            f"{err.get('input')!r} is not valid: write 'module:function', the module a Python "
            "file of the skill folder without '.py' (dots for a subfolder), e.g. "
            "'handler:get_order' for get_order in handler.py"
        )
    if err["type"] == "string_pattern_mismatch" and err["loc"][-1] == "name":
        return (
            f"{err.get('input')!r} is not valid: use lowercase letters, digits and single hyphens"
        )
    return msg
