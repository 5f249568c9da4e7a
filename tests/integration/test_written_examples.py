"""Examples the configured model writes for skills that have none: written in the background
after start-up, once per skill version (cached by content hash across restarts), indexed for
dense retrieval; skills with examples of their own, and a service with no model, ask nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agents.models import ModelGateway
from agents.prompts import Prompts
from agents.skills.written import WrittenExamples
from app.services import Services, open_services
from tests.fakellm import FakeLLM, Reply, RequestView, ToolCall
from tests.skillkit import write_skill

TIDES = "High and low water times for harbours."
WRITTEN = ["when does the water come in at Brighton pier", "is it low tide in Dover at 6 pm"]


def writes_examples(request: RequestView) -> Reply:
    """The model writes two examples for the tide skill (the request names the skill)."""
    assert request.last_user == "tide-tables", request.describe()
    assert request.system_contains(TIDES)
    return Reply(tool_calls=[ToolCall("write_examples", {"examples": WRITTEN})])


async def written(services: Services, name: str) -> tuple[str, ...]:
    """The skill's model-written examples once the background writer has indexed them."""
    for _ in range(200):
        found = services.skills.written(name)
        if found:
            return found
        await asyncio.sleep(0.05)
    return ()


def settings_for(model_settings: Any, skills: Path) -> Any:
    return model_settings.model_copy(
        update={"skills_dir": skills, "skills_embeddings": True, "skills_write_examples": True}
    )


async def test_the_model_writes_examples_once_per_skill_version_and_retrieval_uses_them(
    model_settings: Any, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    skills = tmp_path / "skills"
    write_skill(skills, "tide-tables", TIDES)
    own = {"examples": ["show me my payslip for March"]}
    write_skill(skills, "payslips", "Monthly salary statements of employees.", config=own)
    fake_llm.on_forced_tool("write_examples", writes_examples)
    settings = settings_for(model_settings, skills)

    async with open_services(settings) as services:
        assert await written(services, "tide-tables") == tuple(WRITTEN)
        [hit, *_] = services.skills.search("when does the water come in at Brighton pier")
        assert (hit.name, hit.dense > 0.99) == ("tide-tables", True)
        assert services.skills.written("payslips") == ()  # it has examples of its own
    assert len(fake_llm.forced_requests) == 1

    # A restart finds them in the cache: the model is not asked again.
    async with open_services(settings) as services:
        assert await written(services, "tide-tables") == tuple(WRITTEN)
    assert len(fake_llm.forced_requests) == 1

    # A new version of the skill gets examples of its own.
    write_skill(skills, "tide-tables", TIDES + " Use when someone sails or fishes.")
    async with open_services(settings) as services:
        assert await written(services, "tide-tables") == tuple(WRITTEN)
    assert len(fake_llm.forced_requests) == 2


async def test_a_failed_call_leaves_the_skill_without_examples_and_the_service_answering(
    model_settings: Any, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    skills = tmp_path / "skills"
    write_skill(skills, "tide-tables", TIDES)
    fake_llm.on_forced_tool("write_examples", Reply(status=500, error_message="overloaded"))
    async with open_services(settings_for(model_settings, skills)) as services:
        for _ in range(200):
            if fake_llm.forced_requests:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        assert fake_llm.forced_requests  # asked (and retried by the gateway), then gave up
        assert services.skills.written("tide-tables") == ()
        [hit] = services.skills.search("high water in the harbour")
        assert hit.name == "tide-tables"


async def test_no_model_writes_nothing() -> None:
    writer = WrittenExamples(None, ModelGateway(None), Prompts())
    applied: list[Any] = []
    await writer.fill([], applied.append)
    assert (writer.enabled, applied) == (False, [])
