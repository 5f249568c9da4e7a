"""Skills over HTTP: list, definition, search, and direct tool calls (no model needed)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse

from agents.echo import cut, cut_in
from agents.errors import SkillNotFound
from agents.skills.meta import definition
from app.api.deps import IdempotencyKey, PrincipalDep, ServicesDep, needs
from app.api.errors import ApiError, error_responses
from app.api.routes.tools import invoke
from app.api.schemas.learning import LearnedExamplePublic, LearnedExamplesPublic
from app.api.schemas.skills import (
    SkillDefinitionPublic,
    SkillHitPublic,
    SkillProblemPublic,
    SkillPublic,
    SkillSearchPublic,
    SkillsPublic,
    ToolCallRequest,
    ToolResultPublic,
)

# JSONResponse renders with json.dumps, as before the response models: floats (scores, tool
# results) keep Python's notation, where pydantic's own JSON would write 1e-05 as 0.00001.
router = APIRouter(prefix="/v1/skills", tags=["skills"], default_response_class=JSONResponse)
NO_SKILL = "No such skill (`skill_not_found`; the message suggests a close name)."


@router.get("", responses=error_responses(500))
async def list_skills(services: ServicesDep) -> SkillsPublic:
    """Every live skill (tier 1 summary) and the problems of those that failed to load."""
    registry = services.skills.registry
    return SkillsPublic(
        skills=[
            SkillPublic(
                name=s.name,
                description=s.description,
                pinned=s.config.pinned,
                instruction_only=s.instruction_only,
                tools=[t.name for t in s.tools],
            )
            for s in registry.all()
        ],
        errors=[SkillProblemPublic.model_validate(vars(p)) for p in registry.errors],
        warnings=[
            SkillProblemPublic.model_validate(vars(w))
            for s in registry.all()
            for w in s.all_warnings
        ],
    )


@router.get(
    "/search",
    responses=error_responses(
        400, 500, notes={400: "`q` or `k` is out of range (`invalid_request`)."}
    ),
)
async def search_skills(
    services: ServicesDep,
    q: Annotated[str, Query(min_length=1, max_length=2000, description="What the user wants.")],
    k: Annotated[int, Query(ge=1, le=50, description="How many skills at most.")] = 5,
) -> SkillSearchPublic:
    """Hybrid retrieval over the installed skills."""
    started = time.perf_counter()
    hits = await asyncio.to_thread(services.skills.search, q, k)  # the model runs off the loop
    return SkillSearchPublic(
        query=q,
        results=[SkillHitPublic.model_validate(vars(h)) for h in hits],
        ms=round((time.perf_counter() - started) * 1000, 3),
    )


@router.get("/{name}", responses=error_responses(404, 500, notes={404: NO_SKILL}))
async def get_skill(services: ServicesDep, name: str) -> SkillDefinitionPublic:
    """A skill's full definition (tier 2)."""
    try:
        return SkillDefinitionPublic.model_validate(definition(services.skills.registry.get(name)))
    except SkillNotFound as exc:
        raise ApiError(404, "skill_not_found", cut_in(str(exc), name), param="name") from None


@router.post(
    "/{name}/tools/{tool}",
    dependencies=[needs("tools")],
    responses=error_responses(
        400,
        404,
        413,
        500,
        notes={
            400: 'The body is not `{"arguments": {...}}` (`invalid_request`) or not JSON '
            "(`invalid_json`), or `Idempotency-Key` is too long. Arguments against the "
            "tool's schema are a 200 with `ok: false`.",
            404: "No such skill (`skill_not_found`), or it has no such tool (`tool_not_found`).",
        },
    ),
)
async def call_tool(
    services: ServicesDep,
    name: str,
    tool: str,
    body: ToolCallRequest,
    principal: PrincipalDep,
    idempotency_key: IdempotencyKey = None,
) -> ToolResultPublic:
    """Call one tool directly (tier 3). Tool failures are ``ok: false`` with a readable error.

    The same call as ``POST /v1/tools/{name}/invoke`` (one implementation)."""
    registry = services.skills.registry
    try:
        skill = registry.get(name)
    except SkillNotFound as exc:
        raise ApiError(404, "skill_not_found", cut_in(str(exc), name), param="name") from None
    try:
        owner, _ = registry.tool(tool)
    except SkillNotFound:
        owner = None
    if owner is None or owner.name != skill.name:
        raise ApiError(
            404,
            "tool_not_found",
            f"skill {name!r} has no tool {cut(tool)!r}; it has {[t.name for t in skill.tools]}",
        )
    entries = services.tools.all().values()
    public = next((e.name for e in entries if (e.skill, e.tool) == (name, tool)), tool)
    return await invoke(services, public, body.arguments, idempotency_key, principal)


# Learned examples are users' words from every thread: for operators (admin) only.
@router.get(
    "/{name}/examples",
    dependencies=[needs("admin")],
    responses=error_responses(404, 500, notes={404: NO_SKILL}),
)
async def list_examples(services: ServicesDep, name: str) -> LearnedExamplesPublic:
    """The examples routing learned for a skill from use (users' messages whose skill the
    model chose), newest first, with where each came from: for operators to review."""
    found = await services.learned.examples(name) if services.learned is not None else []
    if not found and name not in services.skills.registry:
        try:
            services.skills.registry.get(name)  # the error suggests a close name
        except SkillNotFound as exc:
            raise ApiError(404, "skill_not_found", cut_in(str(exc), name), param="name") from None
    return LearnedExamplesPublic(
        skill=name,
        learning=services.settings.learn_examples,
        data=[LearnedExamplePublic.model_validate(asdict(e)) for e in found],
    )


@router.delete(
    "/{name}/examples/{example_id}",
    dependencies=[needs("admin")],
    status_code=204,
    response_class=Response,
    responses=error_responses(
        404, 500, notes={404: "The skill has no such example (`example_not_found`)."}
    ),
)
async def delete_example(services: ServicesDep, name: str, example_id: str) -> Response:
    """Delete one learned example: it no longer routes (at once, in this process)."""
    if services.learned is None or not await services.learned.delete(name, example_id):
        raise ApiError(
            404,
            "example_not_found",
            f"skill {cut(name)!r} has no learned example {cut(example_id)!r}; "
            f"GET /v1/skills/{cut(name)}/examples lists them",
            param="example_id",
        )
    return Response(status_code=204)
