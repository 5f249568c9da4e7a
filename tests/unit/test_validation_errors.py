"""A request's validation errors as a client reads them, through a small app with the
service's error handlers: where a body stops being JSON, a dict's keys told from a union's
members."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from app.api.errors import install_error_handlers


class Part(BaseModel):
    text: str


class Person(TypedDict):
    Name: str
    Age: int


class Thing(BaseModel):
    content: str | list[Part] = ""
    part: str | Part = ""
    headers: dict[str, int] = {}
    person: Person | None = None
    title: str = Field("", max_length=5)
    tags: list[str] = Field(default_factory=list, min_length=0, max_length=2)
    name: str = Field("x", min_length=1)


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/things")
    async def make(thing: Thing) -> dict[str, Any]:
        return thing.model_dump()

    with TestClient(app) as test_client:
        yield test_client


def error_of(client: TestClient, body: Any = None, content: bytes | None = None) -> Any:
    headers = {"Content-Type": "application/json"}
    response = client.post("/things", json=body, content=content, headers=headers)
    assert response.status_code == 400, response.text
    return response.json()["error"]


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (
            b'{\n  "title": "a",\n  "n": 1,\n}',
            "Expecting property name enclosed in double quotes at line 4, column 1 "
            '(character offset 28): found \'}\' after \'\u2026"title": "a",\\n  "n": 1,\\n\'.',
        ),
        (
            b'{"a": "abc',
            "Unterminated string starting at line 1, column 7 (character offset 6): "
            "found '\"abc' after '{\"a\": '.",
        ),
        (b'{"a": 1}}', "Extra data at line 1, column 9 (character offset 8): found '}' after"),
        (b'{"a": [', "Expecting value at line 1, column 8 (character offset 7): the body ends"),
        (b"nope", "Expecting value at line 1, column 1 (character offset 0): found 'nope' at"),
    ],
)
def test_a_body_that_is_not_json_says_where_it_breaks(
    client: TestClient, raw: bytes, where: str
) -> None:
    # QA: "The request body is not valid JSON (Expecting value)." and no more: which line?
    error = error_of(client, content=raw)
    assert (error["code"], error["param"]) == ("invalid_json", None)
    assert error["message"].startswith("The request body is not valid JSON: ")
    assert where in error["message"]


def test_the_excerpt_of_a_long_body_is_short() -> None:
    from app.api.validation import not_json

    text = '{"a": "' + "x" * 5000 + '", "b": ]' + "y" * 5000
    at = text.index("]")
    message = not_json({"loc": ("body", at), "ctx": {"error": "Expecting value"}}, text)
    assert len(message) < 200
    excerpt = "found ']" + "y" * 11 + "\u2026' after '\u2026" + "x" * 16 + '", "b": \''
    assert excerpt in message


def test_a_dict_s_capitalised_keys_are_named_not_read_as_union_members(
    client: TestClient,
) -> None:
    # Review: a segment of a class's form (``Accept``) was taken for a union member's label,
    # so two bad keys read "headers must be an accept or a host, not a string".
    error = error_of(client, {"headers": {"Accept": "any", "Host": "h"}, "content": 5})
    assert error["message"] == (
        "Invalid request: content must be a string or a list of parts, not a number; "
        "headers.Accept must be an integer; headers.Host must be an integer"
    )
    assert error["param"] == "content"


def test_a_typed_dict_s_capitalised_keys_are_named_wrong_or_missing(client: TestClient) -> None:
    error = error_of(client, {"person": {"Name": 7}})
    assert error["message"] == (
        "Invalid request: person.Name must be a string, not a number; person.Age: Field required"
    )
    assert error["param"] == "person.Name"


def test_keys_named_as_types_are_keys(client: TestClient) -> None:
    error = error_of(client, {"headers": {"str": "a", "int": "b"}})
    assert error["message"] == (
        "Invalid request: headers.str must be an integer; headers.int must be an integer"
    )


def test_a_union_member_s_label_that_is_also_a_key_still_folds(client: TestClient) -> None:
    # The member ``Part`` is handed the whole object, which has a key "Part" too.
    error = error_of(client, {"part": {"Part": 1}, "headers": {"Part": "x"}})
    assert error["message"] == (
        "Invalid request: part.text: Field required; headers.Part must be an integer"
    )


@pytest.mark.parametrize(
    ("body", "param", "said"),
    [
        ({"title": "x" * 100_001}, "title", "title must be at most 5 characters, not 100,001"),
        ({"tags": ["a", "b", "c"]}, "tags", "tags must have at most 2 items, not 3"),
        ({"name": ""}, "name", "name must be at least 1 character, not 0"),
    ],
)
def test_a_length_out_of_bounds_says_the_bound_and_what_came_in_words(
    client: TestClient, body: dict[str, Any], param: str, said: str
) -> None:
    # QA: "message: String should have at most 100000 characters", pydantic's words.
    error = error_of(client, body)
    assert error["param"] == param
    assert said in error["message"], error["message"]
    assert "should have" not in error["message"]
