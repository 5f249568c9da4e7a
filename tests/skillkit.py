"""Helpers to put skill folders in tests: copies of the fixture skills, or odd ones written
on the spot."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import textwrap
from pathlib import Path
from typing import Any

import yaml

from tests.fakellm.request import SkillSignature

FIXTURE_SKILLS = Path(__file__).parent / "fixtures" / "skills"
"""Fixture skills as real folders, by set: ``shop-floor/`` (the conversation graph),
``storefront/`` (skills over HTTP), ``runner/`` (the tool runner). Each set is a valid
skills folder; its handlers are checked by ruff and mypy like any code."""


def copy_fixture_skill(root: Path, fixture: str, name: str | None = None) -> Path:
    """Copy the fixture skill ``fixture`` (e.g. ``"shop-floor/order-lookup"``) into ``root``.

    Args:
        root: The skills folder of the test (created if missing).
        fixture: The skill's path under ``tests/fixtures/skills``.
        name: Another name for the copy: its folder and its frontmatter ``name``.

    Returns:
        The copied skill's folder.
    """
    source = FIXTURE_SKILLS / fixture
    if not (source / "SKILL.md").is_file():
        known = sorted(str(p.parent.relative_to(FIXTURE_SKILLS)) for p in _skill_files())
        raise FileNotFoundError(f"no fixture skill {fixture!r}; there are: {', '.join(known)}")
    folder = root / (name or source.name)
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("__pycache__"))
    if name and name != source.name:
        meta, body = _split(folder / "SKILL.md")
        meta["name"] = name
        _write_skill_md(folder / "SKILL.md", meta, body)
    return folder


def copy_fixture_skills(root: Path, kit: str) -> Path:
    """Copy every skill of the fixture set ``kit`` (e.g. ``"shop-floor"``) into ``root``."""
    for skill_md in sorted((FIXTURE_SKILLS / kit).glob("*/SKILL.md")):
        copy_fixture_skill(root, f"{kit}/{skill_md.parent.name}")
    return root


def signature(folder: Path) -> SkillSignature:
    """What a scripted model recognises the skill in ``folder`` by: its name, its SKILL.md
    instructions and its tools' names (from ``skill.yaml``)."""
    meta, body = _split(folder / "SKILL.md")
    config_file = folder / "skill.yaml"
    config = (
        yaml.safe_load(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
    )
    tools = tuple(str(t["name"]) for t in (config or {}).get("tools", []))
    return SkillSignature(name=str(meta["name"]), instructions=body, tools=tools)


def _skill_files() -> list[Path]:
    return sorted(FIXTURE_SKILLS.glob("*/*/SKILL.md"))


def _split(skill_md: Path) -> tuple[dict[str, Any], str]:
    """The frontmatter and the stripped body of a SKILL.md."""
    _, frontmatter, body = skill_md.read_text(encoding="utf-8").split("---\n", 2)
    return dict(yaml.safe_load(frontmatter)), body.strip()


def _write_skill_md(path: Path, meta: dict[str, Any], body: str) -> None:
    path.write_text(
        f"---\n{yaml.safe_dump(meta, allow_unicode=True)}---\n\n{body}\n", encoding="utf-8"
    )


def write_skill(
    root: Path,
    name: str,
    description: str = "Does a thing. Use when the user asks for the thing.",
    *,
    body: str = "Follow these steps.",
    config: dict[str, Any] | None = None,
    handler: str | None = None,
    frontmatter: dict[str, Any] | None = None,
    files: dict[str, str] | None = None,
) -> Path:
    """Create ``root/name`` with SKILL.md (and skill.yaml, handler.py, extra files)."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"name": name, "description": description, **(frontmatter or {})}
    _write_skill_md(folder / "SKILL.md", meta, body)
    if config is not None:
        (folder / "skill.yaml").write_text(
            yaml.safe_dump(config, allow_unicode=True), encoding="utf-8"
        )
    if handler is not None:
        (folder / "handler.py").write_text(textwrap.dedent(handler), encoding="utf-8")
    for rel, text in (files or {}).items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return folder


def tool(
    name: str,
    handler: str,
    properties: dict[str, Any] | None = None,
    required: list[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A skill.yaml tool entry."""
    return {
        "name": name,
        "description": f"The {name} tool.",
        "handler": handler,
        "parameters": {
            "type": "object",
            "properties": properties or {},
            "required": required or [],
            "additionalProperties": False,
        },
        **extra,
    }


class HashingEmbedder:
    """A deterministic bag-of-words embedder for fast unit tests (not semantic)."""

    model_id = "hashing-test"
    dimension = 64

    def __init__(self) -> None:
        self.calls = 0
        self.texts = 0

    def encode(self, texts: Any) -> Any:
        import zlib

        import numpy as np

        from agents.skills.bm25 import tokenize

        self.calls += 1
        self.texts += len(texts)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in tokenize(text):
                out[row, zlib.crc32(token.encode()) % self.dimension] += 1.0
            norm = float(np.linalg.norm(out[row]))
            if norm:
                out[row] /= norm
        return out


def router_picks(fake: Any, skill: str) -> None:
    """Make the scripted model answer the router's tie-break with ``skill`` (or "none")."""
    from tests.fakellm import Reply, ToolCall

    fake.on_forced_tool(
        "choose_route",
        lambda request: Reply(tool_calls=[ToolCall("choose_route", {"skill": skill})]),
    )


def process_runs(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def still_runs(pid: int, within_s: float = 3.0) -> bool:
    """Whether process ``pid`` still runs after ``within_s``; one that does is killed then,
    so that a failing test does not leave it to slow the tests after it."""
    for _ in range(int(within_s / 0.1)):
        if not process_runs(pid):
            return False
        await asyncio.sleep(0.1)
    running = process_runs(pid)
    if running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return running
