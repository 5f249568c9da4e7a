"""When a thread is summarised and where the cut falls (agents/memory/summaries.py)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from agents.memory.summaries import (
    Summary,
    SummaryEntry,
    SummaryOptions,
    cut_point,
    fold,
    over_threshold,
    speaker,
    summarised_count,
)
from agents.state.migrations import migrate


def turn(n: int, tools: int = 0) -> list[BaseMessage]:
    """One turn: the user's message, ``tools`` rounds of a tool call and its result, an
    answer."""
    out: list[BaseMessage] = [HumanMessage(f"question {n}")]
    for k in range(tools):
        call = {"id": f"c{n}.{k}", "name": "get_order", "args": {"order_id": f"ORD{n}"}}
        out.append(AIMessage(content="", tool_calls=[call]))
        out.append(ToolMessage(content="shipped", tool_call_id=call["id"], name="get_order"))
    out.append(AIMessage(content=f"answer {n}"))
    return out


def pairs_intact(kept: list[BaseMessage]) -> bool:
    calls = {c["id"] for m in kept if isinstance(m, AIMessage) for c in m.tool_calls}
    results = {m.tool_call_id for m in kept if isinstance(m, ToolMessage)}
    return calls == results


def test_the_message_threshold_is_passed_only_above_it() -> None:
    options = SummaryOptions(after_messages=20, after_tokens=0)
    assert not over_threshold([HumanMessage("hi")] * 20, options)
    assert over_threshold([HumanMessage("hi")] * 21, options)


def test_the_token_threshold_counts_one_long_message() -> None:
    options = SummaryOptions(after_messages=20, after_tokens=8000)
    assert not over_threshold([HumanMessage("word " * 1000)], options)  # ~1,250 estimated
    assert over_threshold([HumanMessage("word " * 7000)], options)  # one message, ~8,750


def test_the_token_estimate_is_not_lower_than_the_tokenizer_count() -> None:
    # Chinese text takes more than one cl100k token per character for many characters.
    text = "历史保真与摘要多模态占位持久化" * 400  # 6,000 characters
    options = SummaryOptions(after_messages=0, after_tokens=len(text))
    assert over_threshold([HumanMessage(text)], options)


def test_a_threshold_of_zero_is_off() -> None:
    options = SummaryOptions(after_messages=0, after_tokens=0)
    assert not over_threshold([HumanMessage("word " * 20000)] * 50, options)


def test_the_cut_keeps_the_last_messages_and_opens_the_kept_part_with_a_user_message() -> None:
    messages = [m for n in range(12) for m in turn(n)]  # 24 messages, turns of 2
    cut = cut_point(messages, keep=6)
    assert cut == 18
    assert isinstance(messages[cut], HumanMessage)


def test_the_cut_moves_to_the_start_of_the_turn_it_falls_in() -> None:
    messages = [*turn(0), *turn(1), *turn(2, tools=2), *turn(3)]
    # 2 + 2 + 6 + 2 = 14; keeping 6 would cut inside turn 2 (between a call and a result).
    cut = cut_point(messages, keep=6)
    assert cut == 4
    assert len(messages) - cut >= 6
    assert pairs_intact(messages[cut:])
    assert pairs_intact(messages[:cut])


@pytest.mark.parametrize("keep", range(1, 12))
def test_the_cut_never_parts_a_tool_call_from_its_result(keep: int) -> None:
    # One turn only (no user message to move to): the cut falls inside it.
    messages = [HumanMessage("check all"), *turn(1, tools=5)[1:]]
    cut = cut_point(messages, keep=keep)
    assert len(messages) - cut >= keep or cut == 0
    assert pairs_intact(messages[cut:])
    assert pairs_intact(messages[:cut])
    assert cut == 0 or not isinstance(messages[cut], ToolMessage)


def test_several_calls_in_one_reply_stay_with_all_their_results() -> None:
    calls: list[Any] = [
        {"id": f"c{k}", "name": "get_order", "args": {"order_id": str(k)}} for k in range(3)
    ]
    messages: list[BaseMessage] = [
        HumanMessage("three orders"),
        AIMessage(content="", tool_calls=calls),
        *[ToolMessage(content="ok", tool_call_id=c["id"], name="get_order") for c in calls],
        AIMessage(content="all shipped"),
    ]
    for keep in range(1, 6):
        cut = cut_point(messages, keep=keep)
        assert pairs_intact(messages[cut:])
        assert pairs_intact(messages[:cut])


def test_call_ids_a_provider_repeats_in_every_turn_do_not_stop_the_cut() -> None:
    # Some providers number calls per reply: every turn's call is "call_0".
    messages: list[BaseMessage] = []
    for n in range(6):
        call = {"id": "call_0", "name": "get_order", "args": {"order_id": f"ORD{n}"}}
        messages += [
            HumanMessage(f"question {n}"),
            AIMessage(content="", tool_calls=[call]),
            ToolMessage(content="shipped", tool_call_id="call_0", name="get_order"),
            AIMessage(content=f"answer {n}"),
        ]
    assert cut_point(messages, keep=6) == 16  # the start of the turn the cut falls in
    assert cut_point(messages, keep=3) == 20


def test_nothing_is_cut_when_the_history_is_no_longer_than_what_is_kept() -> None:
    assert cut_point(turn(0) * 3, keep=6) == 0


def test_speakers_are_named_as_a_reader_would() -> None:
    assert [speaker(m) for m in turn(0, tools=1)] == ["user", "assistant", "tool", "assistant"]


def test_an_unknown_summary_profile_is_refused_naming_its_setting() -> None:
    from agents.errors import ConfigError
    from app.settings import Settings

    settings = Settings(model="openai/gpt-4o-mini", summary_model="cheap")
    with pytest.raises(ConfigError, match="SKILLDESK_SUMMARY_MODEL names model profile 'cheap'"):
        settings.models()


def test_the_summary_profile_is_the_summarizer_node_s() -> None:
    from app.settings import Settings

    config = Settings(model="openai/gpt-4o-mini").models()
    assert config is not None
    assert config.for_node("summarizer") == config.default


def entry(index: int, who: str) -> SummaryEntry:
    return SummaryEntry(index=index, speaker=who, text=f"message {index}")


def test_entries_past_the_bound_fold_into_counts_by_speaker_across_summaries() -> None:
    first = fold(Summary(text="a", entries=[entry(i, "user") for i in range(4)]), 3)
    assert [e["index"] for e in first["entries"]] == [1, 2, 3]
    assert first["folded"] == {"count": 1, "speakers": {"user": 1}}
    later = [entry(4, "assistant"), entry(5, "tool")]
    second = fold(Summary(text="b", entries=first["entries"] + later, folded=first["folded"]), 3)
    assert [e["index"] for e in second["entries"]] == [3, 4, 5]
    assert second["folded"] == {"count": 3, "speakers": {"user": 3}}
    assert summarised_count(second) == 6
    assert first["folded"] == {"count": 1, "speakers": {"user": 1}}  # not changed in place


def test_a_summary_written_before_folding_counts_its_entries_and_migrates() -> None:
    old = {"text": "a", "entries": [entry(0, "user"), entry(1, "assistant")]}
    assert summarised_count(old) == 2  # type: ignore[arg-type]
    values, changes = migrate({"schema_version": 2, "summary": old, "messages": []})
    assert values["summary"]["folded"] == {"count": 0, "speakers": {}}
    assert values["summary"]["entries"] == old["entries"]
    assert changes["summary"] is values["summary"]  # the next run writes the new shape
    assert "folded" not in old  # the stored value is not changed in place
