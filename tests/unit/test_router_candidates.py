"""Which close candidates the router offers to one expert: the best hit when it reaches the
ambiguous floor, and the next ones within the offer window of it (four at most), wherever the
floor is; below the floor, the general assistant's best hits pre-loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.graph.nodes import REACH, listed_beside
from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.router.router import Route, Router
from agents.run import RunContext
from agents.skills.index import SearchHit, brief
from agents.skills.service import SkillService, SkillsOptions
from tests.skillkit import write_skill

NAMES = ("tide-tables", "harbour-fees", "boat-rental", "ferry-times", "fish-market")


@pytest.fixture
def service(tmp_path: Path) -> SkillService:
    for name in NAMES:
        write_skill(tmp_path / "skills", name, f"Answers questions about {name}.")
    skills = SkillService(SkillsOptions(tmp_path / "skills", tmp_path / "data", embeddings=False))
    skills.reload()
    return skills


async def routed(service: SkillService, scores: tuple[float, ...]) -> Route:
    hits = [SearchHit(n, s, s, s) for n, s in zip(NAMES, scores, strict=False)]
    service.search = lambda query, k=5: hits[:k]  # type: ignore[method-assign]
    return await Router(service, ModelGateway(None), Prompts()).decide("x", RunContext(), {})


async def offered(service: SkillService, scores: tuple[float, ...]) -> tuple[str, ...]:
    route = await routed(service, scores)
    return route.offered if route.kind == "candidates" else ()


async def test_a_hit_far_below_the_best_is_not_offered_beside_it(service: SkillService) -> None:
    assert await offered(service, (0.42, 0.38, 0.27)) == ("tide-tables", "harbour-fees")


async def test_a_hit_just_below_the_floor_is_offered_beside_a_best_just_above_it(
    service: SkillService,
) -> None:
    assert await offered(service, (0.28, 0.24, 0.2)) == NAMES[:3]


async def test_below_the_floor_nothing_is_a_candidate(service: SkillService) -> None:
    assert await offered(service, (0.24, 0.23, 0.2)) == ()


async def test_four_close_candidates_are_offered_together_and_a_fifth_is_not(
    service: SkillService,
) -> None:
    assert await offered(service, (0.4, 0.39, 0.38, 0.37, 0.36)) == NAMES[:4]


async def test_the_general_assistant_gets_its_four_best_hits_pre_loaded(
    service: SkillService,
) -> None:
    route = await routed(service, (0.2, 0.19, 0.18, 0.17, 0.16))
    assert (route.kind, route.offered) == ("general", NAMES[:4])


def test_the_general_assistant_reaches_the_top_five_and_always_lists_the_next_best() -> None:
    assert [n + listed_beside(n) for n in range(REACH)] == [REACH] * REACH
    assert listed_beside(REACH) == 1


def test_a_long_description_is_cut_to_its_first_sentences_and_a_short_one_kept() -> None:
    short = "Looks up orders. Use when the customer asks where an order is."
    assert brief(short) == short
    long = "Data on holidays via API. " + "It has many features, listed here at length. " * 9
    assert (
        brief(long, limit=80)
        == "Data on holidays via API. It has many features, listed here at length."
    )
    assert brief("x" * 400, limit=50) == "x" * 49 + "…"
