"""The tool server for other agents, through its two surfaces against a real `skilldesk serve`
process: MCP at /mcp with the official client, and the OpenAI-style tools over HTTP. One
suite runs over both; what only MCP has (resources, sessions, notifications) follows."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from agents.toolserver.strict import strict_problems
from tests.integration.openapi.kit import LOOKUP
from tests.integration.test_server_process import Service
from tests.skillkit import copy_fixture_skill, tool, write_skill

pytestmark = pytest.mark.integration

SLOW = """
import time

COUNT = [0]


def wait(seconds: float) -> dict:
    time.sleep(seconds)
    return {"waited": seconds}


def bump() -> dict:
    COUNT[0] += 1
    return {"count": COUNT[0]}
"""


REPORTS = """
from pathlib import Path

PNG = bytes.fromhex("89504e470d0a1a0a") + bytes(range(256))


def make_files(context):
    folder = Path(context.data_dir)
    (folder / "report.txt").write_text("all clear")
    (folder / "chart.png").write_bytes(PNG)
    report = str(folder / "report.txt")
    return {"files": [{"path": report, "caption": "Shift report"}, str(folder / "chart.png")],
            "saved_to": report, "shift": "night"}


def make_stray(context):
    return {"files": ["/etc/hostname"]}
"""


TALLY = """
def tally(n):
    return {"n": n}
"""
COUNTED = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


RESTOCK = """
name: restock
description: Checks a product's stock.
inputs: {sku: {type: string}}
nodes:
  - {id: stock, kind: tool, tool: check_stock, arguments: {sku: "{{ inputs.sku }}"}}
outputs: {message: "{{ nodes.stock.output.in_stock }} in stock"}
"""


def _env(skills: Path, workflows: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLDESK_")}
    env.update(
        SKILLDESK_SKILLS_DIR=str(skills),
        SKILLDESK_WORKFLOWS_DIR=str(workflows),
        SKILLDESK_SKILLS_EMBEDDINGS="false",
        SKILLDESK_LOG_FORMAT="json",
    )
    return env


def _content(root: Path) -> tuple[Path, Path]:
    """Skills with tools (order-lookup, with a reference; slow-clock; shift-reports;
    tally-sheet, with an output_schema), an instruction-only one, and a workflow that looks
    an order up and waits for approval."""
    skills, workflows = root / "skills", root / "workflows"
    copy_fixture_skill(skills, "storefront/order-lookup")
    copy_fixture_skill(skills, "storefront/weather-report")
    write_skill(
        skills,
        "slow-clock",
        "Waits a given time. Use it to test patience.",
        config={
            "isolation": "thread",
            "tools": [
                tool("wait", "handler:wait", {"seconds": {"type": "number"}}, ["seconds"]),
                tool("bump", "handler:bump", side_effects=True, idempotent=False),
            ],
        },
        handler=SLOW,
    )
    write_skill(
        skills,
        "shift-reports",
        "Writes the night shift's report files.",
        config={
            "tools": [
                tool("make_files", "handler:make_files"),
                tool("make_stray", "handler:make_stray"),
            ]
        },
        handler=REPORTS,
    )
    write_skill(
        skills,
        "tally-sheet",
        "Counts what it is told to. Use it to keep a tally.",
        config={
            "isolation": "thread",
            "tools": [tool("tally", "handler:tally", {"n": {}}, ["n"], output_schema=COUNTED)],
        },
        handler=TALLY,
    )
    workflows.mkdir(parents=True)
    (workflows / "lookup.yaml").write_text(LOOKUP)
    return skills, workflows


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    root = tmp_path_factory.mktemp("tool-server")
    skills, workflows = _content(root)
    service = Service(_env(skills, workflows), root / "data")
    yield service
    service.stop()


@dataclass(frozen=True)
class Outcome:
    """A call's outcome as both surfaces give it: on failure ``data`` is
    ``{"error": {"code", "message"}}``."""

    ok: bool
    text: str
    data: dict[str, Any]
    files: list[tuple[str, bytes]] = field(default_factory=list)  # media type, bytes


class Mcp:
    """The MCP surface, through the official client (a session per use)."""

    name = "mcp"

    def __init__(self, url: str) -> None:
        self.url = f"{url}/mcp"

    @asynccontextmanager
    async def client(self, **options: Any) -> AsyncIterator[Client]:
        async with Client(self.url, mode="legacy", **options) as client:
            yield client

    async def names(self) -> list[str]:
        async with self.client() as client:
            return [t.name for t in (await client.list_tools()).tools]

    async def call(self, name: str, arguments: dict[str, Any]) -> Outcome:
        async with self.client() as client:
            result = await client.call_tool(name, arguments)
        assert result.content[0].type == "text"
        files = []
        for item in result.content[1:]:
            if item.type in ("image", "audio"):
                files.append((item.mime_type, base64.b64decode(item.data)))
            else:
                assert item.type == "resource", item
                blob = item.resource
                files.append((blob.mime_type, base64.b64decode(blob.blob)))
        return Outcome(
            not result.is_error, result.content[0].text, result.structured_content or {}, files
        )

    async def unknown(self, name: str) -> str:
        async with self.client() as client:
            with pytest.raises(MCPError) as raised:
                await client.call_tool(name, {})
        return str(raised.value)


class OpenAITools:
    """The OpenAI-style surface: GET /v1/tools, POST /v1/tools/{name}/invoke."""

    name = "openai"

    def __init__(self, url: str) -> None:
        self.url = url

    async def names(self) -> list[str]:
        async with httpx.AsyncClient(base_url=self.url) as http:
            response = await http.get("/v1/tools")
        assert response.status_code == 200
        return [t["function"]["name"] for t in response.json()["tools"]]

    async def call(self, name: str, arguments: dict[str, Any]) -> Outcome:
        async with httpx.AsyncClient(base_url=self.url, timeout=30) as http:
            response = await http.post(f"/v1/tools/{name}/invoke", json={"arguments": arguments})
        assert response.status_code == 200, response.text
        body = response.json()
        if not body["ok"]:
            return Outcome(False, body["content"], {"error": body["error"]})
        result = body["result"]
        files = [(f["media_type"], base64.b64decode(f["data"])) for f in body["files"]]
        for f, (_, data) in zip(body["files"], files, strict=True):
            assert f["size"] == len(data)
        return Outcome(
            True, body["content"], result if isinstance(result, dict) else {"result": result}, files
        )

    async def unknown(self, name: str) -> str:
        async with httpx.AsyncClient(base_url=self.url) as http:
            response = await http.post(f"/v1/tools/{name}/invoke", json={"arguments": {}})
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "tool_not_found"
        return str(response.json()["error"]["message"])


@pytest.fixture(params=["mcp", "openai"])
def surface(request: pytest.FixtureRequest, service: Service) -> Mcp | OpenAITools:
    return Mcp(service.url) if request.param == "mcp" else OpenAITools(service.url)


# One suite, both surfaces.


async def test_the_list_holds_the_meta_tools_the_workflow_tools_and_each_skill_tool(
    surface: Mcp | OpenAITools,
) -> None:
    names = await surface.names()
    assert names[:6] == [
        "search_skills",
        "load_skill",
        "call_skill_tool",
        "read_skill_reference",
        "run_workflow",
        "get_workflow_run",
    ]
    assert set(names[6:]) == {"get_order", "wait", "bump", "make_files", "make_stray", "tally"}


async def test_search_finds_the_skill_with_a_short_summary_and_its_tools(
    surface: Mcp | OpenAITools,
) -> None:
    found = await surface.call("search_skills", {"query": "where is my parcel", "k": 2})
    assert found.ok, found.text
    first = found.data["skills"][0]
    assert first["name"] == "order-lookup"
    assert first["tools"] == ["get_order"]
    assert len(first["summary"]) <= 50
    assert "order-lookup" in found.text
    assert "get_order" in found.text


async def test_load_skill_gives_the_instructions_the_tool_schemas_and_the_references(
    surface: Mcp | OpenAITools,
) -> None:
    loaded = await surface.call("load_skill", {"name": "order-lookup"})
    assert loaded.ok, loaded.text
    assert "Never reveal internal margins" in loaded.data["instructions"]
    assert loaded.data["tools"][0]["name"] == "get_order"
    assert loaded.data["tools"][0]["parameters"]["required"] == ["order_id"]
    assert loaded.data["references"] == ["references/shipping.md"]
    assert loaded.data["resources"] == ["skill://order-lookup/references/shipping.md"]
    assert "call_skill_tool" in loaded.text

    reference = await surface.call(
        "read_skill_reference", {"name": "order-lookup", "path": "references/shipping.md"}
    )
    assert reference.ok, reference.text
    assert "DHL delivers in 2 days" in reference.text

    missing = await surface.call("load_skill", {"name": "order-lokup"})
    assert not missing.ok
    assert missing.data["error"]["code"] == "skill_not_found"
    assert "order-lookup" in missing.text  # the close name is suggested


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("get_order", {"order_id": "ORD1001"}),
        (
            "call_skill_tool",
            {"skill": "order-lookup", "tool": "get_order", "arguments": {"order_id": "ORD1001"}},
        ),
    ],
)
async def test_a_skill_tool_runs_through_the_runner_directly_or_through_call_skill_tool(
    surface: Mcp | OpenAITools, name: str, arguments: dict[str, Any]
) -> None:
    result = await surface.call(name, arguments)
    assert result.ok, result.text
    # The runner's trimming (keep_fields) applied: the internal margin never leaves.
    assert result.data == {"order_id": "ORD1001", "status": "shipped", "carrier": "DHL"}
    assert "internal_margin" not in result.text


@pytest.mark.parametrize("through", ["direct", "call_skill_tool"])
async def test_a_result_against_its_output_schema_is_invalid_output_on_every_path(
    surface: Mcp | OpenAITools, through: str
) -> None:
    # Review: checked for an MCP tools/call of the tool itself only; through call_skill_tool,
    # or over /v1/tools, a result breaking the declared schema was handed over as it was.
    def call(n: Any) -> tuple[str, dict[str, Any]]:
        if through == "direct":
            return "tally", {"n": n}
        return "call_skill_tool", {"skill": "tally-sheet", "tool": "tally", "arguments": {"n": n}}

    good = await surface.call(*call(3))
    assert good.ok, good.text
    assert good.data == {"n": 3}
    bad = await surface.call(*call("3"))
    assert not bad.ok
    assert bad.data["error"]["code"] == "invalid_output"
    assert "does not match its output_schema (n: '3' is not of type 'integer')" in bad.text
    assert "fix the handler or the output_schema in skill.yaml" in bad.text


async def test_files_a_handler_made_come_back_with_the_result_never_a_server_path(
    surface: Mcp | OpenAITools,
) -> None:
    # QA: a direct call answered with the paths of the files on the server.
    made = await surface.call("make_files", {})
    assert made.ok, made.text
    assert made.data == {
        "files": [
            {
                "name": "report.txt",
                "media_type": "text/plain",
                "size": 9,
                "caption": "Shift report",
            },
            {"name": "chart.png", "media_type": "image/png", "size": 264},
        ],
        "shift": "night",
    }
    assert "/skills/shift-reports" not in made.text
    png = bytes.fromhex("89504e470d0a1a0a") + bytes(range(256))
    assert made.files == [("text/plain", b"all clear"), ("image/png", png)]
    through = await surface.call(
        "call_skill_tool", {"skill": "shift-reports", "tool": "make_files", "arguments": {}}
    )
    assert through.ok, through.text
    assert through.files == made.files

    stray = await surface.call("make_stray", {})
    assert not stray.ok
    assert stray.data["error"]["code"] == "tool_failed"
    assert "not a file in the skill's data folder" in stray.text
    assert "/etc" not in stray.text  # the name only: the server's folders are not shown
    assert stray.files == []


@pytest.mark.parametrize(
    ("name", "arguments", "code", "words"),
    [
        ("get_order", {"order_id": "nope"}, "invalid_arguments", ["order_id", "ORD[0-9]+"]),
        ("get_order", {}, "invalid_arguments", ["'order_id' is a required property"]),
        ("get_order", {"order_id": "ORD9"}, "tool_failed", ["no order ORD9"]),
        ("search_skills", {"query": 3}, "invalid_arguments", ["query", "not of type 'string'"]),
        ("call_skill_tool", {"skill": "order-lookup", "tool": "nope"}, "tool_not_found", ["nope"]),
        ("run_workflow", {"workflow": "lookup"}, "invalid_inputs", ["'order_id' is required"]),
        ("get_workflow_run", {"run_id": "missing"}, "run_not_found", ["missing"]),
        (
            "read_skill_reference",
            {"name": "order-lookup", "path": "../slow-clock/handler.py"},
            "bad_reference",
            ["outside skill 'order-lookup'"],
        ),
    ],
)
async def test_a_failed_call_is_a_result_with_a_readable_error_not_a_protocol_error(
    surface: Mcp | OpenAITools, name: str, arguments: dict[str, Any], code: str, words: list[str]
) -> None:
    result = await surface.call(name, arguments)
    assert not result.ok
    assert result.data["error"]["code"] == code
    for word in words:
        assert word in result.text


async def test_an_unknown_tool_is_refused_naming_a_close_one(surface: Mcp | OpenAITools) -> None:
    message = await surface.unknown("get_ordr")
    assert "get_order" in message


LONG = "x" * 5_000
CUT = "x" * 100 + "…"  # as an error quotes a name sent: its first 100 characters


async def test_a_huge_unknown_tool_name_is_quoted_cut(surface: Mcp | OpenAITools) -> None:
    # QA: a 5,000-character name came back whole in the error.
    message = await surface.unknown(LONG)
    assert f"no tool named '{CUT}'" in message
    assert "x" * 101 not in message


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("load_skill", {"name": LONG}),
        ("call_skill_tool", {"skill": LONG, "tool": "get_order"}),
        ("call_skill_tool", {"skill": "order-lookup", "tool": LONG}),
        ("read_skill_reference", {"name": LONG, "path": "references/shipping.md"}),
        ("read_skill_reference", {"name": "order-lookup", "path": LONG}),
        ("read_skill_reference", {"name": "order-lookup", "path": f"../{LONG}"}),
        ("get_workflow_run", {"run_id": LONG}),
    ],
    ids=lambda value: next(iter(value)) if isinstance(value, dict) else value,
)
async def test_a_huge_name_sent_to_a_tool_is_quoted_cut_in_its_error(
    surface: Mcp | OpenAITools, name: str, arguments: dict[str, Any]
) -> None:
    result = await surface.call(name, arguments)
    assert not result.ok
    assert "x" * 97 + "…" in result.text  # 100 characters of what was sent ("../x...")
    assert "x" * 101 not in result.text
    assert len(result.text) < 600, result.text


async def test_a_reference_refused_names_the_skill_s_references_never_an_empty_list(
    surface: Mcp | OpenAITools,
) -> None:
    # QA: "'../x' is outside skill 'weather-report'; use one of []".
    none = await surface.call("read_skill_reference", {"name": "weather-report", "path": "../x"})
    assert not none.ok
    assert none.data["error"]["code"] == "bad_reference"
    assert "'../x' is outside skill 'weather-report'; it has no references" in none.text
    assert "[]" not in none.text
    some = await surface.call("read_skill_reference", {"name": "order-lookup", "path": "nope.md"})
    assert "has no reference 'nope.md'; its references are 'references/shipping.md'" in some.text


async def test_arguments_that_are_no_json_object_say_so_naming_what_came(
    surface: Mcp | OpenAITools,
) -> None:
    arguments = {"skill": "order-lookup", "tool": "get_order", "arguments": ["ORD1001"]}
    listed = await surface.call("call_skill_tool", arguments)
    assert not listed.ok
    assert listed.data["error"]["code"] == "invalid_arguments"
    assert "arguments (the tool's) must be a JSON object, not an array" in listed.text
    texted = await surface.call("call_skill_tool", {**arguments, "arguments": '"ORD1001"'})
    assert "must be a JSON object, not JSON text of a string" in texted.text


@pytest.mark.parametrize(("sent", "named"), [(["ORD1001"], "an array"), (7, "a number")])
async def test_invoke_arguments_that_are_no_object_say_so_not_pydantic_s_union(
    service: Service, sent: Any, named: str
) -> None:
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as http:
        response = await http.post("/v1/tools/search_skills/invoke", json={"arguments": sent})
        nothing = await http.post("/v1/tools/search_skills/invoke", json={"arguments": None})
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert f"arguments: arguments must be a JSON object, not {named}" in message
    assert "dict[str,any]" not in message
    assert "Value error" not in message
    assert nothing.status_code == 200, nothing.text  # null: no arguments, as over MCP


async def test_a_workflow_run_that_failed_is_a_failed_call_naming_its_run(
    surface: Mcp | OpenAITools,
) -> None:
    # QA: a FAILED run came back as a call that worked (isError false, ok true).
    started = await surface.call(
        "run_workflow", {"workflow": "lookup", "inputs": {"order_id": "ORD9999"}}
    )
    assert not started.ok
    assert started.data["error"]["code"] == "workflow_failed"
    assert "no order ORD9999" in started.text
    assert started.text.count("error (") == 1, started.text  # the node's error, said once
    assert "node 'order' failed: get_order raised ValueError: no order ORD9999" in started.text
    run_id = started.text.split("run ", 1)[1].split(" ", 1)[0]
    read = await surface.call("get_workflow_run", {"run_id": run_id})
    assert read.ok  # reading it worked: the run is FAILED
    assert read.data["status"] == "FAILED"


async def test_a_failed_run_s_error_carries_its_run_id_and_status(
    surface: Mcp | OpenAITools,
) -> None:
    # Review: the run id was in the message only; a client had to parse it out.
    started = await surface.call(
        "run_workflow", {"workflow": "lookup", "inputs": {"order_id": "ORD9998"}}
    )
    assert not started.ok
    error = started.data["error"]
    assert (error["code"], error["status"]) == ("workflow_failed", "FAILED")
    assert f"run {error['run_id']} failed" in error["message"]
    read = await surface.call("get_workflow_run", {"run_id": error["run_id"]})
    assert (read.data["run_id"], read.data["status"]) == (error["run_id"], "FAILED")


async def test_a_workflow_waits_for_its_approval_and_is_read_back_by_its_run_id(
    surface: Mcp | OpenAITools, service: Service
) -> None:
    started = await surface.call(
        "run_workflow", {"workflow": "lookup", "inputs": {"order_id": "ORD1001"}}
    )
    assert started.ok, started.text
    assert started.data["status"] == "WAITING"
    assert started.data["approval"]["summary"] == "Order ORD1001?"
    run_id = started.data["run_id"]

    again = await surface.call("get_workflow_run", {"run_id": run_id})
    assert again.ok
    assert again.data["status"] == "WAITING"
    # The same run the service's own API and approvals inbox show; deciding it there ends it.
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as http:
        record = (await http.get(f"/v1/workflow-runs/{run_id}")).json()
        assert record["status"] == "WAITING"
        approval = again.data["approval"]["approval_id"]
        decided = await http.post(f"/v1/approvals/{approval}", json={"decision": "approve"})
        assert decided.status_code == 200, decided.text
    done = await surface.call("get_workflow_run", {"run_id": run_id})
    assert done.data["status"] == "SUCCEEDED"
    assert done.data["outputs"] == {"message": "shipped"}


# MCP only: the protocol, resources, sessions and notifications.


async def test_mcp_speaks_2025_11_25_and_says_its_lists_change(service: Service) -> None:
    async with Mcp(service.url).client() as client:
        assert client.protocol_version == "2025-11-25"
        assert "search_skills" in (client.instructions or "")
        capabilities = client.server_capabilities
        assert capabilities.tools is not None
        assert capabilities.tools.list_changed
        assert capabilities.resources is not None
        assert capabilities.resources.list_changed
        tools = {t.name: t for t in (await client.list_tools()).tools}
    order = tools["get_order"]
    assert order.input_schema["required"] == ["order_id"]
    assert order.annotations is not None
    assert order.annotations.read_only_hint is True  # side_effects: false
    assert tools["call_skill_tool"].annotations is not None
    assert tools["call_skill_tool"].annotations.read_only_hint is False


async def test_mcp_answers_at_exactly_mcp_without_a_session(service: Service) -> None:
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    request["params"] = {"name": "get_order", "arguments": {"order_id": "ORD1001"}}
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=service.url) as http:
        response = await http.post("/mcp", json=request, headers=headers)
        assert response.status_code == 200, response.text  # no redirect to /mcp/
        assert "mcp-session-id" not in response.headers
        assert '"isError":false' in response.text
        assert "DHL" in response.text
        # Bound to loopback, a request naming another host is refused (DNS rebinding).
        rebound = await http.post("/mcp", json=request, headers={**headers, "Host": "evil.test"})
        assert rebound.status_code == 421


async def test_a_failed_call_s_answer_says_error_code_once(service: Service) -> None:
    # QA: "error (tool_failed):" came twice in the answer, the text's prefix repeated in
    # structuredContent's message beside its code.
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    request["params"] = {"name": "get_order", "arguments": {"order_id": "ORD9"}}
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as http:
        response = await http.post("/mcp", json=request, headers=headers)
    assert response.text.count("error (tool_failed)") == 1, response.text
    assert '"message":"get_order failed: ValueError: no order ORD9"' in response.text


@pytest.mark.parametrize(
    ("params", "named", "says"),
    [
        (
            {"name": "get_order", "arguments": '{"order_id": "ORD1001"}'},
            "params.arguments",
            "must be a JSON object (the tool's arguments by name), not a string",
        ),
        (
            {"name": "get_order", "arguments": ["ORD1001"]},
            "params.arguments",
            "must be a JSON object (the tool's arguments by name), not an array",
        ),
        ({"arguments": {}}, "params.name", "not missing"),
        ({"name": 7, "arguments": {}}, "params.name", "not a number"),
        ("get_order", "params", "not a string"),
    ],
)
async def test_a_malformed_mcp_tool_call_names_the_field_at_fault(
    service: Service, params: object, named: str, says: str
) -> None:
    # The SDK answered every one of these "Invalid request parameters", naming nothing.
    request = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=service.url) as http:
        response = await http.post("/mcp", json=request, headers=headers)
    assert response.status_code == 200, response.text
    reply = response.json()
    assert reply["id"] == 9
    assert reply["error"]["code"] == -32602
    assert reply["error"]["data"] == {"param": named}
    assert reply["error"]["message"].startswith(f"Invalid params: {named} must be")
    assert says in reply["error"]["message"]


@pytest.mark.parametrize("version", [None, "2026-07-28"])
@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"hello": 1}, ['"jsonrpc": "2.0" is missing', '"method" is missing']),
        ({"jsonrpc": "2.0", "id": 1}, ['"method" is missing']),
        ({"jsonrpc": "1.0", "id": 2, "method": "ping"}, ['"jsonrpc" must be "2.0", not "1.0"']),
        ({"jsonrpc": "2.0", "id": 3, "method": 7}, ['"method" must be a string, not a number']),
        # The SDK took this one for a notification (202, no answer ever came).
        ({"jsonrpc": "2.0", "id": {}, "method": "ping"}, ['"id" must be a string or an integer']),
        ([{"jsonrpc": "2.0", "id": 4, "method": "ping"}], ["an array (a batch)"]),
        (7, ["the body is a number, not a JSON object"]),
    ],
    ids=["no-envelope", "no-method", "jsonrpc-1.0", "method-7", "id-object", "batch", "number"],
)
async def test_a_body_that_is_no_jsonrpc_message_is_invalid_request_saying_what_it_lacks(
    service: Service, body: Any, says: list[str], version: str | None
) -> None:
    # QA: -32602 with pydantic's report of 11 validation errors for union[JSONRPCRequest, ...].
    headers = {"Accept": "application/json, text/event-stream"}
    if version is not None:
        headers["MCP-Protocol-Version"] = version
    async with httpx.AsyncClient(base_url=service.url) as http:
        response = await http.post("/mcp", json=body, headers=headers)
    assert response.status_code == 400, response.text
    reply = response.json()
    sent_id = body.get("id") if isinstance(body, dict) else None
    assert reply["id"] == (sent_id if isinstance(sent_id, int) else None)  # one it can name
    assert reply["error"]["code"] == -32600
    message = reply["error"]["message"]
    assert message.startswith("Invalid Request: ")
    for words in says:
        assert words in message
    assert "validation error" not in message.lower()
    assert len(message) < 300, message


async def test_params_that_are_no_object_are_invalid_params_naming_what_came(
    service: Service,
) -> None:
    request = {"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": ["all"]}
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=service.url) as http:
        response = await http.post("/mcp", json=request, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": 5,
        "error": {
            "code": -32602,
            "message": "Invalid params: params must be an object, not an array",
            "data": {"param": "params"},
        },
    }


def _nested_call(levels: int, array: bool = False) -> str:
    """A ``tools/call`` request whose body nests ``levels`` objects (or arrays) deep."""
    inner = levels - 3  # the request, its params and its arguments are three already
    value = "[" * inner + "1" + "]" * inner if array else '{"a":' * inner + "1" + "}" * inner
    return (
        '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"get_order",'
        f'"arguments":{{"order_id":{value}}}}}}}'
    )


@pytest.mark.parametrize("version", [None, "2026-07-28"])
@pytest.mark.parametrize(
    ("levels", "array"), [(201, False), (2_000, True), (100_003, False)], ids=str
)
async def test_an_mcp_body_nested_too_deeply_is_a_parse_error_saying_so(
    service: Service, levels: int, array: bool, version: str | None
) -> None:
    # QA: a 500 with an OpenAI-style internal_error (RecursionError in the transport's own
    # parse); past the SDK's parser's limit, "recursion limit exceeded at line 1 column
    # 1090", or on the 2026 protocol's path a bare "Parse error", or the call was served.
    headers = {"Accept": "application/json, text/event-stream"}
    if version is not None:
        headers["MCP-Protocol-Version"] = version
    headers["Content-Type"] = "application/json"
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as http:
        response = await http.post("/mcp", content=_nested_call(levels, array), headers=headers)
    assert response.status_code == 400, response.text
    reply = response.json()
    assert reply["id"] is None
    assert reply["error"]["code"] == -32700
    message = reply["error"]["message"]
    assert message.startswith("Parse error: ")
    assert "nests arrays and objects too deeply" in message
    assert "200 levels" in message
    assert "RecursionError" not in service.log_path.read_text()


async def test_an_mcp_body_as_deep_as_the_sdk_parses_is_served(service: Service) -> None:
    # The limit is the SDK's own parser's (200 levels): one level more is refused, no less.
    headers = {"Accept": "application/json, text/event-stream"}
    headers["Content-Type"] = "application/json"
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as http:
        deepest = await http.post("/mcp", content=_nested_call(200), headers=headers)
        beyond = await http.post("/mcp", content=_nested_call(201), headers=headers)
    assert deepest.status_code == 200, deepest.text
    assert "invalid_arguments" in deepest.text  # served: the tool refused the order_id
    assert beyond.status_code == 400, beyond.text
    assert "nests arrays and objects too deeply" in beyond.json()["error"]["message"]


async def test_the_mcp_body_limit_is_the_service_s_request_limit(service: Service) -> None:
    # QA: the SDK's own 4 MiB limit, answered in plain text "Request body too large";
    # the README documents SKILLDESK_MAX_REQUEST_BYTES (16 MiB) and `request_too_large`.
    headers = {"Accept": "application/json, text/event-stream"}

    def ping(pad: int) -> dict[str, Any]:
        return {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "ping",
            "params": {"_meta": {"pad": "x" * pad}},
        }

    async with httpx.AsyncClient(base_url=service.url, timeout=60) as http:
        served = await http.post("/mcp", json=ping(5 * 1024 * 1024), headers=headers)
        refused = await http.post("/mcp", json=ping(16 * 1024 * 1024), headers=headers)
    assert served.status_code == 200, served.text[:200]
    assert '"result":{}' in served.text
    assert refused.status_code == 413
    assert refused.json()["error"]["code"] == "request_too_large"
    assert "SKILLDESK_MAX_REQUEST_BYTES" in refused.json()["error"]["message"]


async def test_an_unknown_protocol_version_is_refused_naming_the_ones_spoken(
    service: Service,
) -> None:
    # The SDK took any version it did not know for the 2026 protocol and asked for its
    # params._meta envelope, which a client of 1999-01-01 has never heard of.
    request = {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {}}
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "1999-01-01",
    }
    async with httpx.AsyncClient(base_url=service.url) as http:
        response = await http.post("/mcp", json=request, headers=headers)
        stream = await http.get("/mcp", headers=headers)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert response.json()["id"] == 4
    assert error["code"] == -32022
    assert error["data"]["requested"] == "1999-01-01"
    assert {"2025-11-25", "2026-07-28"} <= set(error["data"]["supported"])
    assert "1999-01-01" in error["message"]
    assert "2025-11-25" in error["message"]
    assert stream.status_code == 400
    assert stream.json()["error"]["code"] == -32022


async def test_an_mcp_call_with_an_idempotency_key_runs_once(service: Service) -> None:
    headers = {"Accept": "application/json, text/event-stream", "Idempotency-Key": "mcp-1"}
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    request["params"] = {"name": "bump", "arguments": {}}
    async with httpx.AsyncClient(base_url=service.url) as http:
        first = await http.post("/mcp", json=request, headers=headers)
        again = await http.post("/mcp", json=request, headers=headers)
    assert first.status_code == again.status_code == 200
    assert '"count"' in first.text
    count = first.text.split('"count":')[1].split("}")[0]
    assert f'"count":{count}' in again.text


async def test_a_client_of_the_next_protocol_version_is_served_too(service: Service) -> None:
    async with Client(f"{service.url}/mcp") as client:  # mode "auto": discovers, no handshake
        assert client.protocol_version == "2026-07-28"
        names = [t.name for t in (await client.list_tools()).tools]
        result = await client.call_tool("get_order", {"order_id": "ORD1001"})
    assert "search_skills" in names
    assert result.structured_content == {
        "order_id": "ORD1001",
        "status": "shipped",
        "carrier": "DHL",
    }


async def test_skills_are_resources_read_on_demand(service: Service) -> None:
    async with Mcp(service.url).client() as client:
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        assert {
            "skill://order-lookup/SKILL.md",
            "skill://order-lookup/references/shipping.md",
            "skill://weather-report/SKILL.md",
        } <= listed
        skill_md = await client.read_resource("skill://order-lookup/SKILL.md")
        reference = await client.read_resource("skill://order-lookup/references/shipping.md")
        manifest = await client.read_resource("skill://order-lookup/_manifest")
        with pytest.raises(MCPError) as outside:
            await client.read_resource("skill://order-lookup/../slow-clock/handler.py")
    text = skill_md.contents[0]
    assert getattr(text, "text", "").startswith("---\nname: order-lookup")
    assert "DHL delivers" in getattr(reference.contents[0], "text", "")
    assert '"sha256"' in getattr(manifest.contents[0], "text", "")
    assert outside.value.error.code == -32002
    assert "outside skill 'order-lookup'" in str(outside.value)


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        (
            "skill://weather-report/../../etc/passwd",
            "is not allowed: '../../etc/passwd' is outside skill 'weather-report'; read one of "
            "skill://weather-report/SKILL.md, skill://weather-report/_manifest",
        ),
        (
            "skill://order-lookup/references/nope.md",
            "is not found: skill 'order-lookup' has no reference 'references/nope.md'; read one "
            "of skill://order-lookup/SKILL.md, skill://order-lookup/_manifest, "
            "skill://order-lookup/references/shipping.md",
        ),
        ("skill://x/../../etc/passwd", "is not found: no skill named 'x'; read one of skill://"),
        ("file:///etc/passwd", "is not found: it is not a skill:// resource; read one of skill://"),
    ],
    ids=["outside", "no-such-reference", "no-such-skill", "no-skill-scheme"],
)
async def test_a_resource_refused_says_not_found_or_not_allowed_and_names_some_there_are(
    service: Service, uri: str, says: str
) -> None:
    # QA: "'../../etc/passwd' is outside skill 'weather-report'; use one of []".
    async with Mcp(service.url).client() as client:
        with pytest.raises(MCPError) as refused:
            await client.read_resource(uri)
    assert refused.value.error.code == -32002
    assert f"resource {uri!r} {says}" in str(refused.value)
    assert "[]" not in str(refused.value)


async def test_a_huge_resource_uri_or_protocol_version_is_quoted_cut(service: Service) -> None:
    async with Mcp(service.url).client() as client:
        with pytest.raises(MCPError) as refused:
            await client.read_resource(f"skill://{LONG}/SKILL.md")
    message = str(refused.value)
    assert f"resource 'skill://{'x' * 92}…' is not found: no skill named '{CUT}'" in message
    assert "x" * 101 not in message
    assert refused.value.error.data == {"uri": f"skill://{'x' * 92}…"}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": LONG}
    request = {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {}}
    async with httpx.AsyncClient(base_url=service.url) as http:
        response = await http.post("/mcp", json=request, headers=headers)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"].startswith(f"Unsupported protocol version '{CUT}'")
    assert error["data"]["requested"] == CUT
    assert "x" * 101 not in response.text


@pytest.mark.parametrize("length", [5_000, 4_000_000])
async def test_a_huge_unknown_method_is_quoted_cut_in_method_not_found(
    service: Service, length: int
) -> None:
    # Review: the SDK's "Method not found" quoted the whole method sent (its data).
    request = {"jsonrpc": "2.0", "id": 8, "method": "x" * length, "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=service.url, timeout=60) as http:
        response = await http.post("/mcp", json=request, headers=headers)
    assert response.status_code == 200, response.text[:300]
    assert len(response.text) < 500, response.text[:300]
    reply = json.loads(response.text.split("data: ", 1)[1])
    assert reply["id"] == 8
    assert reply["error"] == {"code": -32601, "message": "Method not found", "data": CUT}


async def test_a_call_longer_than_a_second_reports_progress(service: Service) -> None:
    seen: list[float] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append(value)

    async with Mcp(service.url).client() as client:
        result = await client.call_tool("wait", {"seconds": 2.5}, progress_callback=progress)
    assert not result.is_error
    assert result.structured_content == {"waited": 2.5}
    assert seen[:2] == [1.0, 2.0]


async def test_a_session_hears_the_lists_change_when_a_skill_or_a_workflow_is_added(
    tmp_path: Path,
) -> None:
    skills, workflows = _content(tmp_path)
    service = Service(_env(skills, workflows), tmp_path / "data")
    heard: list[str] = []
    resources_changed, tools_changed = anyio.Event(), anyio.Event()

    async def on_message(message: Any) -> None:
        heard.append(str(getattr(message, "method", "")))
        if heard[-1] == "notifications/resources/list_changed":
            resources_changed.set()
        if heard[-1] == "notifications/tools/list_changed":
            tools_changed.set()

    events: list[object] = []
    try:
        async with (
            Mcp(service.url).client(message_handler=on_message) as client,
            Client(f"{service.url}/mcp") as modern,  # 2026-07-28: listens instead
            modern.listen(tools_list_changed=True, resources_list_changed=True) as listening,
        ):
            before = [t.name for t in (await client.list_tools()).tools]
            write_skill(
                skills,
                "stock-check",
                "Checks stock of a product. Use it for stock questions.",
                config={
                    "tools": [tool("check_stock", "handler:check", {"sku": {"type": "string"}})]
                },
                handler="def check(sku=''):\n    return {'sku': sku, 'in_stock': 3}\n",
            )
            with anyio.fail_after(15):
                await resources_changed.wait()
                async for event in listening:
                    events.append(event)
                    break
            after = [t.name for t in (await client.list_tools()).tools]
            called = await client.call_tool("check_stock", {"sku": "A1"})

            tools_changed = anyio.Event()
            (workflows / "restock.yaml").write_text(RESTOCK)
            with anyio.fail_after(15):
                await tools_changed.wait()
            listed = {t.name: t for t in (await client.list_tools()).tools}
            started = await client.call_tool(
                "run_workflow", {"workflow": "restock", "inputs": {"sku": "A1"}}
            )
    finally:
        service.stop()
    assert listed["run_workflow"].input_schema["properties"]["workflow"]["enum"] == [
        "lookup",
        "restock",
    ]
    assert started.structured_content is not None
    assert started.structured_content["status"] == "SUCCEEDED"
    assert started.structured_content["outputs"] == {"message": "3 in stock"}
    assert type(events[0]).__name__ == "ToolsListChanged"
    assert "notifications/tools/list_changed" in heard
    assert "check_stock" not in before
    assert "check_stock" in after
    assert called.structured_content == {"sku": "A1", "in_stock": 3}


# OpenAI-style tools only.


def test_every_listed_function_is_valid_for_strict_mode_with_a_safe_name(service: Service) -> None:
    tools = httpx.get(f"{service.url}/v1/tools").json()["tools"]
    for listed in tools:
        function = listed["function"]
        assert function["strict"] is True
        assert strict_problems(function["parameters"]) == [], function["name"]
        assert len(function["name"]) <= 64
        assert function["name"].replace("_", "").replace("-", "").isalnum()
    meta = httpx.get(f"{service.url}/v1/tools", params={"meta_only": "true"}).json()["tools"]
    assert [t["function"]["name"] for t in meta] == [t["function"]["name"] for t in tools][:6]


def test_strict_mode_arguments_and_a_model_s_json_text_are_accepted(service: Service) -> None:
    invoke = f"{service.url}/v1/tools/call_skill_tool/invoke"
    # As strict mode sends them: the free-form object as JSON text; a null for an optional.
    arguments = {
        "skill": "order-lookup",
        "tool": "get_order",
        "arguments": '{"order_id": "ORD1001"}',
    }
    body = httpx.post(invoke, json={"arguments": arguments}).json()
    assert body["ok"], body
    assert body["result"]["carrier"] == "DHL"
    search = f"{service.url}/v1/tools/search_skills/invoke"
    body = httpx.post(search, json={"arguments": '{"query": "parcel", "k": null}'}).json()
    assert body["ok"], body
    assert body["result"]["skills"][0]["name"] == "order-lookup"


def test_the_direct_call_route_answers_as_invoke(service: Service) -> None:
    direct = httpx.post(
        f"{service.url}/v1/skills/order-lookup/tools/get_order",
        json={"arguments": {"order_id": "ORD1001"}},
    ).json()
    invoked = httpx.post(
        f"{service.url}/v1/tools/get_order/invoke", json={"arguments": {"order_id": "ORD1001"}}
    ).json()
    assert {k: v for k, v in direct.items() if k != "ms"} == {
        k: v for k, v in invoked.items() if k != "ms"
    }
    wrong = httpx.post(
        f"{service.url}/v1/skills/weather-report/tools/get_order", json={"arguments": {}}
    )
    assert wrong.status_code == 404
    assert wrong.json()["error"]["code"] == "tool_not_found"


def test_a_retried_invoke_with_its_idempotency_key_does_not_run_again(service: Service) -> None:
    bump = f"{service.url}/v1/tools/bump/invoke"
    first = httpx.post(bump, json={}, headers={"Idempotency-Key": "retry-1"}).json()
    retried = httpx.post(bump, json={}, headers={"Idempotency-Key": "retry-1"}).json()
    other = httpx.post(bump, json={}, headers={"Idempotency-Key": "retry-2"}).json()
    assert first["ok"], first
    assert retried["result"] == first["result"]
    assert other["result"]["count"] == first["result"]["count"] + 1


def test_a_retried_workflow_start_with_its_key_answers_the_first_run(service: Service) -> None:
    start = f"{service.url}/v1/tools/run_workflow/invoke"
    body = {"arguments": {"workflow": "lookup", "inputs": {"order_id": "ORD1001"}}}
    first = httpx.post(start, json=body, headers={"Idempotency-Key": "wf-1"}).json()
    retried = httpx.post(start, json=body, headers={"Idempotency-Key": "wf-1"}).json()
    assert first["ok"], first
    assert retried["result"]["run_id"] == first["result"]["run_id"]
    waiting = httpx.get(f"{service.url}/v1/approvals").json()["approvals"]
    assert [a["run_id"] for a in waiting].count(first["result"]["run_id"]) == 1
    assert len(waiting) == len({a["run_id"] for a in waiting})  # no second run asked for
    other = {"arguments": {"workflow": "lookup", "inputs": {"order_id": "ORD1002"}}}
    refused = httpx.post(start, json=other, headers={"Idempotency-Key": "wf-1"}).json()
    assert not refused["ok"]
    assert refused["error"]["code"] == "idempotency_key_reused"


@pytest.mark.parametrize(
    ("method", "path", "code"),
    [
        ("GET", f"/v1/skills/{LONG}", "skill_not_found"),
        ("POST", f"/v1/skills/{LONG}/tools/get_order", "skill_not_found"),
        ("POST", f"/v1/skills/order-lookup/tools/{LONG}", "tool_not_found"),
        ("GET", f"/v1/skills/{LONG}/examples", "skill_not_found"),
        ("DELETE", f"/v1/skills/{LONG}/examples/{LONG}", "example_not_found"),
    ],
    ids=["definition", "call-skill", "call-tool", "examples", "delete-example"],
)
def test_the_skills_routes_quote_a_huge_name_cut(
    service: Service, method: str, path: str, code: str
) -> None:
    # Review: the direct-call route and its neighbours quoted a 5,000-character name whole.
    body = {"arguments": {}} if method == "POST" else None
    response = httpx.request(method, f"{service.url}{path}", json=body)
    assert response.status_code == 404, response.text[:300]
    error = response.json()["error"]
    assert error["code"] == code
    assert f"'{CUT}'" in error["message"]
    assert "x" * 101 not in response.text


async def test_an_idempotency_key_too_long_is_refused_alike_over_mcp_and_http(
    service: Service,
) -> None:
    # Both surfaces take the same limit (app.idempotency): 200 characters, not one more.
    request = {"jsonrpc": "2.0", "id": 6, "method": "tools/call"}
    request["params"] = {"name": "get_order", "arguments": {"order_id": "ORD1001"}}
    arguments = {"arguments": {"order_id": "ORD1001"}}
    answers = {}
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as http:
        for length in (200, 201):
            key = {"Idempotency-Key": "k" * length}
            headers = {"Accept": "application/json, text/event-stream", **key}
            mcp = await http.post("/mcp", json=request, headers=headers)
            invoked = await http.post("/v1/tools/get_order/invoke", json=arguments, headers=key)
            answers[length] = (mcp, invoked)
    mcp, invoked = answers[200]
    assert '"isError":false' in mcp.text, mcp.text
    assert invoked.status_code == 200, invoked.text
    mcp, invoked = answers[201]
    assert "the Idempotency-Key header is longer than 200 characters" in mcp.text, mcp.text
    assert '"code":-32602' in mcp.text
    assert invoked.status_code == 400, invoked.text
