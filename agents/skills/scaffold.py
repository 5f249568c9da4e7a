"""``skilldesk skills new``: a folder that validates as it is and shows every part."""

from __future__ import annotations

import os
from pathlib import Path

from agents.skills.spec import is_valid_name

SCHEMA_FILE = Path(__file__).with_name("skill.schema.json")

SKILL_MD = """---
name: {name}
description: Describe what {name} does and when to use it, in one or two sentences.
metadata:
  author: you
  version: "0.1"
---

# {title}

Tell the model how to use this skill:

1. What to ask the user for when information is missing.
2. Which tool to call (`{func}`) and how to present its result.
3. Policies: what it must never do.
"""

SKILL_YAML = """# yaml-language-server: $schema={schema}
triggers: [{name}]
examples:
  - "An utterance that should select {name}"
tools:
  - name: {func}
    description: What the tool does, for the model.
    handler: "handler:{func}"
    timeout_s: 10
    parameters:
      type: object
      properties:
        text: {{type: string, description: "What to work on."}}
      required: [text]
      additionalProperties: false
"""

HANDLER = '''"""Tools of the {name} skill. Imported on the first call of one of them."""


def {func}(text: str) -> dict[str, str]:
    """Return something useful for ``text``."""
    return {{"echo": text}}
'''


def scaffold(skills_dir: Path, name: str) -> Path:
    """Create ``skills_dir/name``; raises ValueError for a bad name or an existing folder."""
    if not is_valid_name(name):
        raise ValueError(
            f"{name!r} is not a valid skill name: use 1-64 lowercase letters, "
            "digits and single hyphens, e.g. 'order-query'"
        )
    folder = skills_dir / name
    if folder.exists():
        raise ValueError(f"{folder} already exists")
    func = name.replace("-", "_") + "_run"
    folder.mkdir(parents=True)
    # The editor's schema hint, relative to wherever the folder is (as the bundled skills'
    # ../../agents/skills/skill.schema.json is).
    schema = Path(os.path.relpath(SCHEMA_FILE, folder.resolve())).as_posix()
    values = {"name": name, "func": func, "title": name.replace("-", " ").title(), "schema": schema}
    (folder / "SKILL.md").write_text(SKILL_MD.format(**values), encoding="utf-8")
    (folder / "skill.yaml").write_text(SKILL_YAML.format(**values), encoding="utf-8")
    (folder / "handler.py").write_text(HANDLER.format(**values), encoding="utf-8")
    return folder
