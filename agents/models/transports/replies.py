"""OpenAI-shaped replies read as plain dicts: a streamed reply's server-sent events made
chunks (text pieces of one network read joined), a whole reply checked, an error body's
message."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from agents.errors import StreamError, UnreadableReply


class AsyncEvents:
    """The chunks of a streamed completion, read off its server-sent events as dicts.

    ``reads`` gives the lines of each network read. The text pieces that arrived in one read
    become one chunk: a server that sends faster than it is read (or a proxy that buffers)
    delivers dozens of pieces at once, and each piece would cost a trip through LangChain's
    callbacks, the graph's stream and the client's events (1.4 ms of CPU a turn measured
    under load). Pieces that arrive apart stay apart, so the stream stays as live as it came.
    """

    def __init__(self, reads: AsyncIterator[list[str]], release: Callable[[], Any]) -> None:
        self._chunks = _chunks_of(_aiter_events(reads))
        self._release = release

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._chunks

    async def close(self) -> None:
        result = self._release()
        if asyncio.iscoroutine(result):
            await result


class Events:
    """Blocking :class:`AsyncEvents`."""

    def __init__(self, lines: Iterator[str], release: Callable[[], Any]) -> None:
        self._chunks = _chunks_in(_iter_events(lines))
        self._release = release

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self._chunks

    def close(self) -> None:
        self._release()


async def _aiter_events(reads: AsyncIterator[list[str]]) -> AsyncIterator[list[tuple[str, str]]]:
    """The events that each read completed (reads that complete none give nothing)."""
    events = _EventReader()
    async for lines in reads:
        done = [event for line in lines if (event := events.feed(line)) is not None]
        if done:
            yield done
    if (event := events.feed("")) is not None:
        yield [event]


def _iter_events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    events = _EventReader()
    for line in lines:
        if (event := events.feed(line)) is not None:
            yield event
    if (event := events.feed("")) is not None:
        yield event


class _EventReader:
    """Server-sent events, line by line: ``feed`` returns (event name, data) when a blank
    line ends an event that has data."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> tuple[str, str] | None:
        if not line:
            if not self._data:
                return None
            done = (self._event, "\n".join(self._data))
            self._event, self._data = "", []
            return done
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None


# Events after [DONE] are read but not used: a response read to its end lets its
# connection go back to the pool (closed half-read, the connection is dropped and the next
# call opens a new one).


async def _chunks_of(
    batches: AsyncIterator[list[tuple[str, str]]],
) -> AsyncIterator[dict[str, Any]]:
    done = False
    async for batch in batches:
        joined: dict[str, Any] | None = None
        for event, data in batch:
            done = done or data.strip() == "[DONE]"
            if done:
                break
            try:
                chunk = _chunk(event, data)
            except Exception:
                if joined is not None:  # the text before the error reaches its reader first
                    yield joined
                raise
            if joined is not None and _text_piece(joined) and _text_piece(chunk):
                delta = joined["choices"][0]["delta"]
                delta["content"] += chunk["choices"][0]["delta"]["content"]
                continue
            if joined is not None:
                yield joined
            joined = chunk
        if joined is not None:
            yield joined


_TEXT_PIECE_CHOICE = {"index", "delta", "finish_reason", "logprobs"}


def _text_piece(chunk: dict[str, Any]) -> bool:
    """A chunk that only carries text: one choice, its delta content (and maybe the role),
    nothing that ends the choice or counts tokens; two of them in a row can be one."""
    choices = chunk["choices"]
    if len(choices) != 1 or chunk.get("usage"):
        return False
    choice = choices[0]
    delta = choice["delta"]
    return (
        choice.keys() <= _TEXT_PIECE_CHOICE
        and not choice.get("finish_reason")
        and not choice.get("logprobs")
        and isinstance(delta, dict)
        and isinstance(delta.get("content"), str)
        and delta.keys() <= {"content", "role"}
        and choice.get("index", 0) == 0
    )


def _chunks_in(events: Iterator[tuple[str, str]]) -> Iterator[dict[str, Any]]:
    done = False
    for event, data in events:
        done = done or data.strip() == "[DONE]"
        if not done:
            yield _chunk(event, data)


def _chunk(event: str, data: str) -> dict[str, Any]:
    """One stream event's chunk; an error event raises (as the SDK's own stream does)."""
    chunk = _json(data)
    if event == "error" or chunk.get("error"):
        error = chunk.get("error") or chunk
        message = error.get("message") if isinstance(error, dict) else str(error)
        raise StreamError(f"the model server reported an error mid-stream: {message}")
    choices = chunk.get("choices") or []
    if not (isinstance(choices, list) and _all_with(choices, "delta")):
        raise UnreadableReply(
            f"the model server sent a chunk without choices[].delta: {data[:200]!r}"
        )
    return chunk


def whole_reply(text: str) -> dict[str, Any]:
    """A whole (not streamed) reply; an error body sent with status 200 raises."""
    reply = _json(text)
    if reply.get("error") and not reply.get("choices"):
        error = reply["error"]
        message = error.get("message") if isinstance(error, dict) else str(error)
        raise StreamError(f"the model server answered with an error: {message}")
    choices = reply.get("choices")
    if not (isinstance(choices, list) and choices and _all_with(choices, "message")):
        raise UnreadableReply(f"the model server's reply has no choices[].message: {text[:200]!r}")
    return reply


def _all_with(choices: list[Any], key: str) -> bool:
    """Whether every choice is an object whose ``key`` is an object."""
    return all(isinstance(c, dict) and isinstance(c.get(key) or {}, dict) for c in choices)


def _json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        raise UnreadableReply(
            f"the model server sent something that is not JSON: {text[:200]!r}"
        ) from None
    if not isinstance(value, dict):
        raise UnreadableReply(f"the model server sent JSON that is not an object: {text[:200]!r}")
    return value


def error_message(body: str) -> str:
    """The message of an OpenAI-style error body, else the body itself (shortened)."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:300] or "no details"
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    return str(error)[:300]
