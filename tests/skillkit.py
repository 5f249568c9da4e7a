"""Helpers to write skill folders in tests."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import yaml


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
    (folder / "SKILL.md").write_text(
        f"---\n{yaml.safe_dump(meta, allow_unicode=True)}---\n\n{body}\n", encoding="utf-8"
    )
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
        "choose_route", lambda body: Reply(tool_calls=[ToolCall("choose_route", {"skill": skill})])
    )
