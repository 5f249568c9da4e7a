"""The OpenAPI document is the service's contract: every answer the service gives is
documented for its route, status and content type, and validates against the documented
schema."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial
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
from agents.feed import RunFeed
from app.api import sse
from app.api.errors import REDIS_LOST_DOC
from app.api.routes import threads, workflows
from app.services import Services
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
from tests.integration.openapi.kit import CHAT, ERROR, INVOKE, LIMIT, RUN, START, TOOL, USER
from tests.integration.openapi.test_auth_document import KEYED_PROBES

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
    setup: Callable[[TestClient], dict[str, str]] | None = None  # ids for the path
    files: dict[str, Any] | None = None  # a multipart body
    # It makes keys: sent with an admin key to an app of its own that has keys (the first
    # key made in the shared, open app would end its development mode: later probes, 401).
    admin: bool = False


def chat(name: str, status: int, body: dict[str, Any] | None = None, **more: Any) -> Probe:
    return Probe(name, "POST", CHAT, status, {"messages": [USER], **(body or {})}, **more)


def run(name: str, status: int, body: dict[str, Any], thread: str = "p-1", **more: Any) -> Probe:
    return Probe(name, "POST", RUN.format(thread), status, body, **more)


def get(name: str, path: str, status: int, **more: Any) -> Probe:
    return Probe(name, "GET", path, status, **more)


def _new_thread(client: TestClient) -> dict[str, str]:
    """An empty thread: ``{thread}``."""
    made = client.post("/v1/threads", json={})
    assert made.status_code == 201, made.text
    return {"thread": made.json()["thread_id"]}


def _keyed_start(client: TestClient) -> dict[str, str]:
    """A workflow run started with ``Idempotency-Key: k-1``."""
    made = client.post(START[0], json=START[1], headers={"Idempotency-Key": "k-1"})
    assert made.status_code == 200, made.text
    return {}


def _keyed_chat(client: TestClient) -> dict[str, str]:
    """A chat turn on thread ``p-key`` sent with ``Idempotency-Key: k-9`` (one scripted reply)."""
    keyed = {"X-Thread-Id": "p-key", "Idempotency-Key": "k-9"}
    made = client.post(CHAT, json={"messages": [USER]}, headers=keyed)
    assert made.status_code == 200, made.text
    return {}


def _keyed_run(client: TestClient) -> dict[str, str]:
    """A run on thread ``p-1`` sent with ``Idempotency-Key: k-8`` (one scripted reply)."""
    made = client.post(
        RUN.format("p-1"), json={"message": "hello"}, headers={"Idempotency-Key": "k-8"}
    )
    assert made.status_code == 200, made.text
    return {}


def _answered_thread(client: TestClient) -> dict[str, str]:
    """A thread with one answered turn (one scripted reply): ``{thread}``, ``{checkpoint}``."""
    ids = _new_thread(client)
    ran = client.post(RUN.format(ids["thread"]), json={"message": "hello"})
    assert ran.status_code == 200, ran.text
    history = client.get(f"/v1/threads/{ids['thread']}/history").json()["data"]
    return {**ids, "checkpoint": history[0]["checkpoint_id"]}


def _attached(client: TestClient) -> dict[str, str]:
    """A thread with a text file: ``{thread}``, ``{attachment}``."""
    ids = _new_thread(client)
    made = client.post(
        f"/v1/threads/{ids['thread']}/attachments",
        files={"file": ("note.txt", b"a note", "text/plain")},
    )
    assert made.status_code == 201, made.text
    return {**ids, "attachment": made.json()["id"]}


def _a_key(client: TestClient) -> dict[str, str]:
    """An API key made through the admin API: ``{key}``, its id."""
    made = client.post("/v1/admin/keys", json={"user": "carol"})
    assert made.status_code == 201, made.text
    return {"key": made.json()["id"]}


def _a_revoked_key(client: TestClient) -> dict[str, str]:
    """An API key made and revoked: ``{key}``."""
    ids = _a_key(client)
    assert client.delete(f"/v1/admin/keys/{ids['key']}").status_code == 200
    return ids


def _ran(client: TestClient) -> dict[str, str]:
    """A thread with a run streamed to its end: ``{thread}``, ``{run}``."""
    ids = _new_thread(client)
    ran = client.post(RUNS.format(ids["thread"]), json={"message": "hello", "stream": True})
    assert ran.status_code == 200, ran.text
    return {**ids, "run": ran.headers["X-Run-Id"]}


def _started_at_once(services: Services, mp: pytest.MonkeyPatch) -> None:
    """``start`` hands back a run that has ended (no background run outlives the probe)."""

    def start(thread_id: str, *_: Any, **__: Any) -> RunFeed:
        feed = RunFeed("", run_id=str(uuid.uuid4()), thread_id=thread_id)
        feed.put(RunFinished(thread_id, feed.run_id, AIMessage("Done."), {}))
        feed.close()
        return feed

    mp.setattr(services.conversations, "start", start)


def _busy(services: Services, mp: pytest.MonkeyPatch) -> None:
    mp.setattr(services.conversations, "busy", lambda thread_id: True)


def _resumable(services: Services, mp: pytest.MonkeyPatch) -> None:
    def start(thread_id: str, *_: Any, **__: Any) -> RunFeed:
        feed = RunFeed("", run_id=str(uuid.uuid4()), thread_id=thread_id)
        feed.put(NodeStarted("expert"))
        feed.put(RunFinished(thread_id, feed.run_id, AIMessage("Done."), {}))
        feed.close()
        return feed

    mp.setattr(services.conversations, "start", start)


UNDER_WAY = "/v1/threads/p-way/runs/11111111-1111-4111-8111-111111111111"


def _way(client: TestClient) -> dict[str, str]:
    """Thread ``p-way``, where ``_under_way`` has a run."""
    made = client.post("/v1/threads", json={"thread_id": "p-way"})
    assert made.status_code in (201, 409), made.text  # made by an earlier probe
    return {}


def _under_way(services: Services, mp: pytest.MonkeyPatch) -> None:
    """Run ``UNDER_WAY`` of thread ``p-way`` is running in this process (nothing drives it)."""
    feed = RunFeed("", run_id=UNDER_WAY.rsplit("/", 1)[1], thread_id="p-way")
    feed.begin()
    mp.setattr(services.conversations, "get_run", {feed.run_id: feed}.get)


NOTE = {"file": ("note.txt", b"a note", "text/plain")}
THREAD = "/v1/threads/{thread}"
RUNS = "/v1/threads/{}/runs"
KEYS = "/v1/admin/keys"
A_RUN = THREAD + "/runs/{run}"
NO_SUCH_RUN = THREAD + "/runs/00000000-0000-0000-0000-000000000000"


def _run_of(*events: Any) -> Patch:
    """Runs whose feed holds ``events`` (a function of the thread and run ids) and ends."""

    def start(thread_id: str, *_: Any, **__: Any) -> RunFeed:
        feed = RunFeed("", run_id=str(uuid.uuid4()), thread_id=thread_id)
        for event in events:
            feed.put(event(thread_id, feed.run_id))
        feed.close()
        return feed

    return lambda services, mp: mp.setattr(services.conversations, "start", start)


def _failed_run(code: str) -> Patch:
    return _run_of(lambda t, r: RunFailed(t, r, code, f"the model failed ({code})"))


_fails_after_a_token = _run_of(
    lambda t, r: Token("It ships", "assistant"),
    lambda t, r: RunFailed(t, r, "model_unavailable", "the connection dropped"),
)


def _learned_example(client: TestClient) -> dict[str, str]:
    """A thread and an example learned for order-lookup: ``{thread}``, ``{example}``."""
    ids = _new_thread(client)
    services = client.app.state.services  # type: ignore[attr-defined]
    learn = partial(
        services.learned.learn,
        "order-lookup",
        f"the delivery status for the broken pump of {ids['thread']}",
        thread_id=ids["thread"],
        run_id="r-1",
        how="candidates",
    )
    example = client.portal.call(learn)  # type: ignore[union-attr]
    return {**ids, "example": example.id}


def _stopping(services: Services, mp: pytest.MonkeyPatch) -> None:
    mp.setattr(services.conversations, "stopping", 1.0)  # told to stop (SIGTERM)


def _started_then_cut(run_id: str) -> Any:
    """An engine's stream (or fork) that starts run ``run_id``, then is cut off."""

    async def stream(*_: Any, on_start: Any = None, **__: Any) -> AsyncIterator[Any]:
        if on_start is not None:
            on_start(run_id)
        raise asyncio.CancelledError
        yield  # an async generator, as the engine's stream is

    return stream


def _cut_off(services: Services, mp: pytest.MonkeyPatch) -> None:
    """The process stops (SIGTERM) and its grace period ends while a request drives a
    workflow run: the server cancels the request."""
    mp.setattr(services.conversations, "stopping", 1.0)

    async def cut(*_: Any, **__: Any) -> Any:
        raise asyncio.CancelledError

    mp.setattr(services.engine, "stream", _started_then_cut("r-cut"))
    mp.setattr(services.workflow_turns, "decide", cut)


def _fork_cut_off(services: Services, mp: pytest.MonkeyPatch) -> None:
    """As ``_cut_off``, for a fork under way (the run forked is a real one)."""
    mp.setattr(services.conversations, "stopping", 1.0)
    mp.setattr(services.engine, "fork", _started_then_cut("r-fork-cut"))


def _raises(name: str) -> Patch:
    async def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("a bug")

    def broken_now(*_: Any, **__: Any) -> Any:
        raise RuntimeError("a bug")

    def patch(services: Services, mp: pytest.MonkeyPatch) -> None:
        owner = services.checkpointer if name == "aget_tuple" else services.conversations
        mp.setattr(owner, name, broken_now if name == "start" else broken)

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
    chat("chat internal error", 500, patch=_raises("start")),
    chat(
        "chat key sent again with another message",
        409,
        {"messages": [{"role": "user", "content": "something else"}]},
        headers={"X-Thread-Id": "p-key", "Idempotency-Key": "k-9"},
        setup=_keyed_chat,
        replies=(Reply(content="Hi."),),
    ),
    run("run with a tool", 200, ORDER, replies=TOOL_RUN),
    run("run whose model fails", 200, {"message": "hello"}, replies=FAILING),
    run(
        "run key sent again with another message",
        409,
        {"message": "something else"},
        headers={"Idempotency-Key": "k-8"},
        setup=_keyed_run,
        replies=(Reply(content="Hi."),),
    ),
    run("run blank message", 400, {"message": " \n"}),
    run("run unknown skill", 400, {"message": "hi", "skill": "nope"}),
    run("run bad thread id", 400, {"message": "hi"}, thread="-p"),
    run("run too large", 413, {"message": "x" * LIMIT}),
    run("run while stopping", 503, {"message": "hi"}, patch=_stopping),
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
    get("threads", "/v1/threads", 200, setup=_new_thread),
    Probe(
        "feedback",
        "POST",
        A_RUN + "/feedback",
        200,
        {"rating": "up"},
        setup=_ran,
        replies=(Reply(content="Hi."),),
    ),
    Probe(
        "feedback, no such run",
        "POST",
        THREAD + "/runs/r-1/feedback",
        404,
        {"rating": "up"},
        setup=_new_thread,
    ),
    Probe("feedback, bad rating", "POST", THREAD + "/runs/r-1/feedback", 400, {"rating": "meh"}),
    Probe(
        "feedback, no thread", "POST", "/v1/threads/p-none/runs/r-1/feedback", 404, {"rating": "up"}
    ),
    get("learned examples", "/v1/skills/order-lookup/examples", 200, setup=_learned_example),
    get("learned examples, no skill", "/v1/skills/order-lokup/examples", 404),
    Probe(
        "delete an example",
        "DELETE",
        "/v1/skills/order-lookup/examples/{example}",
        204,
        setup=_learned_example,
    ),
    Probe("delete no example", "DELETE", "/v1/skills/order-lookup/examples/nope", 404),
    get("threads, a bad page size", "/v1/threads", 400, params={"limit": 0}),
    Probe("new thread", "POST", "/v1/threads", 201, {"title": "Plans"}),
    Probe("new thread, unknown field", "POST", "/v1/threads", 400, {"colour": "red"}),
    Probe(
        "new thread, id taken",
        "POST",
        "/v1/threads",
        409,
        {"thread_id": "p-2"},
        replies=TOOL_RUN,
        before=((RUN.format("p-2"), ORDER),),
    ),
    Probe("rename", "PATCH", THREAD, 200, {"title": "Renamed"}, setup=_new_thread),
    Probe("rename blank", "PATCH", THREAD, 400, {"title": " "}, setup=_new_thread),
    Probe("rename nothing", "PATCH", "/v1/threads/p-none", 404, {"title": "x"}),
    Probe("delete", "DELETE", THREAD, 204, setup=_new_thread),
    Probe("delete bad id", "DELETE", "/v1/threads/-p", 400),
    Probe("delete nothing", "DELETE", "/v1/threads/p-none", 404),
    Probe("delete while busy", "DELETE", THREAD, 409, setup=_new_thread, patch=_busy),
    get(
        "history", THREAD + "/history", 200, setup=_answered_thread, replies=(Reply(content="Hi."),)
    ),
    get("history bad id", "/v1/threads/-p/history", 400),
    get("history of nothing", "/v1/threads/p-none/history", 404),
    Probe(
        "fork",
        "POST",
        THREAD + "/fork",
        201,
        {"checkpoint_id": "{checkpoint}"},
        setup=_answered_thread,
        replies=(Reply(content="Hi."),),
    ),
    Probe("fork without a checkpoint", "POST", THREAD + "/fork", 400, {}, setup=_new_thread),
    Probe(
        "fork an unknown checkpoint",
        "POST",
        THREAD + "/fork",
        404,
        {"checkpoint_id": "nope"},
        setup=_new_thread,
    ),
    Probe(
        "fork onto a taken id",
        "POST",
        THREAD + "/fork",
        409,
        {"checkpoint_id": "{checkpoint}", "thread_id": "{thread}"},
        setup=_answered_thread,
        replies=(Reply(content="Hi."),),
    ),
    Probe("resume", "POST", THREAD + "/resume", 200, setup=_new_thread, patch=_resumable),
    Probe("resume bad id", "POST", "/v1/threads/-p/resume", 400),
    Probe("resume nothing", "POST", "/v1/threads/p-none/resume", 404),
    Probe(
        "resume a finished run",
        "POST",
        THREAD + "/resume",
        409,
        setup=_answered_thread,
        replies=(Reply(content="Hi."),),
    ),
    Probe("upload", "POST", THREAD + "/attachments", 201, setup=_new_thread, files=NOTE),
    Probe("upload no file", "POST", THREAD + "/attachments", 400, setup=_new_thread, files={}),
    Probe("upload to nothing", "POST", "/v1/threads/p-none/attachments", 404, files=NOTE),
    Probe(
        "upload too large",
        "POST",
        THREAD + "/attachments",
        413,
        setup=_new_thread,
        files={"file": ("big.txt", b"x" * LIMIT, "text/plain")},
    ),
    Probe(
        "upload of a refused type",
        "POST",
        THREAD + "/attachments",
        415,
        setup=_new_thread,
        files={"file": ("tool.exe", b"MZ", "application/x-msdownload")},
    ),
    get("attachments", THREAD + "/attachments", 200, setup=_attached),
    get("attachments bad id", "/v1/threads/-p/attachments", 400),
    get("attachments of nothing", "/v1/threads/p-none/attachments", 404),
    get("attachment", THREAD + "/attachments/{attachment}", 200, setup=_attached),
    get("attachment bad id", THREAD + "/attachments/nope", 400, setup=_new_thread),
    get("attachment missing", THREAD + "/attachments/att_0", 404, setup=_new_thread),
    Probe(
        "start a run",
        "POST",
        RUNS.format("{thread}"),
        202,
        {"message": "hi"},
        setup=_new_thread,
        patch=_started_at_once,
    ),
    Probe(
        "start a run, streamed",
        "POST",
        RUNS.format("{thread}"),
        200,
        {"message": "hi", "stream": True},
        setup=_new_thread,
        replies=(Reply(content="Hi."),),
    ),
    Probe("start a run, blank", "POST", RUNS.format("p-1"), 400, {"message": " "}),
    Probe(
        "start a run on a busy thread",
        "POST",
        RUNS.format("{thread}"),
        409,
        {"message": "hi", "if_busy": "reject"},
        setup=_new_thread,
        patch=_busy,
    ),
    Probe("start a run too large", "POST", RUNS.format("p-1"), 413, {"message": "x" * LIMIT}),
    Probe(
        "start a run while stopping",
        "POST",
        RUNS.format("p-1"),
        503,
        {"message": "hi"},
        patch=_stopping,
    ),
    Probe("reload skills and workflows", "POST", "/v1/admin/reload", 200),
    get("api keys", KEYS, 200),
    get("api keys, a bad page size", KEYS, 400, params={"limit": 0}),
    Probe("make an api key", "POST", KEYS, 201, {"user": "carol", "scopes": ["chat"]}, admin=True),
    Probe("make an api key, unknown scope", "POST", KEYS, 400, {"user": "c", "scopes": ["x"]}),
    Probe("make a first api key without admin", "POST", KEYS, 400, {"user": "c"}),
    Probe("revoke an api key", "DELETE", KEYS + "/{key}", 200, setup=_a_key, admin=True),
    Probe(
        "revoke an api key again", "DELETE", KEYS + "/{key}", 409, setup=_a_revoked_key, admin=True
    ),
    Probe("revoke no such api key", "DELETE", KEYS + "/key_000000000000", 404),
    Probe("revoke an api key, bad id", "DELETE", KEYS + "/nokey", 400),
    get("a run", A_RUN, 200, setup=_ran, replies=(Reply(content="Hi."),)),
    get("a run, bad id", THREAD + "/runs/nope", 400, setup=_new_thread),
    get("no such run", NO_SUCH_RUN, 404, setup=_new_thread),
    Probe("cancel", "POST", UNDER_WAY + "/cancel", 200, setup=_way, patch=_under_way),
    Probe(
        "cancel an ended run",
        "POST",
        A_RUN + "/cancel",
        409,
        setup=_ran,
        replies=(Reply(content="Hi."),),
    ),
    Probe("cancel, bad id", "POST", THREAD + "/runs/nope/cancel", 400, setup=_new_thread),
    Probe("cancel nothing", "POST", NO_SUCH_RUN + "/cancel", 404, setup=_new_thread),
    get("join", A_RUN + "/stream", 200, setup=_ran, replies=(Reply(content="Hi."),)),
    get(
        "join after an event",
        A_RUN + "/stream",
        200,
        setup=_ran,
        replies=(Reply(content="Hi."),),
        headers={"Last-Event-ID": "1"},
    ),
    get(
        "join past the end",
        A_RUN + "/stream",
        400,
        setup=_ran,
        replies=(Reply(content="Hi."),),
        headers={"Last-Event-ID": "99"},
    ),
    get("join, bad id", THREAD + "/runs/nope/stream", 400, setup=_new_thread),
    get("join nothing", NO_SUCH_RUN + "/stream", 404, setup=_new_thread),
    get("trace", A_RUN + "/trace", 200, setup=_ran, replies=(Reply(content="Hi."),)),
    get("trace, bad id", THREAD + "/runs/nope/trace", 400, setup=_new_thread),
    get("no trace", NO_SUCH_RUN + "/trace", 404, setup=_new_thread),
    get("who am I", "/v1/me", 200),
    get("resource metadata", "/.well-known/oauth-protected-resource", 200),
    get("metrics", "/metrics", 200, replies=TOOL_RUN, before=((RUN.format("p-m"), ORDER),)),
    get("skills", "/v1/skills", 200),
    get("workflows", "/v1/workflows", 200),
    get("workflow", "/v1/workflows/lookup", 200),
    get("unknown workflow", "/v1/workflows/nope", 404),
    Probe("start a workflow", "POST", START[0], 200, START[1]),
    Probe("start without inputs", "POST", START[0], 400, {"inputs": {}}),
    Probe("start an unknown workflow", "POST", "/v1/workflows/nope/runs", 404, {}),
    Probe("a start cut off by a stop", "POST", START[0], 503, START[1], patch=_cut_off),
    Probe(
        "start again, other inputs, same key",
        "POST",
        START[0],
        409,
        {"inputs": {"order_id": "ORD1002"}},
        headers={"Idempotency-Key": "k-1"},
        setup=_keyed_start,
    ),
    get("workflow runs", "/v1/workflow-runs", 200, before=(START,)),
    get("workflow run", "/v1/workflow-runs/{run}", 200, before=(START,)),
    get("unknown workflow run", "/v1/workflow-runs/nope", 404),
    get("workflow runs, too many", "/v1/workflow-runs", 400, params={"limit": 0}),
    get("approvals", "/v1/approvals", 200, before=(START,)),
    get("approvals, a bad page size", "/v1/approvals", 400, params={"limit": 0}),
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
        "a decision cut off by a stop",
        "POST",
        "/v1/approvals/r1-gate-0",
        503,
        {"decision": "approve"},
        patch=_cut_off,
    ),
    Probe(
        "fork",
        "POST",
        "/v1/workflow-runs/{run}/fork",
        200,
        {"node": "ok"},
        before=(START, ("/v1/approvals/{approval}", {"decision": "approve"})),
    ),
    Probe(
        "a fork cut off by a stop",
        "POST",
        "/v1/workflow-runs/{run}/fork",
        503,
        {"node": "ok"},
        before=(START, ("/v1/approvals/{approval}", {"decision": "approve"})),
        patch=_fork_cut_off,
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
    Probe("cancel a waiting run", "POST", "/v1/workflow-runs/{run}/cancel", 200, before=(START,)),
    Probe(
        "cancel a run twice",
        "POST",
        "/v1/workflow-runs/{run}/cancel",
        409,
        before=(START, ("/v1/workflow-runs/{run}/cancel", {})),
    ),
    Probe("cancel nothing", "POST", "/v1/workflow-runs/nope/cancel", 404),
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
    get("tools", "/v1/tools", 200),
    get("tools, a flag neither true nor false", "/v1/tools", 400, params={"strict": "maybe"}),
    Probe("invoke", "POST", INVOKE, 200, {"arguments": {"order_id": "ORD1001"}}),
    Probe("invoke with JSON text", "POST", INVOKE, 200, {"arguments": '{"order_id": "ORD1001"}'}),
    Probe("invoke an unknown tool", "POST", "/v1/tools/get_ordr/invoke", 404, {}),
    Probe("invoke unwrapped", "POST", INVOKE, 400, {"order_id": "ORD1001"}),
    Probe("invoke too large", "POST", INVOKE, 413, {"arguments": {"x": "x" * LIMIT}}),
]


@pytest.mark.parametrize("probe", PROBES, ids=[p.name for p in PROBES])
def test_every_answer_is_documented_and_matches_its_schema(
    probe: Probe,
    client: TestClient,
    document: Document,
    fake_llm: FakeLLM,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    if probe.admin:
        client = request.getfixturevalue("admin_client")
        document = request.getfixturevalue("admin_document")
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
    if probe.setup is not None:
        ids.update(probe.setup(client))
    if probe.patch is not None:
        probe.patch(client.app.state.services, monkeypatch)  # type: ignore[attr-defined]
    body = probe.json
    if isinstance(body, dict) and ids:
        body = {k: v.format(**ids) if isinstance(v, str) else v for k, v in body.items()}
    response = client.request(
        probe.method,
        probe.path.format(**ids) if ids else probe.path,
        json=body if probe.files is None else None,
        content=probe.content,
        headers=probe.headers,
        params=probe.params,
        files=probe.files,
    )
    assert response.status_code == probe.status, response.text
    check_documented(document, probe.method, probe.path, response)
    if not probe.admin:  # the shared app stays open for the probes after this one
        keys = client.app.state.services.keys  # type: ignore[attr-defined]
        made = client.portal.call(keys.any)  # type: ignore[union-attr]
        assert not made, f"{probe.name!r} made a key in the open app: give it admin=True"


def test_every_documented_status_is_probed(document: Document) -> None:
    probes = [*PROBES, *KEYED_PROBES]  # a key of another user is needed for some 404s
    probed = {(p.method, operation(document, p.method, p.path)[0], str(p.status)) for p in probes}
    documented = {
        (method.upper(), path, status)
        for path, item in document["paths"].items()
        for method, op in item.items()
        for status, answer in op["responses"].items()
        # 500: any route may fail so, probed on a few; 401, 403, 429 and a 503 that is only
        # Redis lost: the gate's, on every operation behind it, each probed in
        # test_auth_document (a route's own 503 is probed here).
        if status not in ("500", "401", "403", "429")
        and not (status == "503" and answer["description"] == REDIS_LOST_DOC)
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
        NodeFinished("order", None, True, 2.5, "refund-request", None, '{"order_id": "ORD1"}'),
        NodeFinished("expert", None, True, 12.5),
        RunFinished("t", "r", AIMessage("Shipped."), {"total_tokens": 9}),
        RunFailed("t", "r", "model_timeout", "the model did not answer in time", {"profile": "a"}),
    ]
    assert {type(s) for s in samples} == set(get_args(Event))  # a new event type needs a sample

    async def streamed() -> str:
        async def events() -> AsyncIterator[Event]:
            for sample in samples:
                yield sample

        text = "".join([line async for line in threads._sse(events())])
        return text + sse.reconnect("t", "r", 13)  # a stopping process's last event

    _, run_op = operation(document, "POST", RUN.format("t"))
    item_schema = closed(run_op["responses"]["200"]["content"]["text/event-stream"]["itemSchema"])
    for event in sse_events(asyncio.run(streamed())):
        assert event_errors(item_schema, event, closed(document)) == []


def test_a_workflow_run_s_stream_is_documented_and_its_last_event_says_if_it_waits(
    client: TestClient, document: Document
) -> None:
    # QA: a run stopped at an approval ended its stream with `workflow_ended`, and the
    # document said nothing of the events.
    path, body = START
    key = {"Idempotency-Key": f"doc-{uuid.uuid4().hex}"}
    streamed = client.post(path, json={**body, "stream": True}, headers=key)
    check_documented(document, "POST", path, streamed)
    last = sse_events(streamed.text)[-1]
    assert last["event"] == "workflow_waiting"
    approval = json.loads(last["data"])["approval"]["approval_id"]
    client.post(f"/v1/approvals/{approval}", json={"decision": "approve"})
    again = client.post(path, json={**body, "stream": True}, headers=key)  # the run as it is
    check_documented(document, "POST", path, again)
    [ended] = sse_events(again.text)
    assert ended["event"] == "workflow_ended"
    assert json.loads(ended["data"])["record"]["status"] == "SUCCEEDED"
    # The last event of a stream its process could not see to the end, as the route says it.
    _, run_op = operation(document, "POST", path)
    item_schema = closed(run_op["responses"]["200"]["content"]["text/event-stream"]["itemSchema"])
    for event in (
        workflows.stopped_event(TimeoutError("the store"), ["r1"]),
        workflows.handed_over_event("r1"),
    ):
        sent = {"event": event["type"], "data": json.dumps(event)}
        assert event_errors(item_schema, sent, closed(document)) == []


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("DELETE", "/v1/models", "GET"),
        ("GET", CHAT, "POST"),
        ("PUT", "/v1/threads/t", "DELETE, GET, PATCH"),
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
