"""OpenAI's Responses API (``POST /v1/responses``) for the scripted server: its requests read
as the chat-completions shape a ``RequestView`` parses (so a script reads both APIs alike),
and a scripted reply written as a response, whole or as its stream of typed events, with
a reasoning summary when the reply has one."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.fakellm.script import Reply, ToolCall
from tests.fakellm.wire import split_words


def chat_body(body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions shape of a Responses request: ``instructions`` and ``input``
    items as messages, function tools and a forced function as chat writes them."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments")},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and not last["content"]:
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(
                {"role": "tool", "tool_call_id": item.get("call_id"), "content": output}
            )
        elif "role" in item and kind in (None, "message"):
            messages.append({"role": item["role"], "content": _text(item.get("content"))})
    tools = [
        {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}
        for tool in body.get("tools") or []
        if isinstance(tool, dict) and tool.get("type") == "function"
    ]
    chat: dict[str, Any] = {
        "model": body.get("model"),
        "messages": messages,
        "tools": tools,
        "stream": bool(body.get("stream")),
    }
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("name"):
        chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    return chat


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return str(content or "")


def usage_of(usage: dict[str, Any]) -> dict[str, Any]:
    """A chat-completions usage as the Responses API writes it."""
    details = usage.get("completion_tokens_details") or {}
    return {
        "input_tokens": usage.get("prompt_tokens", 0),
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage.get("completion_tokens", 0),
        "output_tokens_details": {"reasoning_tokens": details.get("reasoning_tokens", 0)},
        "total_tokens": usage.get("total_tokens", 0),
    }


def _items(rid: str, reply: Reply, calls: list[tuple[str, ToolCall]]) -> list[dict[str, Any]]:
    """The output items of a whole response: reasoning, message, function calls."""
    items: list[dict[str, Any]] = []
    if reply.reasoning:
        summary = [{"type": "summary_text", "text": reply.reasoning}]
        items.append({"type": "reasoning", "id": f"rs_{rid}", "summary": summary})
    if reply.content:
        text = {"type": "output_text", "text": reply.content, "annotations": []}
        items.append(
            {
                "type": "message",
                "id": f"msg_{rid}",
                "role": "assistant",
                "status": "completed",
                "content": [text],
            }
        )
    for n, (call_id, call) in enumerate(calls):
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{rid}_{n}",
                "call_id": call_id,
                "name": call.name,
                "arguments": call.arguments_json,
                "status": "completed",
            }
        )
    return items


def response(
    rid: str,
    model: str,
    reply: Reply,
    calls: list[tuple[str, ToolCall]],
    usage: dict[str, Any] | None,
    *,
    done: bool = True,
) -> dict[str, Any]:
    """The body of a response (``done=False``: as ``response.created`` announces it)."""
    return {
        "id": f"resp_{rid}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed" if done else "in_progress",
        "model": model,
        "output": _items(rid, reply, calls) if done else [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage_of(usage) if done and usage else None,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "temperature": None,
        "top_p": None,
        "text": {"format": {"type": "text"}},
    }


def events(
    rid: str,
    model: str,
    reply: Reply,
    calls: list[tuple[str, ToolCall]],
    usage: dict[str, Any],
) -> list[dict[str, Any]]:
    """The typed events of a streamed response, each with its ``type``."""
    out: list[dict[str, Any]] = [
        {
            "type": "response.created",
            "response": response(rid, model, reply, calls, None, done=False),
        }
    ]
    items = _items(rid, reply, calls)
    for index, item in enumerate(items):
        kind, item_id = item["type"], item["id"]
        at = {"item_id": item_id, "output_index": index}
        if kind == "reasoning":
            out.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "summary": []},
                }
            )
            part = {"type": "summary_text", "text": ""}
            out.append(
                {
                    "type": "response.reasoning_summary_part.added",
                    **at,
                    "summary_index": 0,
                    "part": part,
                }
            )
            for piece in split_words(reply.reasoning or ""):
                out.append(
                    {
                        "type": "response.reasoning_summary_text.delta",
                        **at,
                        "summary_index": 0,
                        "delta": piece,
                    }
                )
            out.append(
                {
                    "type": "response.reasoning_summary_text.done",
                    **at,
                    "summary_index": 0,
                    "text": reply.reasoning,
                }
            )
        elif kind == "message":
            out.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "content": [], "status": "in_progress"},
                }
            )
            for piece in split_words(reply.content or ""):
                out.append(
                    {"type": "response.output_text.delta", **at, "content_index": 0, "delta": piece}
                )
            out.append(
                {
                    "type": "response.output_text.done",
                    **at,
                    "content_index": 0,
                    "text": reply.content,
                }
            )
        else:
            out.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "arguments": ""},
                }
            )
            arguments = item["arguments"]
            for piece in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]):
                out.append({"type": "response.function_call_arguments.delta", **at, "delta": piece})
            out.append(
                {"type": "response.function_call_arguments.done", **at, "arguments": arguments}
            )
        out.append({"type": "response.output_item.done", "output_index": index, "item": item})
    out.append(
        {"type": "response.completed", "response": response(rid, model, reply, calls, usage)}
    )
    return [{**event, "sequence_number": n} for n, event in enumerate(out)]


def sse(event: dict[str, Any]) -> str:
    """One server-sent event of a Responses stream (``event:`` names its type)."""
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
