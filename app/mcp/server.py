"""The MCP server: the catalogue's tools, and each skill's SKILL.md and references as
resources (``skill://NAME/SKILL.md``, ``skill://NAME/references/...``), on the SDK's
low-level server."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import mimetypes
from collections.abc import Awaitable
from typing import Any
from urllib.parse import quote

import mcp_types as types
import structlog
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourcesListChanged, ToolsListChanged

from agents.echo import cut, cut_in, few
from agents.errors import SkillNotFound, SkillReferenceError
from agents.feed import USAGE_SINK
from agents.skills.loader import SKILL_FILE, Skill
from agents.skills.meta import read_reference
from agents.skills.results import MadeFile, ToolResult
from agents.toolserver.catalogue import ToolCatalogue, ToolEntry
from agents.toolserver.results import error_message, structured
from agents.toolserver.runs import CALLER
from app.idempotency import MAX_KEY_CHARS

log = structlog.get_logger(__name__)

RESOURCE_NOT_FOUND = -32002  # the MCP specification's code for an unknown resource
PROGRESS_EVERY_S = 1.0
MANIFEST = "_manifest"

CALLER_STATE = "skilldesk_caller"  # where the MCP gate leaves the user it authenticated
SINK_STATE = "skilldesk_usage_sink"  # and where the cost of the runs they start is counted
KEY_OWNER_STATE = "skilldesk_key_owner"  # whose Idempotency-Keys (an admin's too)


class Sessions:
    """Who hears that the lists changed: the sessions that keep a session id (2025-11-25, on
    their stream), and the clients listening through ``subscriptions/listen`` (2026-07-28)."""

    def __init__(self) -> None:
        self.open: dict[str, ServerSession] = {}
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus)

    def remember(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """Keep the session of a request that carries a session id."""
        request = ctx.request
        headers = getattr(request, "headers", None)
        session_id = headers.get("mcp-session-id") if headers is not None else None
        if session_id:
            self.open[session_id] = ctx.session

    def keep(self, alive: set[str]) -> None:
        """Forget sessions that have ended."""
        self.open = {k: v for k, v in self.open.items() if k in alive}

    async def lists_changed(self) -> int:
        """Send ``tools/list_changed`` and ``resources/list_changed`` to every open session
        and listener; returns how many sessions were told."""
        await self.bus.publish(ToolsListChanged())
        await self.bus.publish(ResourcesListChanged())
        told = 0
        for session_id, session in list(self.open.items()):
            try:
                await session.send_tool_list_changed()
                await session.send_resource_list_changed()
                told += 1
            except Exception:  # a session whose stream is gone
                self.open.pop(session_id, None)
        return told


def build_server(catalogue: ToolCatalogue, sessions: Sessions) -> Server[Any]:
    """The low-level MCP server over ``catalogue``."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[mcp_tool(e) for e in catalogue.listed()])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            catalogue.entry(params.name)
        except SkillNotFound as exc:  # an unknown tool is the caller's protocol error
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        headers = getattr(ctx.request, "headers", None)
        key = headers.get("idempotency-key") if headers is not None else None
        # The user this request was authenticated as (the gate put it in the request's scope;
        # a session's task does not carry the request's context).
        scope = getattr(ctx.request, "scope", None) or {}
        state = scope.get("state") or {}
        caller = state.get(CALLER_STATE)
        if key is not None and len(key) > MAX_KEY_CHARS:  # as every HTTP route takes it
            why = f"the Idempotency-Key header is longer than {MAX_KEY_CHARS} characters"
            raise MCPError(code=types.INVALID_PARAMS, message=why)
        token, sink = CALLER.set(caller), USAGE_SINK.set(state.get(SINK_STATE))
        try:
            call = catalogue.call(
                params.name,
                params.arguments or {},
                idempotency_key=key,
                key_owner=state.get(KEY_OWNER_STATE),
            )
            done = await with_progress(ctx, call)
            return call_result(done, ctx.session.protocol_version)
        except SkillNotFound as exc:  # gone since it was looked up (a reload)
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        except Exception:
            # A failed call is a result with isError; this is a fault of the server, which
            # the SDK would answer with code 0 and the exception's text: JSON-RPC's code for
            # it is -32603 (over HTTP, a 500 internal_error).
            log.exception("mcp.tool_call_failed", tool=params.name)
            message = f"internal error calling {params.name}; the server logged it"
            raise MCPError(code=types.INTERNAL_ERROR, message=message) from None
        finally:
            USAGE_SINK.reset(sink)
            CALLER.reset(token)

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        resources = []
        for skill in catalogue.skills.registry.all():
            resources.append(
                types.Resource(
                    uri=f"skill://{skill.name}/{SKILL_FILE}",
                    name=f"{skill.name}/{SKILL_FILE}",
                    description=skill.description,
                    mime_type="text/markdown",
                )
            )
            resources += [
                types.Resource(
                    uri=f"skill://{skill.name}/{path}",
                    name=f"{skill.name}/{path}",
                    mime_type=_mime(path),
                )
                for path in skill.references
            ]
        return types.ListResourcesResult(resources=resources)

    async def list_templates(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template="skill://{name}/SKILL.md",
                    name="skill",
                    description="A skill's instructions (find names with search_skills).",
                    mime_type="text/markdown",
                ),
                types.ResourceTemplate(
                    uri_template="skill://{name}/{+path}",
                    name="skill-file",
                    description="A file of a skill: a reference, or _manifest (its files "
                    "with their SHA-256).",
                ),
            ]
        )

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        text, mime = read_skill_file(catalogue, uri)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)]
        )

    server: Server[Any] = _Server(
        "skilldesk",
        version="0.1.0",
        instructions=catalogue.prompts.render("tool_server_instructions"),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_subscriptions_listen=sessions.listen,
    )
    server.middleware += [_Remember(sessions), _CutMethod()]
    return server


class _Server(Server[Any]):
    """The low-level server, telling clients that its tool and resource lists change."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        changes = notification_options or NotificationOptions(
            tools_changed=True, resources_changed=True
        )
        return super().create_initialization_options(changes, experimental_capabilities, extensions)


class _Remember:
    """Middleware: every request or notification of a session keeps that session known."""

    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        if ctx.method != "initialize":
            self.sessions.remember(ctx)
        result: HandlerResult = await call_next(ctx)
        return result


class _CutMethod:
    """Middleware: the SDK's "Method not found" quotes the method a caller sent (its
    ``data``), which may be megabytes long; it is quoted cut, as every name sent is."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        try:
            result: HandlerResult = await call_next(ctx)
        except MCPError as exc:
            if exc.code != types.METHOD_NOT_FOUND or not isinstance(exc.data, str):
                raise
            raise MCPError(code=exc.code, message=exc.message, data=cut(exc.data)) from None
        return result


def mcp_tool(entry: ToolEntry) -> types.Tool:
    """A catalogue entry as an MCP tool, with its annotations."""
    annotations = types.ToolAnnotations(
        read_only_hint=entry.read_only,
        destructive_hint=entry.destructive,
        idempotent_hint=entry.idempotent,
    )
    return types.Tool(
        name=entry.name,
        description=entry.description,
        input_schema=entry.parameters,
        output_schema=entry.output_schema,
        annotations=annotations,
    )


AUDIO_SINCE = "2025-03-26"  # the first MCP version with audio content


def call_result(result: ToolResult, protocol: str = AUDIO_SINCE) -> types.CallToolResult:
    """A call's result as MCP's: the text, the data as ``structuredContent`` (an object;
    other values under ``result``), ``isError`` for a failed call (a result that breaks the
    tool's ``output_schema`` is one already: the catalogue checks it), and files as content
    the caller's ``protocol`` version knows. A failure's ``structuredContent`` is
    ``{"error": {"code", "message", ...}}``, the message without the text's
    ``error (code):`` (the code is beside it), and the failure's details after them (a
    failed ``run_workflow``'s ``run_id`` and ``status``)."""
    text = [types.TextContent(type="text", text=result.content)]
    if not result.ok:
        error = {"code": result.error_code, "message": error_message(result)}
        if isinstance(result.data, dict):
            error |= {k: v for k, v in result.data.items() if k not in error}
        return types.CallToolResult(
            content=text, structured_content={"error": error}, is_error=True
        )
    audio = protocol >= AUDIO_SINCE  # versions are dates: they compare as text
    content = [*text, *(file_content(f, audio=audio) for f in result.files)]
    return types.CallToolResult(
        content=content, structured_content=structured(result.data), is_error=False
    )


def file_content(
    file: MadeFile, *, audio: bool = True
) -> types.ImageContent | types.AudioContent | types.EmbeddedResource:
    """A file the handler made as MCP content: an image or a sound as such (a sound for a
    client whose protocol has no audio content, before 2025-03-26, as a resource), anything
    else as an embedded resource (``skilldesk://files/NAME``)."""
    data = base64.b64encode(file.data).decode("ascii")
    if file.media_type.startswith("image/"):
        return types.ImageContent(type="image", data=data, mime_type=file.media_type)
    if audio and file.media_type.startswith("audio/"):
        return types.AudioContent(type="audio", data=data, mime_type=file.media_type)
    uri = f"skilldesk://files/{quote(file.name)}"
    blob = types.BlobResourceContents(uri=uri, mime_type=file.media_type, blob=data)
    return types.EmbeddedResource(type="resource", resource=blob)


async def with_progress(
    ctx: ServerRequestContext[Any, Any], call: Awaitable[ToolResult]
) -> ToolResult:
    """Await ``call``, sending a progress notification each second it runs (when the caller
    asked for progress)."""
    task = asyncio.ensure_future(call)
    seconds = 0.0
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=PROGRESS_EVERY_S)
            if done:
                return task.result()
            seconds += PROGRESS_EVERY_S
            await ctx.session.report_progress(seconds, None, f"running for {seconds:g} s")
    finally:
        if not task.done():
            task.cancel()


def read_skill_file(catalogue: ToolCatalogue, uri: str) -> tuple[str, str]:
    """The text and MIME type of ``skill://NAME/PATH``.

    Raises:
        MCPError: (-32002) no such skill or file, or a path out of the skill's folder; the
            message names a few resources to read instead.
    """
    registry = catalogue.skills.registry
    if not uri.startswith("skill://") or "/" not in uri[len("skill://") :]:
        every = [_uri(s, SKILL_FILE) for s in registry.all()]
        raise _refused(uri, "not found: it is not a skill:// resource", every)
    name, path = uri[len("skill://") :].split("/", 1)
    try:
        skill = registry.get(name)
    except SkillNotFound as exc:
        every = [_uri(s, SKILL_FILE) for s in registry.all()]
        raise _refused(uri, f"not found: {cut_in(str(exc), name)}", every) from None
    if path == SKILL_FILE:
        return (skill.path / SKILL_FILE).read_text(encoding="utf-8"), "text/markdown"
    if path == MANIFEST:
        return json.dumps(manifest(skill), indent=2), "application/json"
    try:
        return read_reference(skill, path), _mime(path)
    except SkillReferenceError as exc:
        verdict = "not allowed" if exc.outside else "not found"
        own = [_uri(skill, f) for f in (SKILL_FILE, MANIFEST, *skill.references)]
        raise _refused(uri, f"{verdict}: {exc.reason}", own) from None


def _refused(uri: str, why: str, instead: list[str]) -> MCPError:
    """The error for resource ``uri`` (cut), ``why`` it cannot be read, and a few of the
    resources ``instead``."""
    shown = cut(uri)
    choices = f"read one of {few(instead)}" if instead else "no skill is installed"
    return MCPError(RESOURCE_NOT_FOUND, f"resource {shown!r} is {why}; {choices}", {"uri": shown})


def _uri(skill: Skill, path: str) -> str:
    return f"skill://{skill.name}/{path}"


def manifest(skill: Skill) -> dict[str, Any]:
    """The skill's files offered as resources, each with its SHA-256."""
    files = []
    for path in (SKILL_FILE, *skill.references):
        data = (skill.path / path).read_bytes()
        files.append(
            {
                "path": path,
                "uri": f"skill://{skill.name}/{path}",
                "sha256": hashlib.sha256(data).hexdigest(),
                "size": len(data),
            }
        )
    return {"skill": skill.name, "files": files}


def _mime(path: str) -> str:
    if path.endswith(".md"):
        return "text/markdown"
    return mimetypes.guess_type(path)[0] or "text/plain"
