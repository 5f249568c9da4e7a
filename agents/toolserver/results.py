"""Results of calls decided in the catalogue, shaped as the ToolRunner shapes its own, and
the check of a skill tool's result against its declared ``output_schema``."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from agents.errors import SchemaUnusable
from agents.skills.arguments import schema_problems
from agents.skills.results import ToolResult, tool_error


def ok_result(tool: str, text: str, data: Any, started: float) -> ToolResult:
    """A call that worked: the text a caller reads and the data behind it."""
    return ToolResult(tool, True, text, data, None, False, (time.perf_counter() - started) * 1000)


def failed(tool: str, code: str, message: str, started: float, **details: Any) -> ToolResult:
    """A failed call's result (as ``tool_error``) carrying ``details`` as its data: fields a
    structured error gives beside its code and message (a failed run's ``run_id``)."""
    return replace(tool_error(tool, code, message, started), data=details or None)


def error_message(result: ToolResult) -> str:
    """A failed call's message as a structured error carries it, over MCP and HTTP alike:
    its text without the leading ``error (code):`` (the code is beside it)."""
    return result.content.removeprefix(f"error ({result.error_code}): ")


def structured(data: Any) -> dict[str, Any]:
    """A result's data as an object, as MCP's ``structuredContent`` carries it and an
    ``output_schema`` describes it: an object as it is, any other value under ``result``."""
    return data if isinstance(data, dict) else {"result": data}


def checked(result: ToolResult, output_schema: dict[str, Any] | None) -> ToolResult:
    """``result``, or an ``invalid_output`` error when it worked but its data (as
    ``structured`` makes it) breaks the tool's declared ``output_schema``: a caller is
    promised results of that shape (MCP clients refuse one that is not), whichever path
    the call took. The check is the one arguments get (``schema_problems``)."""
    if not result.ok or output_schema is None:
        return result
    started = time.perf_counter() - result.ms / 1000  # the error keeps the call's time
    try:
        problems = schema_problems(output_schema, structured(result.data))
    except SchemaUnusable as exc:  # what the load check refuses, should one get through
        why = f"the result of {result.tool} cannot be checked: its output_schema fails ({exc})"
        return tool_error(result.tool, exc.code, why, started)
    if not problems:
        return result
    why = (
        f"{result.tool} ran (what it does is done: do not call it again for this), but its "
        f"result does not match its output_schema ({'; '.join(problems)}); fix the handler "
        "or the output_schema in skill.yaml"
    )
    return tool_error(result.tool, "invalid_output", why, started)
