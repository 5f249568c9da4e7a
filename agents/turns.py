"""A turn's messages as clients send them: the rules of OpenAI's message format, which
messages of a request are new, and what a stored history needs before a provider reads it."""

from __future__ import annotations

import binascii
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import structlog
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    convert_to_messages,
)

from agents.errors import InvalidTurn
from agents.feed import TARGET_MARK, fingerprint
from agents.text import NOT_UNICODE, bad_text

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ClientTurn:
    """A turn's messages as a client sent them (OpenAI format), whole history or just the new
    message. Which are new is decided when the run starts, against the history it reads
    anyway (see ``new_turn``): the thread is read once."""

    messages: list[dict[str, Any]]


MAX_MESSAGE_CHARS = 100_000  # of text in one message; the threads API holds to it too
_INSTRUCTIONS = ("system", "developer")
# The content part types OpenAI's format allows each role to send.
_PARTS_BY_ROLE = {
    "user": ("text", "image_url", "input_audio", "file"),
    "assistant": ("text", "refusal"),
    "system": ("text",),
    "developer": ("text",),
}
ROLE_OF_TYPE = {"human": "user", "ai": "assistant", "system": "system"}


def content_problem(
    content: Any, role: str = "user", *, decode: bool = True
) -> tuple[int | None, str] | None:
    """What is wrong with a message's content as OpenAI's format defines it for ``role``, if
    anything: the index of the offending part (None for the content itself) and why.

    ``decode``: inline data (an image's data URL, audio) is decoded to check it is base64, as
    a request comes in; a stored history, checked before every run, looks at its shape only
    (decoding its images again at every turn took milliseconds a megabyte)."""
    if content is None or isinstance(content, str):
        return None
    if not isinstance(content, list):
        return None, f"must be a string or a list of content parts, not {type(content).__name__}"
    allowed = _PARTS_BY_ROLE.get(role, ("text",))
    for j, part in enumerate(content):
        if isinstance(part, str):
            continue
        if not isinstance(part, dict):
            return j, "a content part must be an object with a 'type'"
        problem = _part_problem(part, allowed, role, decode)
        if problem:
            return j, problem
    return None


def _part_problem(
    part: dict[str, Any], allowed: tuple[str, ...], role: str, decode: bool
) -> str | None:
    kind = part.get("type")
    if kind not in allowed:
        known = ", ".join(repr(k) for k in allowed)
        return f"content part type {kind!r} is not allowed for role {role!r}; use {known}"
    value = part.get(kind)
    if kind in ("text", "refusal"):
        return None if isinstance(value, str) else f"a {kind!r} part needs a string {kind!r}"
    if not isinstance(value, dict):
        if kind == "image_url" and isinstance(value, str) and value:
            return _image_url_problem(value, decode)  # the short form LangChain accepts
        return f"a {kind!r} part needs an object {kind!r}"
    if kind == "image_url":
        if not (isinstance(value.get("url"), str) and value["url"]):
            return "an 'image_url' part needs 'image_url': {'url': ...}"
        return _image_url_problem(value["url"], decode)
    if kind == "input_audio":
        if not all(isinstance(value.get(k), str) for k in ("data", "format")):
            return "an 'input_audio' part needs 'input_audio': {'data': ..., 'format': ...}"
        if not value["data"]:
            return "an 'input_audio' part's 'data' is empty"
        if decode and not _is_base64(value["data"]):
            return "an 'input_audio' part's 'data' is not valid base64"
    if kind == "file" and not any(isinstance(value.get(k), str) for k in ("file_id", "file_data")):
        return "a 'file' part needs 'file': {'file_id': ...} or {'file_data': ...}"
    return None


def _image_url_problem(url: str, decode: bool) -> str | None:
    """What providers would refuse in an image's URL (OpenAI answers such a part with a 400,
    and the part, once stored, goes with every later turn of the thread): http(s) URLs, a
    Cloud Storage one (``gs://``, which litellm hands Vertex AI), or inline data."""
    if url[:5].lower() == "data:":
        head, comma, data = url.partition(",")
        head = head.lower()
        if not comma or not head.startswith("data:image/") or not head.endswith(";base64"):
            return "an 'image_url' data URL must be data:image/<type>;base64,<data>"
        if not data:
            return "an 'image_url' data URL has no data"
        if decode and not _is_base64(data):
            return "an 'image_url' data URL's data is not valid base64"
        return None
    parts = urlsplit(url)
    if parts.scheme in ("http", "https", "gs") and parts.hostname:
        return None
    return (
        "an 'image_url' url must be an http(s) URL, a gs:// one, or a data:image/<type>;base64 URL"
    )


def _is_base64(data: str) -> bool:
    try:
        binascii.a2b_base64(data.encode("ascii"), strict_mode=True)
    except (UnicodeEncodeError, binascii.Error):
        return False
    return True


def readable(content: Any, role: str) -> str | list[Any]:
    """The parts of stored content a provider can read; a note if none is left."""
    parts = content if isinstance(content, list) else []
    kept = [p for p in parts if content_problem([p], role, decode=False) is None]
    return kept or "[this message's content could not be read and was removed]"


def _text_length(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if not isinstance(content, list):
        return 0
    return sum(
        len(p) if isinstance(p, str) else len(str(p.get("text") or ""))
        for p in content
        if isinstance(p, str | dict)
    )


def _has_text(content: Any) -> bool:
    """Whether content says anything: non-blank text, or a part that is not text."""
    if isinstance(content, str):
        return bool(content.strip())
    if not isinstance(content, list):
        return False
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text":
            part = part.get("text")
        if not isinstance(part, str) or part.strip():
            return True
    return False


def new_turn(messages: list[dict[str, Any]], *, has_history: bool) -> list[BaseMessage]:
    """The new messages of a turn, from OpenAI-format messages a client sent.

    On a thread with history only the messages after the client's last assistant message are
    new (system messages count on the first turn only), so a client may resend the whole
    conversation or send just the new message.

    Raises:
        InvalidTurn: for client-side tool calls or results (they would be orphans in the
            thread's history and break it for strict providers) or unreadable messages.
    """
    for i, m in enumerate(messages):
        if m.get("role") == "tool" or m.get("tool_calls"):
            raise InvalidTurn(
                "client_tools_unsupported",
                f"messages[{i}]: tool calls and tool "
                "results from the client are not supported; send user and "
                "assistant text (the service calls its skills' tools itself).",
                f"messages.{i}",
            )
    numbered = list(enumerate(messages))
    if has_history:
        last = max((i for i, m in numbered if m.get("role") == "assistant"), default=-1)
        numbered = [(i, m) for i, m in numbered[last + 1 :] if m.get("role") not in _INSTRUCTIONS]
    if not numbered:
        raise InvalidTurn(
            "no_new_message",
            "The request has no new message after the last assistant message; add the "
            "user's message.",
            "messages",
        )
    final_index, final = numbered[-1]
    if final.get("role") != "user":
        raise InvalidTurn(
            "no_new_message",
            f"The request's last message is the {final.get('role')}'s; end it with the user's "
            "message.",
            f"messages.{final_index}",
        )
    if not _has_text(final.get("content")):
        raise InvalidTurn(
            "no_new_message",
            f"messages[{final_index}] is empty; the user's message needs some content.",
            f"messages.{final_index}.content",
        )
    for i, m in numbered:
        if _text_length(m.get("content")) > MAX_MESSAGE_CHARS:
            raise InvalidTurn(
                "message_too_long",
                f"messages[{i}] has more than {MAX_MESSAGE_CHARS:,} characters of text; "
                "shorten it or send the document as a file.",
                f"messages.{i}.content",
            )
        where = bad_text(m.get("content"))
        if where is not None:
            param = f"messages.{i}.content" + (f".{where}" if where else "")
            raise InvalidTurn("invalid_text", f"{param} {NOT_UNICODE}", param)
        problem = content_problem(m.get("content"), str(m.get("role")))
        if problem is not None:
            part, what = problem
            where = "" if part is None else f".{part}"
            raise InvalidTurn(
                "invalid_content",
                f"messages[{i}].content{where}: {what}",
                f"messages.{i}.content{where}",
            )
    messages = [m for _, m in numbered]
    try:
        return convert_to_messages(messages)
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidTurn(
            "invalid_message", f"A message could not be read: {exc}", "messages"
        ) from None


def last_user_text(turn: Sequence[BaseMessage] | ClientTurn) -> str:
    """The text routing will see: the turn's last user message."""
    if isinstance(turn, ClientTurn):
        last = turn.messages[-1] if turn.messages else {}
        if last.get("role") != "user":
            return ""
        try:
            return HumanMessage(content=last.get("content")).text
        except (TypeError, ValueError):  # unreadable: new_turn will say why
            return ""
    texts = [m.text for m in turn if isinstance(m, HumanMessage)]
    return texts[-1] if texts else ""


def unless_retried(history: list[BaseMessage], messages: Sequence[BaseMessage]) -> list[Any]:
    """The new messages, or none when the turn retries one that got no answer: a client
    whose request failed (clients retry 5xx on their own) resends the user's message, which
    the thread already holds, last."""
    n = len(messages)
    tail = history[-n:] if n else []
    if len(tail) == n and all(
        isinstance(old, HumanMessage)
        and isinstance(new, HumanMessage)
        and old.content == new.content
        for old, new in zip(tail, messages, strict=True)
    ):
        log.info("run.retried", messages=n)
        return []
    return list(messages)


def repairs(history: list[BaseMessage]) -> list[BaseMessage]:
    """What makes a stored history valid for strict providers before a run: every tool call
    gets a result (a run cut off mid-way may lack some), and content no provider can read
    (stored before it was validated) is replaced by what can be read of it, so one bad
    message cannot break the thread for good. Empty when nothing needs repair."""
    answered = {m.tool_call_id for m in history if isinstance(m, ToolMessage)}
    missing: list[BaseMessage] = [
        ToolMessage(
            content="error (cancelled): the run stopped before this tool ran",
            tool_call_id=call["id"],
            name=call["name"],
            status="error",
        )
        for m in history
        if isinstance(m, AIMessage)
        for call in m.tool_calls
        if call.get("id") and call["id"] not in answered
    ]
    # Only what clients wrote is checked: the service's own messages (model replies,
    # tool results) come from code that writes what providers read.
    unreadable = [
        m.model_copy(update={"content": readable(m.content, ROLE_OF_TYPE[m.type])})
        for m in history
        if m.id
        and m.type in ("human", "system")
        and content_problem(m.content, ROLE_OF_TYPE[m.type], decode=False) is not None
    ]
    if missing or unreadable:
        log.warning("history.repaired", tool_calls=len(missing), contents=len(unreadable))
    return unreadable + missing


def with_ids(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The messages, each with an id (the thread keeps it): what a turn's side effects are
    keyed by must not change when the thread is read again."""
    return [m if m.id else m.model_copy(update={"id": str(uuid.uuid4())}) for m in messages]


def turn_id(history: Sequence[BaseMessage], new: Sequence[BaseMessage]) -> str:
    """The id of the user message a run answers: the last one it adds, or, when it adds
    none (the message was resent), the thread's last one."""
    for message in reversed([*history, *new]):
        if isinstance(message, HumanMessage):
            return str(message.id or "")
    return ""


TARGETS = ("skill", "workflow", "profile")  # the run options that change what a turn asks


def turn_fingerprint(
    turn: Sequence[BaseMessage] | ClientTurn, target: Mapping[str, Any] | None = None
) -> str:
    """What a turn asks: its last user message ("" for none: a resume), and what the run
    options of ``target`` name to answer it (``TARGETS``): the same message for another
    skill is another request, not a retry. Without a target, the message alone (as keys
    kept before targets counted were written)."""
    if isinstance(turn, ClientTurn):
        last = turn.messages[-1] if turn.messages else {}
        asked = fingerprint(last.get("content")) if last.get("role") == "user" else ""
    else:
        humans = [m for m in turn if isinstance(m, HumanMessage)]
        asked = fingerprint(humans[-1].content) if humans else ""
    named = {k: target[k] for k in TARGETS if target and target.get(k)}
    return f"{asked}{TARGET_MARK}{json.dumps(named, sort_keys=True)}" if asked and named else asked
