"""A call's result as MCP answers it: text, structuredContent, isError."""

from __future__ import annotations

from agents.skills.results import ToolResult
from app.mcp.server import call_result

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def test_data_becomes_structured_content_an_object_always() -> None:
    listed = call_result(ToolResult("count", True, "[1, 2]", [1, 2]))
    assert listed.structured_content == {"result": [1, 2]}
    assert listed.is_error is False
    failed = call_result(ToolResult("count", False, "error (timeout): slow", None, "timeout"))
    assert failed.is_error is True
    assert failed.structured_content == {
        "error": {"code": "timeout", "message": "error (timeout): slow"}
    }


def test_a_result_against_the_declared_output_schema_is_an_error_saying_how_to_fix_it() -> None:
    good = call_result(ToolResult("count", True, '{"n": 3}', {"n": 3}), SCHEMA)
    assert good.is_error is False
    bad = call_result(ToolResult("count", True, '{"n": "3"}', {"n": "3"}), SCHEMA)
    assert bad.is_error is True
    text = getattr(bad.content[0], "text", "")
    assert "error (invalid_output): the result of count does not match its output_schema" in text
    assert "n: '3' is not of type 'integer'" in text
    assert "fix the handler or the output_schema in skill.yaml" in text
