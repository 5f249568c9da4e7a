"""The OpenAI chat-completions wire format of a scripted reply: whole, streamed, or an error."""

from __future__ import annotations

import re
from typing import Any

from starlette.responses import JSONResponse

from tests.fakellm.script import Reply, ToolCall

_ERROR_KINDS: dict[int, tuple[str, str | None]] = {
    401: ("invalid_request_error", "invalid_api_key"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


def error_response(status: int, message: str | None) -> JSONResponse:
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


def split_words(text: str) -> list[str]:
    """Split text into word pieces that keep their spaces, so they join exactly."""
    return re.findall(r"\S+\s*|\s+", text)


def _split_args(text: str) -> list[str]:
    """Split an arguments string into at least two pieces when it has 2+ chars."""
    if len(text) < 2:
        return [text] if text else []
    size = -(-len(text) // 3)
    return [text[i : i + size] for i in range(0, len(text), size)]


def estimate_usage(body: dict[str, Any], reply: Reply) -> dict[str, int]:
    """Estimate token usage at roughly four characters per token."""
    messages = body.get("messages") or []
    chars = sum(_text_length(m.get("content")) for m in messages if isinstance(m, dict))
    out = len(reply.content or "") + sum(len(c.arguments_json) for c in reply.tool_calls)
    prompt, completion = max(1, chars // 4), max(1, out // 4)
    reasoning = max(1, len(reply.reasoning) // 4) if reply.reasoning else 0
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion + reasoning,
        "total_tokens": prompt + completion + reasoning,
    }
    if reasoning:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


def completion(
    base: dict[str, Any],
    reply: Reply,
    calls: list[tuple[str, ToolCall]],
    finish: str,
    usage: dict[str, Any],
) -> dict[str, Any]:
    """The body of a whole (not streamed) completion."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
    if reply.reasoning:  # as DeepSeek and vLLM send a reasoning model's thinking
        message["reasoning_content"] = reply.reasoning
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
    return {**base, "object": "chat.completion", "choices": [choice], "usage": usage}


def stream_events(
    base: dict[str, Any],
    reply: Reply,
    calls: list[tuple[str, ToolCall]],
    finish: str,
    usage: dict[str, Any] | None,
) -> list[dict[str, Any]]:
    """The payloads of a streamed completion's server-sent events, before ``[DONE]``."""
    head = {**base, "object": "chat.completion.chunk"}
    if usage is not None:
        head["usage"] = None

    def event(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**head, "choices": [choice]}

    first = {"role": "assistant", "content": "" if reply.content else None, "refusal": None}
    events = [event(first)]
    events += [event({"reasoning_content": p}) for p in split_words(reply.reasoning or "")]
    events += [event({"content": piece}) for piece in split_words(reply.content or "")]
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
    return events
