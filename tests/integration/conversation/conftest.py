"""Services over the shop-floor skills and the scripted model, for the graph's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.services import Services, open_services
from tests.integration.conversation.kit import make_skills
from tests.skillkit import write_skill


@pytest.fixture
async def services(model_settings: Any, tmp_path: Path) -> AsyncIterator[Services]:
    """Services over the shop-floor skills, with embeddings, answering from ``fake_llm``."""
    settings = model_settings.model_copy(
        update={"skills_dir": make_skills(tmp_path / "skills"), "skills_embeddings": True}
    )
    async with open_services(settings) as opened:
        yield opened


@pytest.fixture
async def fan_out(model_settings: Any, tmp_path: Path) -> AsyncIterator[Services]:
    """Services that give every request its own expert (no joint expert)."""
    settings = model_settings.model_copy(
        update={
            "skills_dir": make_skills(tmp_path / "skills"),
            "skills_embeddings": True,
            "joint_expert_tokens": 0,
        }
    )
    async with open_services(settings) as opened:
        yield opened


@pytest.fixture
async def no_offers(model_settings: Any, tmp_path: Path) -> AsyncIterator[Services]:
    """Services whose router offers no candidates to experts (a tie-break call decides)."""
    settings = model_settings.model_copy(
        update={
            "skills_dir": make_skills(tmp_path / "skills"),
            "skills_embeddings": True,
            "route_offer_tokens": 0,
        }
    )
    async with open_services(settings) as opened:
        yield opened


NEAR_DUPLICATES = {
    "repair-lookup": "Look up repair records and related lubrication details for the maintenance "
    "team. Use when a user asks to look up a repair.",
    "repair-summary": "Summarise repair records and related lubrication details for the "
    "maintenance team. Use when a user asks to summarise a repair.",
    "benefits-lookup": "Look up benefits records and related leave details for the hr team. Use "
    "when a user asks to look up benefits.",
    "benefits-summary": "Summarise benefits records and related leave details for the hr team. "
    "Use when a user asks to summarise benefits.",
}


@pytest.fixture
async def near_duplicates(model_settings: Any, tmp_path: Path) -> AsyncIterator[Services]:
    """Services over skills that differ by one verb (as catalogues of generated skills do)."""
    for name, description in NEAR_DUPLICATES.items():
        write_skill(tmp_path / "skills", name, description, body=f"Answer with {name}.")
    settings = model_settings.model_copy(
        update={"skills_dir": tmp_path / "skills", "skills_embeddings": True}
    )
    async with open_services(settings) as opened:
        yield opened
