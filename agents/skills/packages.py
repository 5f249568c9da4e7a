"""The package a skill's folder is imported as, wherever its handlers run.

Each skill folder becomes a package of its own (``importing.import_handler``), so a handler may
import its siblings relatively and two skills' ``handler`` modules never collide.
"""

from __future__ import annotations

import re

from agents.skills.loader import Skill


def skill_package(skill: Skill) -> str:
    """The package ``skill``'s folder becomes, one per version of the skill."""
    return "_skilldesk_skill_" + re.sub(r"\W", "_", skill.name) + "_" + skill.fingerprint[:8]


def sibling_hint(skill: Skill, error: str) -> str:
    """For a module of the skill's own folder imported as a top-level one (``import
    helpers``): how to import it (the folder is a package, not on ``sys.path``)."""
    found = re.search(r"No module named '([A-Za-z_][A-Za-z0-9_]*)", error)
    if found is None:
        return ""
    name = found.group(1)
    if not ((skill.path / f"{name}.py").is_file() or (skill.path / name).is_dir()):
        return ""
    return f"; {name} is a module of the skill's folder: import it as `from .{name} import ...`"
