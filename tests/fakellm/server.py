"""Scripted OpenAI-compatible chat-completions server for tests.

Example: ``with FakeLLM() as fake: fake.script(Reply(content="Hi"))``, then point
an OpenAI client at ``fake.base_url``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from dataclasses import replace
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakellm import responses
from tests.fakellm.request import RequestView
from tests.fakellm.script import (
    Answer,
    Exchange,
    Reply,
    ScriptItem,
    ScriptMismatch,
    Source,
    ToolCall,
    describe,
    script_problems,
)
from tests.fakellm.wire import completion, error_response, estimate_usage, stream_events

NO_REPLY_MESSAGE = "FakeLLM: no scripted reply left for this request"
MODEL_ID = "fake-model"
_START_TIMEOUT = 10.0


class FakeLLM:
    """OpenAI-compatible server answering from a FIFO script, run in a thread.

    Use as a context manager; ``base_url`` is valid while it runs. Script callables and
    ``on_forced_tool`` handlers receive a ``RequestView`` of each request. ``problems()``
    lists replies left over and requests nothing was scripted for; the ``fake_llm``
    fixture fails a test with them unless the test allowed them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._script: deque[ScriptItem] = deque()
        self._forced: dict[str, Answer] = {}
        self._exchanges: list[Exchange] = []
        self._answering: list[tuple[float, float]] = []
        self._peers: list[str] = []
        self._paths: list[str] = []
        # Chat requests being answered, by id: the most requests (arrived since the last
        # reset) open at once since each arrived, for answers held until "together".
        self._open: dict[int, int] = {}
        self._request_ids = itertools.count()
        self._fresh_from = 0  # the first request id since the last reset
        self._holding: dict[int, tuple[int, asyncio.Event]] = {}
        self._allow_leftovers = False
        self._allow_unscripted = False
        self._call_ids = itertools.count(1)
        self._completion_ids = itertools.count(1)
        self._stopping = threading.Event()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None
        self._app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/responses", self._chat, methods=["POST"]),
                # Azure OpenAI: the deployment in the path, the API version in the query.
                Route(
                    "/openai/deployments/{deployment}/chat/completions",
                    self._chat,
                    methods=["POST"],
                ),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, e.g. ``http://127.0.0.1:PORT/v1``."""
        if self._port is None:
            raise RuntimeError("FakeLLM is not running")
        return f"http://127.0.0.1:{self._port}/v1"

    @property
    def exchanges(self) -> list[Exchange]:
        """Every chat request with how and when it was answered, in order of arrival."""
        with self._lock:
            return list(self._exchanges)

    @property
    def views(self) -> list[RequestView]:
        """The parsed view of every chat request, in order of arrival."""
        return [e.request for e in self.exchanges]

    @property
    def requests(self) -> list[dict[str, Any]]:
        """A copy of every received JSON request body, in order (the wire format)."""
        return [dict(view.body) for view in self.views]

    @property
    def answering(self) -> list[tuple[float, float]]:
        """``time.perf_counter()`` intervals spent answering chat requests, each from the
        request's arrival to its last byte: what a real model's time would be."""
        with self._lock:
            return list(self._answering)

    @property
    def headers(self) -> list[Mapping[str, str]]:
        """The HTTP headers of every chat request (lower-case names), in order."""
        return [e.headers for e in self.exchanges]

    @property
    def paths(self) -> list[str]:
        """The URL path and query of every chat request, in order (which API, which
        Azure deployment and API version)."""
        with self._lock:
            return list(self._paths)

    @property
    def peers(self) -> list[str]:
        """The client address (``host:port``) of each chat request, in order: one address
        for several requests means they came over one kept-alive connection."""
        with self._lock:
            return list(self._peers)

    @property
    def remaining(self) -> int:
        """Number of scripted replies not yet consumed."""
        with self._lock:
            return len(self._script)

    @property
    def leftovers(self) -> list[ScriptItem]:
        """The scripted replies not yet consumed, in order."""
        with self._lock:
            return list(self._script)

    @property
    def unscripted(self) -> list[RequestView]:
        """Requests that found no scripted reply (answered HTTP 500)."""
        return [e.request for e in self.exchanges if e.source == "unscripted"]

    def script(self, *items: ScriptItem) -> None:
        """Append replies (or callables ``RequestView -> Reply``) to the script."""
        with self._lock:
            self._script.extend(items)

    def on_forced_tool(self, name: str, answer: Answer) -> None:
        """Answer every request that forces tool ``name`` (``tool_choice``) with ``answer``,
        outside the FIFO script (for side calls such as a router's tie-break)."""
        with self._lock:
            self._forced[name] = answer

    def allow_leftovers(self) -> None:
        """Let this test end with scripted replies unused (say why where it is called)."""
        with self._lock:
            self._allow_leftovers = True

    def allow_unscripted(self) -> None:
        """Let this test make requests nothing was scripted for (say why where it is called)."""
        with self._lock:
            self._allow_unscripted = True

    @property
    def scripted_requests(self) -> list[dict[str, Any]]:
        """Recorded bodies not answered by ``on_forced_tool``."""
        return [dict(e.request.body) for e in self.exchanges if e.source != "forced"]

    @property
    def scripted_views(self) -> list[RequestView]:
        """Parsed views of the requests not answered by ``on_forced_tool``."""
        return [e.request for e in self.exchanges if e.source != "forced"]

    @property
    def forced_requests(self) -> list[dict[str, Any]]:
        """Recorded bodies answered by ``on_forced_tool``."""
        return [dict(e.request.body) for e in self.exchanges if e.source == "forced"]

    def problems(self) -> list[str]:
        """What did not go by the script, one paragraph each: replies left over (unless
        allowed), requests with no scripted reply (unless allowed), failed script callables."""
        with self._lock:
            leftovers = [] if self._allow_leftovers else list(self._script)
            exchanges = list(self._exchanges)
            allow_unscripted = self._allow_unscripted
        return script_problems(leftovers, exchanges, allow_unscripted=allow_unscripted)

    def check(self) -> None:
        """Raise ``ScriptMismatch`` naming every problem ``problems()`` finds."""
        found = self.problems()
        if found:
            raise ScriptMismatch("FakeLLM: the script did not match:\n" + "\n".join(found))

    def reset(self) -> None:
        """Clear the script, the forced-tool handlers, the recorded requests, the allowances
        and the id counters."""
        with self._lock:
            self._forced.clear()
            self._script.clear()
            self._exchanges.clear()
            self._answering.clear()
            self._peers.clear()
            self._paths.clear()
            self._allow_leftovers = self._allow_unscripted = False
            self._call_ids = itertools.count(1)
            self._fresh_from = next(self._request_ids)

    def start(self) -> FakeLLM:
        """Start the server and wait until it accepts connections."""
        if self._thread is not None:
            raise RuntimeError("FakeLLM is already running")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app,
            host="127.0.0.1",
            port=self._port,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
        self._stopping.clear()
        self._server = server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="fakellm", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + _START_TIMEOUT
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                sock.close()
                raise RuntimeError("FakeLLM server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Stop the server and join its thread."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        self._stopping.set()
        server.should_exit = True
        thread.join(_START_TIMEOUT)
        if thread.is_alive():
            server.force_exit = True
            thread.join(_START_TIMEOUT)
        self._server = self._thread = None
        self._port = None

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _take(
        self, body: dict[str, Any], arrived: float, headers: Mapping[str, str], api: str
    ) -> tuple[Reply, int]:
        """Record the request and choose its reply: a forced-tool handler, else the next
        scripted item. Returns the reply and the exchange's index."""
        if api == "responses":  # read as chat, kept as sent
            view = replace(RequestView.parse(responses.chat_body(body)), body=body)
        else:
            view = RequestView.parse(body)
        with self._lock:
            forced = self._forced.get(view.forced_tool or "")
            item = None if forced else self._script.popleft() if self._script else None
            index = len(self._exchanges)
            source: Source = "forced" if forced else "script"
            self._exchanges.append(Exchange(view, source, arrived, headers=headers))
        answer: ScriptItem | None = forced or item
        if answer is None:
            self._mark(index, "unscripted", NO_REPLY_MESSAGE)
            return Reply(status=500, error_message=NO_REPLY_MESSAGE), index
        if isinstance(answer, Reply):
            return answer, index
        try:
            reply = answer(view)
        except Exception as exc:
            note = f"FakeLLM: script {describe(answer)} raised {exc!r}"
        else:
            if isinstance(reply, Reply):
                return reply, index
            note = f"FakeLLM: script {describe(answer)} returned {reply!r}, not a Reply"
        self._mark(index, "error", note)
        return Reply(status=500, error_message=note), index

    def _mark(self, index: int, source: Source, note: str) -> None:
        with self._lock:
            self._exchanges[index] = replace(self._exchanges[index], source=source, note=note)

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but return early when the server is stopping."""
        deadline = time.monotonic() + seconds
        while not self._stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(left, 0.05))

    async def _hold(self, rid: int, together: int, seconds: float) -> None:
        """Wait until ``together`` requests have been open at once since request ``rid``
        arrived, or ``seconds`` have passed."""
        met = asyncio.Event()  # set by _chat, on this same event loop
        with self._lock:
            if self._open.get(rid, 0) >= together:
                return
            self._holding[rid] = (together, met)
        try:
            async with asyncio.timeout(seconds):
                await met.wait()
        except TimeoutError:
            pass
        finally:
            with self._lock:
                self._holding.pop(rid, None)

    def _arrive(self) -> int:
        """Open a request: its id. Releases the held answers it completes (with the lock)."""
        rid = next(self._request_ids)
        self._open[rid] = 0
        now = sum(1 for r in self._open if r >= self._fresh_from)
        for r, peak in self._open.items():
            self._open[r] = max(peak, now)
        for r, (together, met) in self._holding.items():
            if self._open[r] >= together:
                met.set()
        return rid

    async def _models(self, request: Request) -> Response:
        """Serve ``GET /v1/models``."""
        model = {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "fakellm"}
        return JSONResponse({"object": "list", "data": [model]})

    async def _chat(self, request: Request) -> Response:
        """Serve ``POST /v1/chat/completions`` from the script, timing the answer."""
        started = time.perf_counter()
        with self._lock:
            client = request.client
            self._peers.append(f"{client.host}:{client.port}" if client else "?")
            query = f"?{request.url.query}" if request.url.query else ""
            self._paths.append(request.url.path + query)
            rid = self._arrive()
        try:
            response, index = await self._answer(request, rid, started)
        except BaseException:
            self._answered(rid, started, None)
            raise
        if isinstance(response, StreamingResponse):
            response.body_iterator = self._timed(response.body_iterator, rid, started, index)
        else:
            self._answered(rid, started, index)
        return response

    async def _timed(
        self, body: AsyncIterable[Any], rid: int, started: float, index: int | None
    ) -> AsyncIterator[Any]:
        try:
            async for part in body:
                yield part
        finally:
            self._answered(rid, started, index)

    def _answered(self, rid: int, started: float, index: int | None) -> None:
        now = time.perf_counter()
        with self._lock:
            self._open.pop(rid, None)
            self._answering.append((started, now))
            if index is not None and index < len(self._exchanges):
                self._exchanges[index] = replace(self._exchanges[index], answered=now)

    async def _answer(
        self, request: Request, rid: int, arrived: float
    ) -> tuple[Response, int | None]:
        """The scripted response to one chat request, and its exchange's index."""
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return error_response(400, "FakeLLM: request body is not a JSON object"), None
        api = "responses" if request.url.path.endswith("/responses") else "chat"
        reply, index = self._take(body, arrived, dict(request.headers), api)
        if reply.together:
            await self._hold(rid, reply.together, reply.hold_timeout)
        await self._sleep(reply.delay)
        if reply.status != 200:
            return error_response(reply.status, reply.error_message), index

        with self._lock:
            calls = [(c.id or f"call_{next(self._call_ids)}", c) for c in reply.tool_calls]
        finish = reply.finish_reason or ("tool_calls" if calls else "stop")
        read = responses.chat_body(body) if api == "responses" else body
        usage = reply.usage or estimate_usage(read, reply)
        base = {
            "id": f"chatcmpl-fake{next(self._completion_ids)}",
            "created": int(time.time()),
            "model": str(body.get("model") or MODEL_ID),
            "system_fingerprint": "fp_fakellm",
        }
        if api == "responses":
            return self._response(body, reply, calls, usage), index
        if body.get("stream"):
            options = body.get("stream_options") or {}
            include_usage = bool(options.get("include_usage"))
            events = stream_events(base, reply, calls, finish, usage if include_usage else None)
            chunks = self._stream(reply, events)
            headers = {"Cache-Control": "no-cache"}
            return (
                StreamingResponse(chunks, media_type="text/event-stream", headers=headers),
                index,
            )

        return JSONResponse(completion(base, reply, calls, finish, usage)), index

    def _response(
        self,
        body: dict[str, Any],
        reply: Reply,
        calls: list[tuple[str, ToolCall]],
        usage: dict[str, Any],
    ) -> Response:
        """A reply as the Responses API sends it: whole, or as its typed events."""
        rid = f"fake{next(self._completion_ids)}"
        model = str(body.get("model") or MODEL_ID)
        if not body.get("stream"):
            return JSONResponse(responses.response(rid, model, reply, calls, usage))
        events = responses.events(rid, model, reply, calls, usage)

        async def sent() -> AsyncIterator[str]:
            for number, event in enumerate(events):
                if number and reply.stream_chunk_delay:
                    await self._sleep(reply.stream_chunk_delay)
                yield responses.sse(event)

        return StreamingResponse(
            sent(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )

    async def _stream(self, reply: Reply, events: list[dict[str, Any]]) -> AsyncIterator[str]:
        """Yield the server-sent events of a streamed completion, paced by the reply."""
        for number, payload in enumerate(events):
            if number and reply.stream_chunk_delay:
                await self._sleep(reply.stream_chunk_delay)
            yield f"data: {json.dumps(payload)}\n\n"
        yield "data: [DONE]\n\n"
