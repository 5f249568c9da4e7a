"""A bad query, path or header parameter is named as the client sends it, says where it goes,
and says in words what it may be: never pydantic's ``query.limit`` or a regular expression;
and the answer is the documented error."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.contract import Document, check_documented

THREAD, RUN_ID = "t-1", "00000000-0000-0000-0000-000000000000"
THREAD_ID_WORDS = (
    "must be 1–128 characters of letters, digits, '.', '_', ':' or '-', starting with a "
    "letter or digit"
)
TID = f" {THREAD_ID_WORDS}"


@dataclass(frozen=True)
class Bad:
    """A request with one bad parameter, and what its error must say of it."""

    method: str
    template: str  # the documented path
    where: str  # "path", "query" or "header"
    name: str
    value: str
    says: str  # what follows "<name> (<where> parameter)"
    path: str = ""  # the request's path, when the template has parameters

    @property
    def url(self) -> str:
        return self.path or self.template


BADS = [
    Bad("GET", "/v1/threads/{thread_id}", "path", "thread_id", "bad id!", TID),
    Bad("GET", "/v1/threads/{thread_id}", "path", "thread_id", "a" * 129, TID),
    Bad("PATCH", "/v1/threads/{thread_id}", "path", "thread_id", ".dot", TID),
    Bad("DELETE", "/v1/threads/{thread_id}", "path", "thread_id", "a b", TID),
    Bad("POST", "/v1/threads/{thread_id}/fork", "path", "thread_id", "a b", TID),
    Bad("POST", "/v1/threads/{thread_id}/resume", "path", "thread_id", "a b", TID),
    Bad("POST", "/v1/threads/{thread_id}/runs/stream", "path", "thread_id", "a b", " must be 1"),
    Bad("GET", "/v1/threads/{thread_id}/history", "path", "thread_id", "a b", " must be 1"),
    Bad(
        "GET",
        "/v1/threads/{thread_id}/runs/{run_id}",
        "path",
        "run_id",
        "nope",
        " must be a run id: 36 characters, lowercase hex digits and '-' (a UUID)",
        path=f"/v1/threads/{THREAD}/runs/nope",
    ),
    Bad(
        "POST",
        "/v1/threads/{thread_id}/runs/{run_id}/feedback",
        "path",
        "run_id",
        "a b",
        " must be 1 to 64 characters: ASCII letters, digits and '-'",
        path=f"/v1/threads/{THREAD}/runs/a b/feedback",
    ),
    Bad(
        "GET",
        "/v1/threads/{thread_id}/attachments/{attachment_id}",
        "path",
        "attachment_id",
        "file.png",
        " must be an attachment id: 'att_' and 1 to 64 lowercase hex digits",
        path=f"/v1/threads/{THREAD}/attachments/file.png",
    ),
    Bad(
        "DELETE",
        "/v1/admin/keys/{key_id}",
        "path",
        "key_id",
        "sk-123",
        " must be a key id: 'key_' and 12 lowercase hex digits",
        path="/v1/admin/keys/sk-123",
    ),
    Bad("GET", "/v1/threads", "query", "limit", "0", ": Input should be greater than or equal"),
    Bad("GET", "/v1/threads", "query", "limit", "lots", " must be an integer"),
    Bad("GET", "/v1/threads", "query", "all", "maybe", " must be true or false"),
    Bad("GET", "/v1/threads/{thread_id}", "query", "summarised", "maybe", " must be true or"),
    Bad("GET", "/v1/threads/{thread_id}/history", "query", "limit", "201", ": Input should be"),
    Bad(
        "GET",
        "/v1/threads/{thread_id}/history",
        "query",
        "before",
        "c" * 201,
        " must be at most 200 characters, not 201",
    ),
    Bad("GET", "/v1/approvals", "query", "thread_id", "a b", TID),
    Bad("GET", "/v1/approvals", "query", "limit", "501", ": Input should be less than"),
    Bad("GET", "/v1/workflow-runs", "query", "status", "bogus", ": Input should be 'RUNNING'"),
    Bad("GET", "/v1/workflow-runs", "query", "limit", "-1", ": Input should be greater than"),
    Bad("GET", "/v1/admin/keys", "query", "limit", "501", ": Input should be less than"),
    Bad("GET", "/v1/skills/search", "query", "q", "", " must be at least 1 character, not 0"),
    Bad("GET", "/v1/skills/search", "query", "k", "51", ": Input should be less than"),
    Bad(
        "POST",
        "/v1/threads/{thread_id}/runs/stream",
        "header",
        "Idempotency-Key",
        "k" * 201,
        " must be at most 200 characters, not 201",
    ),
    Bad(
        "GET",
        "/v1/threads/{thread_id}/runs/{run_id}/stream",
        "header",
        "Last-Event-ID",
        "1" * 21,
        " must be at most 20 characters, not 21",
        path=f"/v1/threads/{THREAD}/runs/{RUN_ID}/stream",
    ),
    Bad("GET", "/v1/tools", "query", "strict", "maybe", " must be true or false"),
    Bad("GET", "/v1/tools", "query", "meta_only", "maybe", " must be true or false"),
]


def _request(bad: Bad) -> tuple[str, dict[str, Any]]:
    """The path of ``bad`` with its bad value (or a good thread id), and the request's query,
    headers and a body the route takes."""
    url = bad.url
    if "{thread_id}" in url:
        url = url.replace("{thread_id}", bad.value if bad.where == "path" else THREAD)
    params = {bad.name: bad.value} if bad.where == "query" else {}
    if bad.template == "/v1/skills/search" and bad.name != "q":
        params["q"] = "order"  # required
    body: dict[str, Any] | None = {"message": "hi"} if url.endswith("/runs/stream") else None
    if url.endswith("/fork"):
        body = {"before_message": 0}
    headers = {bad.name: bad.value} if bad.where == "header" else None
    return url, {"params": params, "headers": headers, "json": body}


@pytest.mark.parametrize("bad", BADS, ids=[f"{b.method} {b.template} {b.name}" for b in BADS])
def test_a_bad_parameter_is_named_as_sent_and_said_in_words(
    client: TestClient, document: Document, bad: Bad
) -> None:
    # QA: "query.limit: Input should be ..." (param `query.limit`) and "path.thread_id: String
    # should match pattern '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'".
    url, sent = _request(bad)
    response = client.request(bad.method, url, **sent)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_request", bad.name)
    kind = "header" if bad.where == "header" else f"{bad.where} parameter"
    assert f"Invalid request: {bad.name} ({kind}){bad.says}" in error["message"]
    for internal in ("query.", "path.", "header.", "pattern '", "[A-Za-z"):
        assert internal not in error["message"]
    check_documented(document, bad.method, url, response)


def test_a_thread_id_in_a_body_is_said_in_words_too(client: TestClient) -> None:
    response = client.post("/v1/threads", json={"thread_id": "no spaces please"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "thread_id"
    assert error["message"] == f"Invalid request: thread_id {THREAD_ID_WORDS}"


def test_every_kind_of_checked_parameter_is_probed(document: Document) -> None:
    # Each parameter the service checks (by its name, place and schema) on one route at least.
    documented = {
        (method.upper(), path, p["in"], p["name"]): _kind(p)
        for path, item in document["paths"].items()
        for method, op in item.items()
        for p in op.get("parameters", [])
    }
    checked = {kind for kind in documented.values() if _checked(json.loads(kind[2]))}
    probed = {documented[b.method, b.template, b.where, b.name] for b in BADS}
    # Checked in the service's own words: a page's cursor (``app.api.deps.page_cursor``),
    # chat completions' X-Thread-Id (``app.api.routes.chat``).
    own = {kind for kind in checked if kind[1] in ("cursor", "x-thread-id")}
    assert checked - probed - own == set()


def _kind(parameter: dict[str, Any]) -> tuple[str, str, str]:
    """A parameter's place, name and what its schema allows."""
    schema = {k: v for k, v in parameter["schema"].items() if k not in ("title", "description")}
    return parameter["in"], parameter["name"], json.dumps(schema, sort_keys=True)


def _checked(schema: dict[str, Any]) -> bool:
    """Whether a parameter's schema refuses some text: a pattern, a bound, an enum, a type."""
    keys = {"pattern", "minimum", "maximum", "minLength", "maxLength", "enum"}
    return any(
        keys & set(option) or option.get("type") in ("integer", "boolean")
        for option in [schema, *schema.get("anyOf", [])]
    )
