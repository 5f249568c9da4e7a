"""Skills over HTTP: list, definition, search, and direct tool calls (no model needed)."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from pydantic import BaseModel, ConfigDict, Field

from agents.errors import SkillNotFound
from agents.skills.meta import definition
from app.api.deps import ServicesDep
from app.api.errors import ApiError

router = APIRouter(prefix="/v1/skills", tags=["skills"])


class ToolCallRequest(BaseModel):
    """Arguments of a direct tool call: ``{"arguments": {...}}`` and nothing else."""

    model_config = ConfigDict(extra="forbid")

    arguments: dict[str, Any] = Field(default_factory=dict, description="Per the tool's schema.")


@router.get("")
async def list_skills(services: ServicesDep) -> dict[str, Any]:
    """Every live skill (tier 1 summary) and the problems of those that failed to load."""
    registry = services.skills.registry
    return {
        "skills": [
            {
                "name": s.name,
                "description": s.description,
                "pinned": s.config.pinned,
                "instruction_only": s.instruction_only,
                "tools": [t.name for t in s.tools],
            }
            for s in registry.all()
        ],
        "errors": [vars(p) for p in registry.errors],
    }


@router.get("/search")
async def search_skills(
    services: ServicesDep,
    q: Annotated[str, Query(min_length=1, max_length=2000, description="What the user wants.")],
    k: Annotated[int, Query(ge=1, le=50)] = 5,
) -> dict[str, Any]:
    """Hybrid retrieval over the installed skills."""
    started = time.perf_counter()
    hits = await asyncio.to_thread(services.skills.search, q, k)  # the model runs off the loop
    return {
        "query": q,
        "results": [vars(h) for h in hits],
        "ms": round((time.perf_counter() - started) * 1000, 3),
    }


@router.get("/{name}")
async def get_skill(services: ServicesDep, name: str) -> dict[str, Any]:
    """A skill's full definition (tier 2)."""
    try:
        return definition(services.skills.registry.get(name))
    except SkillNotFound as exc:
        raise ApiError(404, "skill_not_found", str(exc), param="name") from None


@router.post("/{name}/tools/{tool}")
async def call_tool(
    services: ServicesDep,
    name: str,
    tool: str,
    body: ToolCallRequest,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> dict[str, Any]:
    """Call one tool directly (tier 3). Tool failures are ``ok: false`` with a readable error."""
    registry = services.skills.registry
    try:
        skill = registry.get(name)
    except SkillNotFound as exc:
        raise ApiError(404, "skill_not_found", str(exc), param="name") from None
    try:
        owner, _ = registry.tool(tool)
    except SkillNotFound:
        owner = None
    if owner is None or owner.name != skill.name:
        raise ApiError(
            404,
            "tool_not_found",
            f"skill {name!r} has no tool {tool!r}; it has {[t.name for t in skill.tools]}",
        )
    result = await services.skills.call(tool, body.arguments, idempotency_key=idempotency_key)
    return {
        "tool": tool,
        "ok": result.ok,
        "result": result.data if result.ok else None,
        "content": result.content,
        "error": None if result.ok else {"code": result.error_code, "message": result.content},
        "truncated": result.truncated,
        "ms": round(result.ms, 3),
    }
