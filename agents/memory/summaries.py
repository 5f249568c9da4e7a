"""Summaries of a long thread: when to write one, where to cut, and the summary itself.

The compressed messages leave the active history (the graph removes them with
``RemoveMessage``; earlier checkpoints keep the originals). The summary is a value of its
own, never a message: the model's prose over the previous summary and the compressed
messages, plus one entry per compressed message with its index in the thread and its
speaker, so who said what at which step survives any prose the model writes. The entries
are bounded (``SummaryOptions.entries``): past the bound the oldest fold into a count per
speaker, so a thread's summary, like its checkpoints under retention, stops growing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig

from agents.models import ModelGateway
from agents.models.usage import call_usage
from agents.prompts import Prompts
from agents.tokens import MARGIN, estimate_tokens

# What each message costs beyond its text (role, separators), as providers count it.
MESSAGE_OVERHEAD_TOKENS = 4
# An entry keeps the start of its message: enough to recognise it, bounded in size.
ENTRY_CHARS = 160


@dataclass(frozen=True)
class SummaryOptions:
    """When a thread's active history is summarised (0 turns a threshold off).

    Attributes:
        after_messages: Summarise when the active history has more messages than this.
        after_tokens: ... or when its estimated tokens pass this.
        keep: The most recent messages always kept verbatim (the cut may keep more).
        entries: The most compressed messages the summary keeps an entry for (index,
            speaker, start); older ones fold into ``Summary.folded``.
    """

    after_messages: int = 20
    after_tokens: int = 8000
    keep: int = 6
    entries: int = 60


class SummaryEntry(TypedDict):
    """One compressed message: its index in the thread (from 0), who said it, its start."""

    index: int
    speaker: str
    text: str


class Folded(TypedDict):
    """The oldest compressed messages, past the entries' bound: how many, by speaker."""

    count: int
    speakers: dict[str, int]


class Summary(TypedDict):
    """Thread state ``summary``: the prose, the entries of the latest compressed messages
    (indices from ``folded["count"]`` on) and the count of the older ones."""

    text: str
    entries: list[SummaryEntry]
    folded: NotRequired[Folded]  # absent in summaries written before schema 3


class EmptySummary(Exception):
    """The model answered the summary request with no text."""


def speaker(message: BaseMessage) -> str:
    """Who said ``message``: ``user``, ``assistant``, ``tool`` or ``system``."""
    return {"human": "user", "ai": "assistant"}.get(message.type, message.type)


def message_text(message: BaseMessage) -> str:
    """What ``message`` says, tool calls and the tool answered included."""
    parts: list[str] = [str(message.text)]
    if isinstance(message, AIMessage):
        parts += [
            f"{c['name']}({json.dumps(c['args'], ensure_ascii=False)})" for c in message.tool_calls
        ]
    if message.type == "tool" and message.name:
        parts.insert(0, f"[{message.name}]")
    return " ".join(p for p in parts if p)


def summarised_count(summary: Summary | None) -> int:
    """How many earlier messages of the thread ``summary`` stands for."""
    if not summary:
        return 0
    return summary.get("folded", NO_FOLD)["count"] + len(summary["entries"])


def summary_text(summary: Summary | None) -> str | None:
    """The prose the answering prompts get (None without a summary)."""
    return summary["text"] if summary else None


def over_threshold(messages: Sequence[BaseMessage], options: SummaryOptions) -> bool:
    """Whether the active history passes either threshold (tokens estimated high)."""
    if options.after_messages and len(messages) > options.after_messages:
        return True
    if not options.after_tokens:
        return False
    texts = [message_text(m) for m in messages]
    overhead = MESSAGE_OVERHEAD_TOKENS * len(texts)
    # Tokens never outnumber UTF-8 bytes: short histories skip the tokenizer.
    if sum(len(t.encode()) for t in texts) * MARGIN + overhead <= options.after_tokens:
        return False
    return sum(estimate_tokens(t) for t in texts) + overhead > options.after_tokens


def cut_point(messages: Sequence[BaseMessage], keep: int) -> int:
    """How many of the oldest messages to compress (0: none), keeping at least ``keep``.

    The cut moves earlier, never later: never between an assistant message's tool calls
    and their results, and to the start of a turn (a user message) when one lies between
    the start and the cut, so the kept history opens with the user's words.
    """
    cut = len(messages) - max(keep, 1)
    while cut > 0 and (earlier := _split(messages, cut)) is not None:
        cut = earlier
    for start in range(cut, 0, -1):
        if isinstance(messages[start], HumanMessage):
            return start if _split(messages, start) is None else cut
    return cut


def _split(messages: Sequence[BaseMessage], cut: int) -> int | None:
    """An earlier cut when cutting before ``messages[cut]`` would part a tool call from its
    result (the calling message's index, or one step back), else None.

    A result answers the nearest assistant message before it that made a call with its id:
    some providers number their call ids per reply (``call_0`` in every turn), so an id
    alone does not say which earlier call a result belongs to.
    """
    for j in range(cut, len(messages)):
        result = messages[j]
        if isinstance(result, ToolMessage):
            caller = _caller(messages, j, result.tool_call_id)
            if caller is not None and caller < cut:
                return caller
    return cut - 1 if isinstance(messages[cut], ToolMessage) else None


def _caller(messages: Sequence[BaseMessage], at: int, call_id: str) -> int | None:
    for i in range(at - 1, -1, -1):
        message = messages[i]
        if isinstance(message, AIMessage) and any(
            c.get("id") == call_id for c in message.tool_calls
        ):
            return i
    return None


async def write_summary(
    gateway: ModelGateway,
    prompts: Prompts,
    profile: str | None,
    previous: Summary | None,
    compressed: Sequence[BaseMessage],
    config: RunnableConfig,
    max_entries: int = SummaryOptions.entries,
) -> tuple[Summary, dict[str, int]]:
    """One model call over the previous summary and the ``compressed`` messages (each given
    with its index in the thread and its speaker); returns the new summary, its entries
    folded down to ``max_entries``, and the call's usage.

    Raises:
        ModelError: the call failed after the gateway's retries and fallbacks.
        EmptySummary: the model wrote nothing.
    """
    offset = summarised_count(previous)
    items = [
        SummaryEntry(index=offset + i, speaker=speaker(m), text=message_text(m))
        for i, m in enumerate(compressed)
    ]
    system = prompts.render("summarizer", previous=summary_text(previous))
    transcript = prompts.render("summary_transcript", messages=items)
    model: Any = gateway.chat_model(profile)
    reply = await model.ainvoke([SystemMessage(content=system), HumanMessage(transcript)], config)
    prose = str(reply.text).strip()
    if not prose:
        raise EmptySummary("the model wrote an empty summary")
    entries = list(previous["entries"]) if previous else []
    entries += [SummaryEntry(**{**i, "text": _clip(i["text"])}) for i in items]
    folded = previous.get("folded", NO_FOLD) if previous else NO_FOLD
    return fold(Summary(text=prose, entries=entries, folded=folded), max_entries), call_usage(reply)


NO_FOLD = Folded(count=0, speakers={})


def fold(summary: Summary, max_entries: int) -> Summary:
    """``summary`` with at most ``max_entries`` entries: the oldest beyond them are counted
    by speaker in ``folded`` (their words live on in the prose)."""
    entries = summary["entries"]
    excess = max(len(entries) - max(max_entries, 0), 0)
    folded = summary.get("folded", NO_FOLD)
    if not excess:
        return Summary(text=summary["text"], entries=entries, folded=folded)
    speakers = dict(folded["speakers"])
    for entry in entries[:excess]:
        speakers[entry["speaker"]] = speakers.get(entry["speaker"], 0) + 1
    return Summary(
        text=summary["text"],
        entries=entries[excess:],
        folded=Folded(count=folded["count"] + excess, speakers=speakers),
    )


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ENTRY_CHARS else text[: ENTRY_CHARS - 1] + "…"
