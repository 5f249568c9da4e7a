"""The OpenAPI document is the service's contract: every answer the service gives is
documented for its route, status and content type, and validates against the documented
schema; the request schemas refuse what the service refuses and take what it takes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, get_args

import pytest
from fastapi.testclient import TestClient
from langchain_core.messages import AIMessage

from agents.events import (
    ApprovalRequired,
    ErrorRaised,
    Event,
    NodeFinished,
    NodeStarted,
    ReasoningSummary,
    RouteDecided,
    RunFailed,
    RunFinished,
    Token,
    ToolCalled,
    ToolReturned,
)
from app.api.routes import threads
from app.main import create_app
from app.services import Services
from app.settings import Settings
from tests.contract import (
    Document,
    check_documented,
    closed,
    errors_of,
    event_errors,
    operation,
    sse_events,
)
from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.skillkit import copy_fixture_skill, write_skill

LIMIT = 300_000  # request bytes: room for a message at the text limit
CHAT, RUN = "/v1/chat/completions", "/v1/threads/{}/runs/stream"
TOOL = "/v1/skills/order-lookup/tools/get_order"
USER = {"role": "user", "content": "Where is my order?"}
ERROR = {"$ref": "#/components/schemas/ErrorResponse"}
LOOKUP = """
name: lookup
description: Looks an order up; a person approves.
inputs: {order_id: {type: string}}
nodes:
  - {id: order, kind: tool, tool: get_order, arguments: {order_id: "{{ inputs.order_id }}"}}
  - {id: ok, kind: approval, summary: "Order {{ nodes.order.output.order_id }}?"}
outputs: {message: "{{ nodes.order.output.status }}"}
"""
START = ("/v1/workflows/lookup/runs", {"inputs": {"order_id": "ORD1001"}})


@pytest.fixture(scope="module")
def client(
    _fake_llm_server: FakeLLM, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    """One app for the module: two skills and a broken one, a default model profile and an
    impatient one (for timeouts), a small body limit; server errors are answered, not raised."""
    root = tmp_path_factory.mktemp("openapi")
    skills = root / "skills"
    copy_fixture_skill(skills, "storefront/order-lookup")
    write_skill(
        skills, "weather-report", "Current weather for a city.", config={"triggers": ["weather"]}
    )
    (root / "workflows").mkdir()
    (root / "workflows" / "lookup.yaml").write_text(LOOKUP)
    (skills / "broken").mkdir()
    (skills / "broken" / "SKILL.md").write_text("---\nname: Broken Name\n---\nbody\n")
    models, base = root / "models.yaml", _fake_llm_server.base_url
    profile = f"{{model: openai/fake-model, api_base: '{base}'"
    models.write_text(
        f"default: main\nprofiles:\n  main: {profile}}}\n"
        f"  impatient: {profile}, timeout_s: 0.3, retries: 0}}\n"
    )
    with pytest.MonkeyPatch.context() as env:  # the developer's settings stay out
        for name in [n for n in os.environ if n.startswith("SKILLDESK_")]:
            env.delenv(name)
        settings = Settings(
            data_dir=root / "data",
            skills_dir=skills,
            skills_watch=False,
            skills_embeddings=False,
            workflows_dir=root / "workflows",
            models_file=models,
            max_request_bytes=LIMIT,
        )
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def document(client: TestClient) -> Document:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    return dict(response.json())


# --- Probes: a request and the status it gets ------------------------------------------

Patch = Callable[[Services, pytest.MonkeyPatch], None]


@dataclass(frozen=True)
class Probe:
    """One request and the status it must get."""

    name: str
    method: str
    path: str
    status: int
    json: Any = None
    replies: tuple[Reply, ...] = ()
    headers: dict[str, str] = field(default_factory=dict)
    content: bytes | None = None
    params: dict[str, Any] | None = None
    before: tuple[tuple[str, dict[str, Any]], ...] = ()  # runs that set the scene
    patch: Patch | None = None  # breaks something, for a status no request reaches


def chat(name: str, status: int, body: dict[str, Any] | None = None, **more: Any) -> Probe:
    return Probe(name, "POST", CHAT, status, {"messages": [USER], **(body or {})}, **more)


def run(name: str, status: int, body: dict[str, Any], thread: str = "p-1", **more: Any) -> Probe:
    return Probe(name, "POST", RUN.format(thread), status, body, **more)


def get(name: str, path: str, status: int, **more: Any) -> Probe:
    return Probe(name, "GET", path, status, **more)


def _failed_run(code: str) -> Patch:
    async def failed(*_: Any, **__: Any) -> RunFailed:
        return RunFailed("t", "r", code, f"the model failed ({code})")

    return lambda services, mp: mp.setattr(services.conversations, "run", failed)


def _fails_after_a_token(services: Services, mp: pytest.MonkeyPatch) -> None:
    async def stream(*_: Any, **__: Any) -> AsyncIterator[Event]:
        yield Token("It ships", "assistant")
        yield RunFailed("t", "r", "model_unavailable", "the connection dropped")

    mp.setattr(services.conversations, "stream", stream)


def _raises(name: str) -> Patch:
    async def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("a bug")

    def patch(services: Services, mp: pytest.MonkeyPatch) -> None:
        owner = services.checkpointer if name == "aget_tuple" else services.conversations
        mp.setattr(owner, name, broken)

    return patch


FAILING = (Reply(status=500),) * 3  # the first try and two retries
TOOL_RUN = (
    Reply(tool_calls=[ToolCall("get_order", {"order_id": "ORD1001"})]),
    Reply(content="Shipped."),
)
ORDER = {"message": "where is my order ORD1001?", "skill": "order-lookup"}
MULTI = {"message": "where is my order ORD1001 and what is the weather in Paris"}
STREAM = {"stream": True}
JSON_TYPE = {"Content-Type": "application/json"}
PROBES = [
    get("healthz", "/healthz", 200),
    get("ready", "/readyz", 200),
    get("not ready", "/readyz", 503, patch=_raises("aget_tuple")),
    get("models", "/v1/models", 200),
    chat("chat", 200, replies=(Reply(content="Today."),)),
    chat(
        "chat streamed",
        200,
        {**STREAM, "stream_options": {"include_usage": True}},
        replies=(Reply(content="It ships today."),),
    ),
    chat("chat stream failing after a token", 200, STREAM, patch=_fails_after_a_token),
    Probe("chat not JSON", "POST", CHAT, 400, content=b'{"messages": [', headers=JSON_TYPE),
    chat("chat without messages", 400, {"messages": []}),
    chat(
        "chat tool role", 400, {"messages": [{"role": "tool", "content": "1", "tool_call_id": "c"}]}
    ),
    chat("chat bad thread id", 400, headers={"X-Thread-Id": "../x"}),
    chat("chat unknown skill", 400, {"skill": "nope"}),
    chat("chat too large", 413, {"messages": [{"role": "user", "content": "x" * LIMIT}]}),
    chat("chat model fails", 502, replies=FAILING),
    chat("chat stream model fails", 502, STREAM, replies=FAILING),
    chat("chat no model", 503, patch=_failed_run("no_model_configured")),
    chat(
        "chat model timeout",
        504,
        {"model": "impatient"},
        replies=(Reply(content="late", delay=1.0),),
    ),
    chat("chat internal error", 500, patch=_raises("run")),
    run("run with a tool", 200, ORDER, replies=TOOL_RUN),
    run("run whose model fails", 200, {"message": "hello"}, replies=FAILING),
    run("run blank message", 400, {"message": " \n"}),
    run("run unknown skill", 400, {"message": "hi", "skill": "nope"}),
    run("run bad thread id", 400, {"message": "hi"}, thread="-p"),
    run("run too large", 413, {"message": "x" * LIMIT}),
    get(
        "thread with tool calls",
        "/v1/threads/p-2",
        200,
        replies=TOOL_RUN,
        before=((RUN.format("p-2"), ORDER),),
    ),
    get(
        "thread with a plan",
        "/v1/threads/p-3",
        200,
        replies=(Reply(content="Shipped; sunny."),),
        before=((RUN.format("p-3"), MULTI),),
    ),
    get("unknown thread", "/v1/threads/p-none", 404),
    get("bad thread id", "/v1/threads/-p", 400),
    get("thread internal error", "/v1/threads/p-2", 500, patch=_raises("state")),
    get("skills", "/v1/skills", 200),
    get("workflows", "/v1/workflows", 200),
    get("workflow", "/v1/workflows/lookup", 200),
    get("unknown workflow", "/v1/workflows/nope", 404),
    Probe("start a workflow", "POST", START[0], 200, START[1]),
    Probe("start without inputs", "POST", START[0], 400, {"inputs": {}}),
    Probe("start an unknown workflow", "POST", "/v1/workflows/nope/runs", 404, {}),
    get("workflow runs", "/v1/workflow-runs", 200, before=(START,)),
    get("workflow run", "/v1/workflow-runs/{run}", 200, before=(START,)),
    get("unknown workflow run", "/v1/workflow-runs/nope", 404),
    get("workflow runs, too many", "/v1/workflow-runs", 400, params={"limit": 0}),
    get("approvals", "/v1/approvals", 200, before=(START,)),
    Probe(
        "approve", "POST", "/v1/approvals/{approval}", 200, {"decision": "approve"}, before=(START,)
    ),
    Probe(
        "approve twice",
        "POST",
        "/v1/approvals/{approval}",
        409,
        {"decision": "reject"},
        before=(START, ("/v1/approvals/{approval}", {"decision": "approve"})),
    ),
    Probe("approve nothing", "POST", "/v1/approvals/nope-x-0", 404, {"decision": "approve"}),
    Probe(
        "fork",
        "POST",
        "/v1/workflow-runs/{run}/fork",
        200,
        {"node": "ok"},
        before=(START, ("/v1/approvals/{approval}", {"decision": "approve"})),
    ),
    Probe(
        "fork a waiting run",
        "POST",
        "/v1/workflow-runs/{run}/fork",
        409,
        {"node": "ok"},
        before=(START,),
    ),
    Probe("fork nothing", "POST", "/v1/workflow-runs/nope/fork", 404, {"node": "ok"}),
    Probe("fork how?", "POST", "/v1/workflow-runs/nope/fork", 400, {"node": ""}),
    Probe(
        "approve how?",
        "POST",
        "/v1/approvals/{approval}",
        400,
        {"decision": "maybe"},
        before=(START,),
    ),
    get("search", "/v1/skills/search", 200, params={"q": "where is my order", "k": 3}),
    get("search without a query", "/v1/skills/search", 400, params={"q": ""}),
    get("skill", "/v1/skills/order-lookup", 200),
    get("unknown skill", "/v1/skills/order-lokup", 404),
    Probe("tool", "POST", TOOL, 200, {"arguments": {"order_id": "ORD1001"}}),
    Probe("tool refusing its arguments", "POST", TOOL, 200, {"arguments": {"order_id": "x"}}),
    Probe("tool of an unknown skill", "POST", "/v1/skills/nope/tools/get_order", 404, {}),
    Probe("tool the skill lacks", "POST", "/v1/skills/weather-report/tools/get_order", 404, {}),
    Probe("tool call unwrapped", "POST", TOOL, 400, {"order_id": "ORD1001"}),
    Probe("tool call too large", "POST", TOOL, 413, {"arguments": {"x": "x" * LIMIT}}),
]


@pytest.mark.parametrize("probe", PROBES, ids=[p.name for p in PROBES])
def test_every_answer_is_documented_and_matches_its_schema(
    probe: Probe,
    client: TestClient,
    document: Document,
    fake_llm: FakeLLM,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_llm.script(*probe.replies)
    ids: dict[str, str] = {}  # what earlier requests made: {run} and {approval} in paths
    for path, body in probe.before:
        made = client.post(path.format(**ids), json=body)
        assert made.status_code == 200, made.text
        if made.headers["content-type"].startswith("application/json"):
            record = made.json()
            waiting = record.get("waiting") or {}
            ids.setdefault("run", record.get("id", ""))
            ids.setdefault("approval", waiting.get("approval_id", "none"))
    if probe.patch is not None:
        probe.patch(client.app.state.services, monkeypatch)  # type: ignore[attr-defined]
    response = client.request(
        probe.method,
        probe.path.format(**ids) if ids else probe.path,
        json=probe.json,
        content=probe.content,
        headers=probe.headers,
        params=probe.params,
    )
    assert response.status_code == probe.status, response.text
    check_documented(document, probe.method, probe.path, response)


def test_every_documented_status_is_probed(document: Document) -> None:
    probed = {(p.method, operation(document, p.method, p.path)[0], str(p.status)) for p in PROBES}
    documented = {
        (method.upper(), path, status)
        for path, item in document["paths"].items()
        for method, op in item.items()
        for status in op["responses"]
        if status != "500"  # any route may fail so; probed on a few
    }
    assert documented - probed == set()
    assert "500" in {status for *_, status in probed}


def test_the_document_knows_no_422_and_errors_are_error_responses(document: Document) -> None:
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    assert "ValidationError" not in schemas
    for path, item in document["paths"].items():
        for method, op in item.items():
            assert "422" not in op["responses"], f"{method} {path}"
            for status, answer in op["responses"].items():
                if status[0] in "45" and path != "/readyz":  # readiness answers its own body
                    assert answer["content"]["application/json"]["schema"] == ERROR


def test_streaming_routes_document_their_event_streams(document: Document) -> None:
    _, chat_op = operation(document, "POST", CHAT)
    answers = chat_op["responses"]["200"]["content"]
    assert sorted(answers) == ["application/json", "text/event-stream"]
    assert answers["application/json"]["schema"] == {"$ref": "#/components/schemas/ChatCompletion"}
    _, run_op = operation(document, "POST", RUN.format("t"))
    events = run_op["responses"]["200"]["content"]
    assert list(events) == ["text/event-stream"]
    names = [
        v["properties"]["event"]["const"]
        for v in events["text/event-stream"]["itemSchema"]["oneOf"]
    ]
    assert {"route_decided", "token", "run_finished", "run_failed"} <= set(names)


def test_every_event_type_a_run_can_send_is_documented(document: Document) -> None:
    samples: list[Event] = [
        NodeStarted("route"),
        RouteDecided("skill", "a", "retrieval", [{"name": "a", "score": 0.7}], ["a"], "score 0.70"),
        ToolCalled("get_order", {"order_id": "ORD1"}, "call_1", "t1"),
        ToolReturned("get_order", "call_1", False, "error (tool_failed): no order", "t1"),
        Token("Shipped", "expert"),
        ReasoningSummary("Looking the order up first.", "expert"),
        ErrorRaised("budget_exhausted", "no model calls left", "t2"),
        ApprovalRequired("r1-approve-0", "r1", "approve", "Refund 488?", {"amount": 488}),
        NodeFinished("order", None, False, 3.5, "refund-request", "no order ORD9"),
        NodeFinished("expert", None, True, 12.5),
        RunFinished("t", "r", AIMessage("Shipped."), {"total_tokens": 9}),
        RunFailed("t", "r", "model_timeout", "the model did not answer in time", {"profile": "a"}),
    ]
    assert {type(s) for s in samples} == set(get_args(Event))  # a new event type needs a sample

    async def streamed() -> str:
        async def events() -> AsyncIterator[Event]:
            for sample in samples:
                yield sample

        return "".join([line async for line in threads._sse(events())])

    _, run_op = operation(document, "POST", RUN.format("t"))
    item_schema = closed(run_op["responses"]["200"]["content"]["text/event-stream"]["itemSchema"])
    for event in sse_events(asyncio.run(streamed())):
        assert event_errors(item_schema, event, closed(document)) == []


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("DELETE", "/v1/models", "GET"),
        ("GET", CHAT, "POST"),
        ("PUT", "/v1/threads/t", "GET"),
        ("GET", TOOL, "POST"),
    ],
)
def test_method_not_allowed_says_which_are(
    client: TestClient, document: Document, method: str, path: str, allow: str
) -> None:
    response = client.request(method, path)
    assert response.status_code == 405
    assert response.headers["Allow"] == allow
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert errors_of(closed(ERROR), response.json(), closed(document)) == []


# --- Request schemas: as strict as the service ----------------------------------------


@dataclass(frozen=True)
class Body:
    """A request body and whether the service takes it."""

    name: str
    path: str
    json: Any
    taken: bool


def chat_body(name: str, taken: bool, *messages: Any, **more: Any) -> Body:
    return Body(name, CHAT, {"messages": list(messages or [USER]), **more}, taken)


def parts(*content: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(content)}


TEXT = {"type": "text", "text": "hi"}
IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
SYSTEM = {"role": "system", "content": "Be terse."}
TAKEN, REFUSED = True, False
RUN_B = RUN.format("b-1")
BODIES = [
    chat_body("user text", TAKEN),
    chat_body(
        "system, model, OpenAI extras",
        TAKEN,
        SYSTEM,
        USER,
        model="gpt-4o",
        temperature=0.2,
        stream=None,
        stream_options=None,
    ),
    chat_body(
        "developer, text and image parts",
        TAKEN,
        {"role": "developer", "content": [TEXT]},
        parts(TEXT, IMAGE),
    ),
    chat_body(
        "audio",
        TAKEN,
        parts({"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}),
    ),
    chat_body("file", TAKEN, parts({"type": "file", "file": {"file_id": "file-1"}})),
    chat_body(
        "history, empty tool_calls",
        TAKEN,
        USER,
        {"role": "assistant", "content": "Ok.", "tool_calls": []},
        USER,
    ),
    chat_body("a skill", TAKEN, skill="order-lookup"),
    Body("no messages", CHAT, {"messages": []}, REFUSED),
    Body("messages not a list", CHAT, {"messages": "hi"}, REFUSED),
    chat_body("tool role", REFUSED, {"role": "tool", "content": "42", "tool_call_id": "c1"}),
    chat_body(
        "client tool calls",
        REFUSED,
        USER,
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        USER,
    ),
    chat_body("tool calls on a user message", REFUSED, {**USER, "tool_calls": [CALL]}),
    chat_body("unknown role", REFUSED, {"role": "robot", "content": "hi"}),
    chat_body("user without content", REFUSED, {"role": "user"}),
    chat_body("a string part", REFUSED, parts("hi")),
    chat_body("text part without text", REFUSED, parts({"type": "text"})),
    chat_body("refusal from the user", REFUSED, parts({"type": "refusal", "refusal": "no"})),
    chat_body("image without url", REFUSED, parts({"type": "image_url", "image_url": {"url": ""}})),
    chat_body(
        "file without id or data", REFUSED, parts({"type": "file", "file": {"filename": "a.pdf"}})
    ),
    chat_body("image in a system message", REFUSED, {"role": "system", "content": [IMAGE]}, USER),
    chat_body("text over the limit", REFUSED, {"role": "user", "content": "x" * 100_001}),
    chat_body("text part over the limit", REFUSED, parts({"type": "text", "text": "x" * 100_001})),
    chat_body("stream not a boolean", REFUSED, stream="yes"),
    chat_body("include_usage not a boolean", REFUSED, stream_options={"include_usage": "1"}),
    chat_body("a skill name no skill can have", REFUSED, skill="Order Lookup"),
    chat_body("an empty workflow name", REFUSED, workflow=""),
    Body("a message", RUN_B, {"message": "hello"}, TAKEN),
    Body("nulls and extras", RUN_B, {"message": "hi", "skill": None, "model": None, "x": 1}, TAKEN),
    Body("a message for a skill", RUN_B, {"message": "hello", "skill": "order-lookup"}, TAKEN),
    Body("an empty message", RUN_B, {"message": ""}, REFUSED),
    Body("a blank message", RUN_B, {"message": " \n\t"}, REFUSED),
    Body("no message", RUN_B, {}, REFUSED),
    Body("a null message", RUN_B, {"message": None}, REFUSED),
    Body("a number", RUN_B, {"message": 5}, REFUSED),
    Body("a message over the limit", RUN_B, {"message": "x" * 100_001}, REFUSED),
    Body("a skill name no skill can have", RUN_B, {"message": "hi", "skill": "Bad Name"}, REFUSED),
    Body("an empty workflow name", RUN_B, {"message": "hi", "workflow": ""}, REFUSED),
    Body("arguments", TOOL, {"arguments": {"order_id": "ORD1001"}}, TAKEN),
    Body("no arguments", TOOL, {}, TAKEN),
    Body("arguments unwrapped", TOOL, {"order_id": "ORD1001"}, REFUSED),
    Body("arguments not an object", TOOL, {"arguments": []}, REFUSED),
    Body("arguments and more", TOOL, {"arguments": {}, "extra": 1}, REFUSED),
]
# Refusals no JSON Schema states, so the schema says them in words: the last message must be
# the user's and say something; the text of all its parts together is limited; a skill or a
# workflow must be installed; on a thread, which messages are new depends on its history.


@pytest.mark.parametrize("body", BODIES, ids=[f"{b.path.split('/')[2]}: {b.name}" for b in BODIES])
def test_request_schemas_refuse_what_the_service_refuses(
    body: Body, client: TestClient, document: Document, fake_llm: FakeLLM
) -> None:
    _, documented = operation(document, "POST", body.path)
    schema = documented["requestBody"]["content"]["application/json"]["schema"]
    assert (errors_of(schema, body.json, document) == []) is body.taken
    answered = body.taken and body.path != TOOL  # a direct tool call needs no model
    fake_llm.script(*([Reply(content="ok")] if answered else []))
    response = client.post(body.path, json=body.json)
    assert response.status_code == (200 if body.taken else 400), response.text
    assert len(fake_llm.requests) == answered
