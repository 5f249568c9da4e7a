"""Scripted OpenAI-compatible chat-completions server for tests.

Example: ``with FakeLLM() as fake: fake.script(Reply(content="Hi"))``, then point
an OpenAI client at ``fake.base_url``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

NO_REPLY_MESSAGE = "FakeLLM: no scripted reply left for this request"
MODEL_ID = "fake-model"
_START_TIMEOUT = 10.0
_ERROR_KINDS: dict[int, tuple[str, str | None]] = {
    401: ("invalid_request_error", "invalid_api_key"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


@dataclass(frozen=True)
class ToolCall:
    """One tool call the fake model makes.

    Attributes:
        name: Function name.
        arguments: A dict (JSON-encoded on the wire) or a raw string sent verbatim.
        id: Tool-call id; ``call_<n>`` is generated when None.
    """

    name: str
    arguments: dict[str, Any] | str
    id: str | None = None

    @property
    def arguments_json(self) -> str:
        """The arguments as sent on the wire."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(frozen=True)
class Reply:
    """One scripted answer (or fault) for a single chat-completions request.

    Attributes:
        content: Assistant text.
        tool_calls: Tool calls to emit.
        status: HTTP status; non-200 answers with an OpenAI-style error body.
        delay: Seconds to sleep before the response starts.
        usage: Explicit usage dict; computed from the request and reply if None.
        finish_reason: Defaults to "tool_calls" if tool calls are present, else "stop".
        stream_chunk_delay: Seconds to sleep between streamed chunks.
        error_message: Message of the error body for non-200 statuses.
    """

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] | list[ToolCall] = ()
    status: int = 200
    delay: float = 0.0
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    stream_chunk_delay: float = 0.0
    error_message: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))


ScriptItem = Reply | Callable[[dict[str, Any]], Reply]


def _error_response(status: int, message: str | None) -> JSONResponse:
    """Build an OpenAI-style error response."""
    default = ("server_error" if status >= 500 else "invalid_request_error", None)
    kind, code = _ERROR_KINDS.get(status, default)
    text = message or f"FakeLLM: scripted HTTP {status}"
    return JSONResponse(
        {"error": {"message": text, "type": kind, "param": None, "code": code}}, status
    )


def _text_length(content: Any) -> int:
    """Count characters of a message content (string or list of parts)."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(p.get("text") or "") for p in content if isinstance(p, dict))
    return 0


def _split_words(text: str) -> list[str]:
    """Split text into word pieces that keep their spaces, so they join exactly."""
    return re.findall(r"\S+\s*|\s+", text)


def _split_args(text: str) -> list[str]:
    """Split an arguments string into at least two pieces when it has 2+ chars."""
    if len(text) < 2:
        return [text] if text else []
    size = -(-len(text) // 3)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _forced_name(body: dict[str, Any]) -> str | None:
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        return str((choice.get("function") or {}).get("name"))
    return None


class FakeLLM:
    """OpenAI-compatible server answering from a FIFO script, run in a thread.

    Use as a context manager; ``base_url`` is valid while it runs.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._script: deque[ScriptItem] = deque()
        self._forced: dict[str, Callable[[dict[str, Any]], Reply]] = {}
        self._requests: list[dict[str, Any]] = []
        self._answering: list[tuple[float, float]] = []
        self._peers: list[str] = []
        self._call_ids = itertools.count(1)
        self._completion_ids = itertools.count(1)
        self._stopping = threading.Event()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None
        self._app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
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
    def requests(self) -> list[dict[str, Any]]:
        """A copy of every received JSON request body, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def answering(self) -> list[tuple[float, float]]:
        """``time.perf_counter()`` intervals spent answering chat requests, each from the
        request's arrival to its last byte: what a real model's time would be."""
        with self._lock:
            return list(self._answering)

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

    def script(self, *items: ScriptItem) -> None:
        """Append replies (or callables ``body -> Reply``) to the script."""
        with self._lock:
            self._script.extend(items)

    def on_forced_tool(self, name: str, answer: Callable[[dict[str, Any]], Reply]) -> None:
        """Answer every request that forces tool ``name`` (``tool_choice``) with ``answer``,
        outside the FIFO script (for side calls such as a router's tie-break)."""
        with self._lock:
            self._forced[name] = answer

    @property
    def scripted_requests(self) -> list[dict[str, Any]]:
        """Recorded bodies answered from the script (not by ``on_forced_tool``)."""
        with self._lock:
            return [b for b in self._requests if _forced_name(b) not in self._forced]

    @property
    def forced_requests(self) -> list[dict[str, Any]]:
        """Recorded bodies that forced a tool (answered by ``on_forced_tool``)."""
        with self._lock:
            return [b for b in self._requests if _forced_name(b) in self._forced]

    def reset(self) -> None:
        """Clear the script, the recorded requests and the id counters."""
        with self._lock:
            self._forced.clear()
            self._script.clear()
            self._requests.clear()
            self._answering.clear()
            self._peers.clear()
            self._call_ids = itertools.count(1)

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

    def _take(self, body: dict[str, Any]) -> Reply:
        """Record the body and consume the next scripted reply."""
        with self._lock:
            self._requests.append(body)
            forced = self._forced.get(_forced_name(body) or "")
            item = None if forced else self._script.popleft() if self._script else None
        if forced is not None:
            return forced(body)
        if item is None:
            return Reply(status=500, error_message=NO_REPLY_MESSAGE)
        if isinstance(item, Reply):
            return item
        try:
            reply = item(body)
        except Exception as exc:
            return Reply(status=500, error_message=f"FakeLLM: script callable raised {exc!r}")
        if not isinstance(reply, Reply):
            return Reply(status=500, error_message=f"FakeLLM: script callable returned {reply!r}")
        return reply

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but return early when the server is stopping."""
        deadline = time.monotonic() + seconds
        while not self._stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(left, 0.05))

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
        response = await self._answer(request)
        if isinstance(response, StreamingResponse):
            response.body_iterator = self._timed(response.body_iterator, started)
        else:
            self._answered(started)
        return response

    async def _timed(self, body: AsyncIterable[Any], started: float) -> AsyncIterator[Any]:
        try:
            async for part in body:
                yield part
        finally:
            self._answered(started)

    def _answered(self, started: float) -> None:
        with self._lock:
            self._answering.append((started, time.perf_counter()))

    async def _answer(self, request: Request) -> Response:
        """The scripted response to one chat request."""
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return _error_response(400, "FakeLLM: request body is not a JSON object")
        reply = self._take(body)
        await self._sleep(reply.delay)
        if reply.status != 200:
            return _error_response(reply.status, reply.error_message)

        with self._lock:
            calls = [(c.id or f"call_{next(self._call_ids)}", c) for c in reply.tool_calls]
        finish = reply.finish_reason or ("tool_calls" if calls else "stop")
        usage = reply.usage or self._usage(body, reply)
        base = {
            "id": f"chatcmpl-fake{next(self._completion_ids)}",
            "created": int(time.time()),
            "model": str(body.get("model") or MODEL_ID),
            "system_fingerprint": "fp_fakellm",
        }
        if body.get("stream"):
            options = body.get("stream_options") or {}
            include_usage = bool(options.get("include_usage"))
            chunks = self._stream(base, reply, calls, finish, usage if include_usage else None)
            headers = {"Cache-Control": "no-cache"}
            return StreamingResponse(chunks, media_type="text/event-stream", headers=headers)

        message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
        if calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_json},
                }
                for call_id, call in calls
            ]
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        return JSONResponse(
            {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
        )

    @staticmethod
    def _usage(body: dict[str, Any], reply: Reply) -> dict[str, int]:
        """Estimate token usage at roughly four characters per token."""
        messages = body.get("messages") or []
        chars = sum(_text_length(m.get("content")) for m in messages if isinstance(m, dict))
        out = len(reply.content or "") + sum(len(c.arguments_json) for c in reply.tool_calls)
        prompt, completion = max(1, chars // 4), max(1, out // 4)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    async def _stream(
        self,
        base: dict[str, Any],
        reply: Reply,
        calls: list[tuple[str, ToolCall]],
        finish: str,
        usage: dict[str, Any] | None,
    ) -> AsyncIterator[str]:
        """Yield the server-sent events of a streamed completion."""
        head = {**base, "object": "chat.completion.chunk"}
        if usage is not None:
            head["usage"] = None

        def event(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            return {**head, "choices": [choice]}

        first = {"role": "assistant", "content": "" if reply.content else None, "refusal": None}
        events = [event(first)]
        events += [event({"content": piece}) for piece in _split_words(reply.content or "")]
        for index, (call_id, call) in enumerate(calls):
            function = {"name": call.name, "arguments": ""}
            opening = {"index": index, "id": call_id, "type": "function", "function": function}
            events.append(event({"tool_calls": [opening]}))
            for piece in _split_args(call.arguments_json):
                part = {"index": index, "function": {"arguments": piece}}
                events.append(event({"tool_calls": [part]}))
        events.append(event({}, finish))
        if usage is not None:
            events.append({**head, "choices": [], "usage": usage})

        for number, payload in enumerate(events):
            if number and reply.stream_chunk_delay:
                await self._sleep(reply.stream_chunk_delay)
            yield f"data: {json.dumps(payload)}\n\n"
        yield "data: [DONE]\n\n"
