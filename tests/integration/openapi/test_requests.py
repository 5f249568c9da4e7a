"""The request schemas refuse what the service refuses and take what it takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.contract import (
    Document,
    errors_of,
    operation,
)
from tests.fakellm import FakeLLM, Reply
from tests.integration.openapi.kit import CHAT, RUN, TOOL, USER

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
        "image url not a URL", REFUSED, parts({"type": "image_url", "image_url": {"url": "a b"}})
    ),
    chat_body(
        "audio not base64",
        REFUSED,
        parts({"type": "input_audio", "input_audio": {"data": "!!", "format": "wav"}}),
    ),
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
    chat_body("a skill and a workflow", REFUSED, skill="order-lookup", workflow="order-overview"),
    chat_body("a skill, no workflow", TAKEN, skill="order-lookup", workflow=None),
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
    Body(
        "a skill and a workflow",
        RUN_B,
        {"message": "hi", "skill": "order-lookup", "workflow": "order-overview"},
        REFUSED,
    ),
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
