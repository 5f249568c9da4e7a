"""Per-user isolation: user B walks every operation of the OpenAPI document, and every MCP
method, against user A's thread, attachment, runs and approval; none returns A's data or
changes it (another user's resource is a 404, like one that does not exist). On SQLite and
PostgreSQL."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient
from langchain_core.messages import HumanMessage

from agents.errors import ThreadNotFound
from app.main import create_app
from tests.fakellm import FakeLLM, Reply, ToolCall
from tests.integration.auth.conftest import KEYS, bearer
from tests.integration.threads.conftest import store_url  # noqa: F401  (a fixture)

SECRET_TEXT = "alice's secret: the vault code is 4711"
SECRET_ANSWER = "Noted, the code is safe with me"
SECRET_FILE = b"alice's private notes"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Host": "127.0.0.1:8000"}


@pytest.fixture
def client(keyed_settings: Any, store_url: str) -> Any:  # noqa: F811
    settings = keyed_settings.model_copy(update={"checkpoint_url": store_url})
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def alices_world(client: TestClient, fake_llm: FakeLLM) -> dict[str, str]:
    """What alice owns: a thread with a turn and a file, a chat run, a waiting workflow run."""
    alice = bearer("alice")
    fake_llm.script(Reply(content=SECRET_ANSWER))
    made = client.post("/v1/threads", json={"title": "Alice's plans"}, headers=alice).json()
    thread = made["thread_id"]
    run = client.post(f"/v1/threads/{thread}/runs", json={"message": SECRET_TEXT}, headers=alice)
    assert run.status_code == 202, run.text
    run_id = run.json()["id"]
    for _ in range(200):
        status = client.get(f"/v1/threads/{thread}/runs/{run_id}", headers=alice).json()
        if status["status"] == "succeeded":
            break
        time.sleep(0.05)
    assert status["answer"] == SECRET_ANSWER
    upload = client.post(
        f"/v1/threads/{thread}/attachments",
        files={"file": ("notes.txt", SECRET_FILE, "text/plain")},
        headers=alice,
    )
    assert upload.status_code == 201, upload.text
    history = client.get(f"/v1/threads/{thread}/history", headers=alice).json()["data"]
    workflow = client.post(
        "/v1/workflows/lookup/runs", json={"inputs": {"order_id": "ORD1001"}}, headers=alice
    ).json()
    assert workflow["status"] == "WAITING"
    return {
        "thread": thread,
        "run": run_id,
        "attachment": upload.json()["id"],
        "checkpoint": history[0]["checkpoint_id"],
        "workflow_run": workflow["id"],
        "approval": workflow["waiting"]["approval_id"],
    }


def snapshot(client: TestClient, ids: dict[str, str]) -> dict[str, Any]:
    """Everything of alice's, as alice reads it."""
    alice, thread = bearer("alice"), ids["thread"]
    return {
        "thread": client.get(f"/v1/threads/{thread}", headers=alice).json(),
        "history": client.get(f"/v1/threads/{thread}/history", headers=alice).json(),
        "files": client.get(f"/v1/threads/{thread}/attachments", headers=alice).json(),
        "file": client.get(
            f"/v1/threads/{thread}/attachments/{ids['attachment']}", headers=alice
        ).content,
        "listed": client.get("/v1/threads", headers=alice).json()["data"],
        "run": client.get(f"/v1/threads/{thread}/runs/{ids['run']}", headers=alice).json(),
        "workflow_run": client.get(
            f"/v1/workflow-runs/{ids['workflow_run']}", headers=alice
        ).json(),
    }


def request_of(method: str, template: str, ids: dict[str, str]) -> dict[str, Any]:
    """A valid request of the operation aimed at alice's resources."""
    run = ids["workflow_run"] if template.startswith("/v1/workflow-runs") else ids["run"]
    path = (
        template.replace("{thread_id}", ids["thread"])
        .replace("{attachment_id}", ids["attachment"])
        .replace("{run_id}", run)
        .replace("{approval_id}", ids["approval"])
        .replace("{name}", "lookup" if "workflows" in template else "order-lookup")
        .replace("{tool}", "get_order")
    )
    if template == "/v1/tools/{name}/invoke":
        path = "/v1/tools/get_workflow_run/invoke"
    bodies: dict[tuple[str, str], Any] = {
        ("POST", "/v1/chat/completions"): {"messages": [{"role": "user", "content": "hi"}]},
        ("POST", "/v1/threads"): {"thread_id": ids["thread"]},
        ("PATCH", "/v1/threads/{thread_id}"): {"title": "bob was here"},
        ("POST", "/v1/threads/{thread_id}/fork"): {"checkpoint_id": ids["checkpoint"]},
        ("POST", "/v1/threads/{thread_id}/runs/stream"): {"message": "bob"},
        ("POST", "/v1/threads/{thread_id}/runs"): {"message": "bob"},
        ("POST", "/v1/threads/{thread_id}/runs/{run_id}/feedback"): {"rating": "down"},
        ("POST", "/v1/workflows/{name}/runs"): {
            "inputs": {"order_id": "ORD1001"},
            "thread_id": ids["thread"],
        },
        ("POST", "/v1/workflow-runs/{run_id}/fork"): {"node": "ok"},
        ("POST", "/v1/approvals/{approval_id}"): {"decision": "reject"},
        ("POST", "/v1/tools/{name}/invoke"): {"arguments": {"run_id": ids["workflow_run"]}},
        ("POST", "/v1/skills/{name}/tools/{tool}"): {"arguments": {"order_id": "ORD1001"}},
    }
    request: dict[str, Any] = {"method": method, "url": path, "headers": bearer("bob")}
    if template == "/v1/threads/{thread_id}/attachments" and method == "POST":
        request["files"] = {"file": ("x.txt", b"bob's", "text/plain")}
    elif (method, template) in bodies:
        request["json"] = bodies[(method, template)]
    if template == "/v1/chat/completions":
        request["headers"] = {**request["headers"], "X-Thread-Id": ids["thread"]}
    return request


def test_user_b_can_neither_read_nor_change_user_as_resources_on_any_route(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    ids = alices_world(client, fake_llm)
    before = snapshot(client, ids)
    document = client.get("/openapi.json").json()
    secrets = [SECRET_TEXT, SECRET_ANSWER, SECRET_FILE.decode(), "Alice's plans"]
    walked = []
    for template, item in document["paths"].items():
        for method in item:
            request = request_of(method.upper(), template, ids)
            response = client.request(**request)
            walked.append((method.upper(), template, response.status_code))
            body = response.text
            for secret in secrets:
                assert secret not in body, f"{method} {template} shows alice's data"
            aimed = any(f"{{{p}}}" in template for p in ("thread_id", "attachment_id", "run_id"))
            aimed |= template in ("/v1/chat/completions", "/v1/workflows/{name}/runs")
            aimed |= template.startswith("/v1/approvals")
            if aimed:  # the request named something of alice's: refused, as not found
                assert response.status_code in (400, 403, 404, 409), (method, template, body)
                if "{thread_id}" in template or template == "/v1/chat/completions":
                    assert response.status_code in (404, 409), (method, template, body)
            if template == "/v1/tools/{name}/invoke":
                assert response.json()["ok"] is False  # get_workflow_run: not found
            for listing in ("/v1/threads", "/v1/workflow-runs"):
                if template == listing and method == "get":
                    assert ids["thread"] not in body
                    assert ids["workflow_run"] not in body
    assert {(m, t) for m, t, _ in walked} == {
        (m.upper(), t) for t, item in document["paths"].items() for m in item
    }
    assert snapshot(client, ids) == before  # nothing of alice's changed


def _mcp(client: TestClient, who: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = client.post("/mcp", json=request, headers={**MCP_HEADERS, **bearer(who)})
    assert response.status_code == 200, response.text
    text = response.text
    if text.startswith("event:") or "data:" in text.split("\n", 1)[0]:
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    return dict(json.loads(text))


def test_over_mcp_user_b_cannot_read_user_as_workflow_run(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    ids = alices_world(client, fake_llm)
    read = {"name": "get_workflow_run", "arguments": {"run_id": ids["workflow_run"]}}
    bobs = _mcp(client, "bob", "tools/call", read)["result"]
    assert bobs["isError"] is True
    assert "ORD1001" not in json.dumps(bobs)
    alices = _mcp(client, "alice", "tools/call", read)["result"]
    assert alices["isError"] is False
    for method, params in [
        ("tools/list", {}),
        ("resources/list", {}),
        ("prompts/list", {}),
        ("resources/templates/list", {}),
    ]:
        answer = json.dumps(_mcp(client, "bob", method, params))
        assert ids["workflow_run"] not in answer
        assert SECRET_TEXT not in answer
    started = _mcp(
        client,
        "bob",
        "tools/call",
        {
            "name": "run_workflow",
            "arguments": {"workflow": "lookup", "inputs": {"order_id": "ORD1001"}},
        },
    )["result"]
    bob_run = started["structuredContent"]["run_id"]
    again = {"name": "get_workflow_run", "arguments": {"run_id": bob_run}}
    assert _mcp(client, "alice", "tools/call", again)["result"]["isError"] is True
    assert _mcp(client, "bob", "tools/call", again)["result"]["isError"] is False


def test_a_reused_key_s_error_names_the_key_the_client_sent(client: TestClient) -> None:
    # QA: the error quoted the key as the service scopes it by user ("alice\x1fk-1").
    def start(order: str, key: str) -> dict[str, Any]:
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
        request["params"] = {
            "name": "run_workflow",
            "arguments": {"workflow": "lookup", "inputs": {"order_id": order}},
        }
        headers = {**MCP_HEADERS, **bearer("alice"), "Idempotency-Key": key}
        response = client.post("/mcp", json=request, headers=headers)
        text = response.text
        if "data:" in text:
            text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
        return {"status": response.status_code, **json.loads(text)}

    assert start("ORD1001", "k-1")["result"]["isError"] is False
    reused = start("ORD1002", "k-1")["result"]
    assert reused["isError"] is True
    message = reused["structuredContent"]["error"]["message"]
    assert "Idempotency-Key 'k-1' started a run" in message
    assert "\x1f" not in message
    assert "alice" not in message
    over_http = client.post(
        "/v1/tools/run_workflow/invoke",
        json={"arguments": {"workflow": "lookup", "inputs": {"order_id": "ORD1002"}}},
        headers={**bearer("alice"), "Idempotency-Key": "k-1"},
    ).json()
    assert "Idempotency-Key 'k-1' started a run" in over_http["error"]["message"]
    too_long = start("ORD1001", "k" * 201)
    assert too_long["error"]["code"] == -32602
    assert "Idempotency-Key" in too_long["error"]["message"]
    assert "200" in too_long["error"]["message"]


def test_one_user_s_idempotency_key_never_answers_another_s_workflow_start(
    client: TestClient,
) -> None:
    # Review: once the catalogue scoped keys, an admin's run (recorded as nobody's) was
    # keyed by nobody: a second admin sending the same key was handed the first one's run.
    made = client.post(
        "/v1/admin/keys", json={"user": "admin2", "scopes": ["admin"]}, headers=bearer("admin")
    )
    assert made.status_code == 201, made.text
    headers = {
        who: {"Authorization": f"Bearer {key}"}
        for who, key in (
            *((w, KEYS[w]) for w in ("alice", "bob", "admin")),
            ("admin2", made.json()["key"]),
        )
    }
    start = {"workflow": "lookup", "inputs": {"order_id": "ORD1001"}}

    def over_http(who: str) -> str:
        answer = client.post(
            "/v1/tools/run_workflow/invoke",
            json={"arguments": start},
            headers={**headers[who], "Idempotency-Key": "same-key"},
        ).json()
        assert answer["ok"], answer
        return str(answer["result"]["run_id"])

    def over_mcp(who: str) -> str:
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
        request["params"] = {"name": "run_workflow", "arguments": start}
        sent = {**MCP_HEADERS, **headers[who], "Idempotency-Key": "same-mcp-key"}
        text = client.post("/mcp", json=request, headers=sent).text
        if "data:" in text:
            text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
        result = json.loads(text)["result"]
        assert result["isError"] is False, result
        return str(result["structuredContent"]["run_id"])

    for call in (over_http, over_mcp):
        runs = {who: call(who) for who in headers}
        assert len(set(runs.values())) == len(runs), runs  # each caller's own run
        assert call("admin2") == runs["admin2"]  # and a retry gets its own first run


def test_mcp_without_a_key_is_a_401_naming_the_resource_metadata(client: TestClient) -> None:
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = client.post("/mcp", json=request, headers=MCP_HEADERS)
    assert response.status_code == 401
    challenge = response.headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer resource_metadata=")
    url = challenge.split('resource_metadata="')[1].split('"')[0]
    assert url.endswith("/.well-known/oauth-protected-resource")
    no_tools = client.post("/mcp", json=request, headers={**MCP_HEADERS, **bearer("approver")})
    assert no_tools.status_code == 403


def test_a_run_racing_to_a_new_thread_id_does_not_write_into_the_winners_thread(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    """Both users asked for the same new id at once and passed the check; alice's run made
    the thread first. Bob's run, checked again once it holds the thread, fails unread."""
    fake_llm.script(Reply(content=SECRET_ANSWER))
    made = client.post(
        "/v1/threads/race-1/runs/stream", json={"message": SECRET_TEXT}, headers=bearer("alice")
    )
    assert made.status_code == 200
    services = client.app.state.services  # type: ignore[attr-defined]

    async def bobs_run() -> Any:
        feed = services.conversations.start(
            "race-1", [HumanMessage("bob's words")], owner="bob", guard="bob"
        )
        return [event async for event in feed.read()]

    with pytest.raises(ThreadNotFound):
        client.portal.call(bobs_run)  # type: ignore[union-attr]
    thread = client.get("/v1/threads/race-1", headers=bearer("alice")).json()
    assert [m["content"] for m in thread["messages"]] == [SECRET_TEXT, SECRET_ANSWER]


def test_a_workflow_run_started_in_a_chat_stays_the_thread_owners_once_the_thread_is_deleted(
    client: TestClient, fake_llm: FakeLLM
) -> None:
    alice, admin, bob = bearer("alice"), bearer("admin"), bearer("bob")
    made = client.post("/v1/threads", json={"title": "Order"}, headers=alice).json()
    runs = f"/v1/threads/{made['thread_id']}/runs"
    fake_llm.script(Reply(tool_calls=[ToolCall("workflow_inputs", {})]))  # no order id in it
    asked = {"message": "look my order up", "workflow": "lookup", "stream": True}
    assert "order_id" in client.post(runs, json=asked, headers=alice).text  # asked for
    # The admin gives the input on alice's thread: the run is the thread owner's, not theirs.
    given = client.post(runs, json={"message": "ORD1001", "stream": True}, headers=admin)
    assert "approval_required" in given.text
    [run] = client.get("/v1/workflow-runs", headers=alice).json()["runs"]
    assert run["status"] == "WAITING"
    assert client.delete(f"/v1/threads/{made['thread_id']}", headers=alice).status_code == 204
    mine = client.get(f"/v1/workflow-runs/{run['id']}", headers=alice)
    assert mine.status_code == 200, mine.text  # hers still, the thread gone
    assert mine.json()["status"] == "CANCELLED"
    assert [r["id"] for r in client.get("/v1/workflow-runs", headers=alice).json()["runs"]] == [
        run["id"]
    ]
    assert client.get(f"/v1/workflow-runs/{run['id']}", headers=bob).status_code == 404
    assert client.get("/v1/workflow-runs", headers=bob).json()["runs"] == []


async def test_a_new_thread_is_its_first_callers_before_its_run_writes_it(
    keyed_settings: Any,
    store_url: str,  # noqa: F811
    fake_llm: FakeLLM,
) -> None:
    # QA: until the first run of a new thread wrote its record, a second request found the
    # thread there (its checkpoint) but no owner: alice's own next message was a 404, and
    # bob's run on the same new id was accepted (202), then failed with no error.
    import asyncio

    fake_llm.script(Reply(content="First answered."), Reply(content="Second answered."))
    settings = keyed_settings.model_copy(update={"checkpoint_url": store_url})
    async with in_process(settings) as (services, http):
        async with services.conversations.hold("fresh"):  # its first run cannot begin yet
            first = await http.post(
                "/v1/threads/fresh/runs", json={"message": "first"}, headers=bearer("alice")
            )
            bobs = await http.post(
                "/v1/threads/fresh/runs", json={"message": "mine?"}, headers=bearer("bob")
            )
            second = await http.post(
                "/v1/threads/fresh/runs", json={"message": "second"}, headers=bearer("alice")
            )
        assert first.status_code == second.status_code == 202, (first.text, second.text)
        assert bobs.status_code == 404, bobs.text
        assert bobs.json()["error"]["code"] == "thread_not_found"
        run = second.json()["id"]
        for _ in range(300):
            found = await http.get(f"/v1/threads/fresh/runs/{run}", headers=bearer("alice"))
            if found.json()["status"] == "succeeded":
                break
            await asyncio.sleep(0.02)
        shown = await http.get("/v1/threads/fresh", headers=bearer("alice"))
    assert [m["content"] for m in shown.json()["messages"]] == [
        "first",
        "First answered.",
        "second",
        "Second answered.",
    ]
    assert shown.json()["title"] == "first"


async def test_a_thread_made_meanwhile_is_never_written_over(
    keyed_settings: Any,
    store_url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Review: POST /v1/threads (and a workflow run's new thread) checked that the id was
    # free, then wrote its record over whatever a request had claimed in between: alice got
    # bob's thread, his messages in it.
    settings = keyed_settings.model_copy(update={"checkpoint_url": store_url})
    async with in_process(settings) as (services, http):
        claimed = await http.post(
            "/v1/threads/racy/runs", json={"message": "bob's"}, headers=bearer("bob")
        )
        assert claimed.status_code == 202, claimed.text
        free_then = services.threads.exists

        async def said_free_a_moment_ago(thread_id: str) -> bool:
            return False if thread_id == "racy" else await free_then(thread_id)

        monkeypatch.setattr(services.threads, "exists", said_free_a_moment_ago)
        made = await http.post("/v1/threads", json={"thread_id": "racy"}, headers=bearer("alice"))
        record = await services.threads.records.get("racy")
    assert made.status_code == 409, made.text
    assert made.json()["error"]["code"] == "thread_exists"
    assert record is not None
    assert record["owner"] == "bob"


def test_a_deleted_threads_runs_are_not_found_through_a_new_thread_of_its_id(
    keyed_settings: Any, fake_llm: FakeLLM
) -> None:
    # QA: alice deleted her thread; bob made one of the same id and read her run's answer
    # and events by its id (kept a while after it ended); without keys, a deleted thread's
    # run was served as if the thread were there.
    fake_llm.script(Reply(content=SECRET_ANSWER), Reply(content="Hello bob."))
    with TestClient(create_app(keyed_settings)) as client:
        alice, bob = bearer("alice"), bearer("bob")
        ran = client.post(
            "/v1/threads/reused/runs/stream", json={"message": SECRET_TEXT}, headers=alice
        )
        run_id = ran.headers["X-Run-Id"]
        path = f"/v1/threads/reused/runs/{run_id}"
        assert client.get(path, headers=alice).json()["answer"] == SECRET_ANSWER
        assert client.delete("/v1/threads/reused", headers=alice).status_code == 204
        gone = client.get(path, headers=alice)
        made = client.post("/v1/threads", json={"thread_id": "reused"}, headers=bob)
        assert made.status_code == 201, made.text
        theirs = [
            client.get(path, headers=bob),
            client.get(f"{path}/stream", headers=bob),
            client.post(f"{path}/cancel", headers=bob),
        ]
        own = client.post("/v1/threads/reused/runs/stream", json={"message": "hi"}, headers=bob)
        own_run = client.get(f"/v1/threads/reused/runs/{own.headers['X-Run-Id']}", headers=bob)
    assert gone.status_code == 404, gone.text
    for answer in theirs:
        assert answer.status_code == 404, answer.text
        assert SECRET_ANSWER not in answer.text
    assert own_run.json()["answer"] == "Hello bob."


def test_a_request_refused_before_its_run_stores_anything_leaves_no_thread(
    keyed_settings: Any, fake_llm: FakeLLM
) -> None:
    # Review: the new thread claimed for the caller stayed when the request was then
    # refused (a message with nothing new: "before anything is stored", the README says).
    with TestClient(create_app(keyed_settings)) as client:
        alice = bearer("alice")
        refused = client.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "assistant", "content": "Hello."}]},
            headers={**alice, "X-Thread-Id": "empty1"},
        )
        listed = client.get("/v1/threads", headers=alice).json()["data"]
        shown = client.get("/v1/threads/empty1", headers=alice)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "no_new_message"
    assert "empty1" not in [t["thread_id"] for t in listed]
    assert shown.status_code == 404


@asynccontextmanager
async def in_process(settings: Any) -> AsyncIterator[tuple[Any, Any]]:
    """The app started in this event loop (its services at hand) and an HTTP client of it:
    requests and the test's own steps interleave as the test awaits them."""
    import httpx

    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            yield app.state.services, http
