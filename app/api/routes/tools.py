"""The tool server over HTTP: every tool as an OpenAI function definition, and their calls.

The one implementation of a tool call over HTTP: ``POST /v1/skills/{name}/tools/{tool}``
calls ``invoke`` too.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from agents.errors import SkillNotFound
from agents.skills.results import ToolResult
from agents.toolserver.results import error_message
from agents.toolserver.runs import CALLER
from app.api.deps import IdempotencyKey, PrincipalDep, ServicesDep
from app.api.errors import ApiError, error_responses
from app.api.schemas.skills import ToolErrorPublic, ToolFilePublic, ToolResultPublic
from app.api.schemas.tools import ToolInvokeRequest, ToolPublic, ToolsPublic
from app.auth.principal import Principal
from app.services import Services

router = APIRouter(prefix="/v1/tools", tags=["tools"], default_response_class=JSONResponse)


@router.get(
    "",
    responses=error_responses(
        400,
        500,
        notes={400: "`strict` or `meta_only` not true or false (`invalid_request`, `param`)."},
    ),
)
async def list_tools(
    services: ServicesDep,
    strict: Annotated[
        bool, Query(description="Schemas in their strict-mode variant (the default).")
    ] = True,
    meta_only: Annotated[
        bool, Query(description="Only the meta-tools and workflow tools, no skill tool.")
    ] = False,
) -> ToolsPublic:
    """Every tool as an OpenAI function definition: the meta-tools (search_skills,
    load_skill, call_skill_tool), run_workflow and get_workflow_run, and each skill tool."""
    entries = services.tools.all().values()
    return ToolsPublic(
        tools=[
            ToolPublic.model_validate(e.openai(strict=strict))
            for e in entries
            if not (meta_only and e.kind == "skill")
        ]
    )


@router.post(
    "/{name}/invoke",
    responses=error_responses(
        400,
        404,
        413,
        500,
        notes={
            400: 'The body is not `{"arguments": ...}` (`invalid_request`) or not JSON '
            "(`invalid_json`), or `Idempotency-Key` is too long. Arguments against the "
            "tool's schema are a 200 with `ok: false`.",
            404: "No such tool (`tool_not_found`; the message suggests a close name).",
        },
    ),
)
async def invoke_tool(
    services: ServicesDep,
    name: str,
    body: ToolInvokeRequest,
    principal: PrincipalDep,
    idempotency_key: IdempotencyKey = None,
) -> ToolResultPublic:
    """Call one tool by its name in `GET /v1/tools`. A failed call (bad arguments, an
    error in the tool, a timeout) is ``ok: false`` with a readable error."""
    return await invoke(services, name, body.arguments, idempotency_key, principal)


async def invoke(
    services: Services,
    name: str,
    arguments: dict[str, Any] | str,
    idempotency_key: str | None,
    principal: Principal,
) -> ToolResultPublic:
    """Call tool ``name`` of the catalogue for ``principal`` (a workflow run it starts is
    theirs); an unknown name is a 404 naming close ones."""
    caller = CALLER.set(None if principal.sees_all else principal.user)
    try:
        result = await services.tools.call(
            name, arguments, idempotency_key=idempotency_key, key_owner=principal.user
        )
    except SkillNotFound as exc:
        raise ApiError(404, exc.code, str(exc), param="name") from None
    finally:
        CALLER.reset(caller)
    return public_result(result)


def _error(result: ToolResult) -> ToolErrorPublic:
    """A failed call's error: its code and message (as MCP's structured error says it, without
    the text's ``error (code):``), and the fields it carries beside them
    (a failed ``run_workflow``'s ``run_id`` and ``status``, as MCP's structured error)."""
    details = result.data if isinstance(result.data, dict) else {}
    known = {k: details[k] for k in ("run_id", "status") if k in details}
    return ToolErrorPublic(code=str(result.error_code), message=error_message(result), **known)


def public_result(result: ToolResult) -> ToolResultPublic:
    """A call's result as the API answers it."""
    return ToolResultPublic(
        tool=result.tool,
        ok=result.ok,
        result=result.data if result.ok else None,
        content=result.content,
        error=None if result.ok else _error(result),
        truncated=result.truncated,
        ms=round(result.ms, 3),
        files=[
            ToolFilePublic(
                name=f.name,
                media_type=f.media_type,
                size=len(f.data),
                caption=f.caption,
                data=base64.b64encode(f.data).decode("ascii"),
            )
            for f in result.files
        ],
    )
