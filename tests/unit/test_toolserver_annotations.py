"""What the tool server claims about a skill's tool (MCP annotations): only what its
skill.yaml says; a field left out is no safety claim."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from agents.prompts import Prompts
from agents.skills.service import SkillService, SkillsOptions
from agents.toolserver.catalogue import ToolCatalogue
from app.mcp.server import Sessions, build_server
from tests.bundledkit import SKILLS
from tests.skillkit import tool, write_skill

ECHO = "def echo(**values):\n    return values\n"


async def served(skills: Path, data: Path) -> AsyncIterator[ToolCatalogue]:
    service = SkillService(SkillsOptions(skills, data, embeddings=False))
    service.reload()
    yield ToolCatalogue(service, Prompts())
    await service.aclose()


@pytest.fixture
async def catalogue(tmp_path: Path) -> AsyncIterator[ToolCatalogue]:
    tools = [
        tool("unsaid", "handler:echo"),
        tool("reads", "handler:echo", side_effects=False),
        tool("writes", "handler:echo", side_effects=True, destructive=False),
        tool("caches", "handler:echo", destructive=False, idempotent=True),
    ]
    write_skill(tmp_path / "skills", "store", handler=ECHO, config={"tools": tools})
    async for built in served(tmp_path / "skills", tmp_path / "data"):
        yield built


async def test_a_tool_is_advertised_read_only_only_when_its_skill_yaml_says_so(
    catalogue: ToolCatalogue,
) -> None:
    # QA: a skill.yaml without `side_effects` was advertised `readOnlyHint: true` (the
    # field's default, false, taken for a claim): synthesize_speech, which writes a file.
    async with Client(build_server(catalogue, Sessions())) as client:
        listed = {t.name: t.annotations for t in (await client.list_tools()).tools}
    unsaid, reads, writes = listed["unsaid"], listed["reads"], listed["writes"]
    assert unsaid is not None
    assert unsaid.read_only_hint is None  # nothing claimed, not a claim of false
    assert reads is not None
    assert reads.read_only_hint is True  # `side_effects: false`
    assert writes is not None
    assert (writes.read_only_hint, writes.destructive_hint) == (False, False)
    caches = listed["caches"]  # not read-only, and says it destroys nothing
    assert caches is not None
    assert (caches.read_only_hint, caches.destructive_hint, caches.idempotent_hint) == (
        None,
        False,
        True,
    )


async def test_the_bundled_speech_tool_is_not_advertised_read_only(tmp_path: Path) -> None:
    async for catalogue in served(SKILLS, tmp_path / "data"):
        entries = catalogue.all()
        assert entries["synthesize_speech"].read_only is not True  # it writes a WAV file
        assert entries["create_work_order"].read_only is False
        # Every other bundled tool only reads, and says so.
        readers = [
            e.name
            for e in entries.values()
            if e.kind == "skill" and e.name not in ("synthesize_speech", "create_work_order")
        ]
        assert readers
        assert all(entries[name].read_only is True for name in readers), readers
