"""A call's result as MCP answers it: text, structuredContent, isError."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from agents.prompts import Prompts
from agents.skills.results import MadeFile, ToolResult
from agents.skills.service import SkillService, SkillsOptions
from agents.toolserver.catalogue import ToolCatalogue
from agents.toolserver.results import failed as failed_result
from app.mcp.server import Sessions, build_server, call_result
from tests.skillkit import tool, write_skill


def test_a_sound_goes_to_a_client_whose_protocol_has_no_audio_content_as_a_resource() -> None:
    # Review: audio content came in MCP 2025-03-26; a 2024-11-05 client got a content type
    # its protocol does not have.
    sound = MadeFile("hello.wav", "audio/wav", b"RIFF....WAVE")
    result = ToolResult("speak", True, "spoken", {"ok": True}, files=(sound,))
    old = call_result(result, protocol="2024-11-05").content[1]
    assert old.type == "resource"
    assert (old.resource.uri, old.resource.mime_type) == (
        "skilldesk://files/hello.wav",
        "audio/wav",
    )
    for protocol in ("2025-03-26", "2025-11-25"):
        new = call_result(result, protocol=protocol).content[1]
        assert (new.type, new.mime_type) == ("audio", "audio/wav")


def test_data_becomes_structured_content_an_object_always() -> None:
    listed = call_result(ToolResult("count", True, "[1, 2]", [1, 2]))
    assert listed.structured_content == {"result": [1, 2]}
    assert listed.is_error is False
    failed = call_result(ToolResult("count", False, "error (timeout): slow", None, "timeout"))
    assert failed.is_error is True
    assert getattr(failed.content[0], "text", "") == "error (timeout): slow"
    # QA: the prefix came twice in the answer, in the text and again in the error's message.
    assert failed.structured_content == {"error": {"code": "timeout", "message": "slow"}}


def test_a_failure_s_details_are_fields_of_the_structured_error_beside_code_and_message() -> None:
    # Review: a FAILED run_workflow named its run in the message only.
    result = failed_result(
        "run_workflow", "workflow_failed", "it failed", 0.0, run_id="r-1", status="FAILED"
    )
    answer = call_result(result)
    assert answer.is_error is True
    assert answer.structured_content == {
        "error": {
            "code": "workflow_failed",
            "message": "it failed",
            "run_id": "r-1",
            "status": "FAILED",
        }
    }


@pytest.fixture
async def catalogue(tmp_path: Path) -> AsyncIterator[ToolCatalogue]:
    entry = tool("bs_tool", "handler:bs_tool", {"b": {"type": "string"}})
    config = {"isolation": "thread", "tools": [entry]}
    handler = "def bs_tool(**values):\n    return values\n"
    write_skill(tmp_path / "skills", "badschema", config=config, handler=handler)
    service = SkillService(SkillsOptions(tmp_path / "skills", tmp_path / "data", embeddings=False))
    service.reload()
    yield ToolCatalogue(service, Prompts())
    await service.aclose()


# Both eras of the protocol: a handshake (2025-11-25) and per-request (2026-07-28).
MODES = pytest.mark.parametrize("mode", ["legacy", "auto"])


@MODES
async def test_a_schema_that_cannot_check_the_arguments_answers_a_result_with_is_error(
    catalogue: ToolCatalogue, mode: str
) -> None:
    # Refused at load; one that gets through (changed in memory here) is a tool error.
    schema = catalogue.skills.registry.tool("bs_tool")[1].parameters
    schema["properties"]["b"]["pattern"] = "([unclosed"
    async with Client(build_server(catalogue, Sessions()), mode=mode) as client:
        result = await client.call_tool("bs_tool", {"b": "x"})
    assert result.is_error is True
    assert (result.structured_content or {})["error"]["code"] == "invalid_schema"


@MODES
async def test_a_fault_of_the_server_in_a_tool_call_is_jsonrpc_internal_error_not_code_0(
    catalogue: ToolCatalogue, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> ToolResult:
        raise RuntimeError("a bug with internals in its message")

    monkeypatch.setattr(catalogue, "call", broken)
    async with Client(build_server(catalogue, Sessions()), mode=mode) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("bs_tool", {"b": "x"})
    assert raised.value.error.code == mcp_types.INTERNAL_ERROR
    assert raised.value.error.message == "internal error calling bs_tool; the server logged it"
