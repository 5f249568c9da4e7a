"""How the router reads a message: its requests, and whether it is small talk."""

from __future__ import annotations

import pytest

from agents.router.intents import independent, small_talk, split_intents
from agents.skills.index import query_parts


def test_two_requests_joined_by_and_are_two_clauses() -> None:
    assert split_intents("check order ORD1234 and tell me if CNC-001 has open alarms") == [
        "check order ORD1234",
        "tell me if CNC-001 has open alarms",
    ]
    assert split_intents("查一下订单ORD1234，另外CNC-001有告警吗") == [
        "查一下订单ORD1234",
        "CNC-001有告警吗",
    ]


def test_a_request_that_uses_another_ones_result_is_not_independent() -> None:
    assert independent("check order ORD1 and tell me if CNC-001 has alarms")
    assert not independent("look up ORD1 then create a work order for it")


@pytest.mark.parametrize(
    "text",
    [
        "hi there, who are you?",
        "thanks!",
        "Thank you so much",
        "你好",
        "what can you do",
        "thanks, that's all",
        "bye bye",
    ],
)
def test_greetings_thanks_and_questions_about_the_assistant_are_small_talk(text: str) -> None:
    assert small_talk(text)


@pytest.mark.parametrize(
    "text",
    [
        "and the other one?",
        "hi, what about ORD1002?",
        "yes",
        "谢谢，还有ORD1002呢",
        "thanks, same for 7",
    ],
)
def test_a_message_that_leans_on_the_previous_one_is_not_small_talk(text: str) -> None:
    assert not small_talk(text)


def test_a_long_run_of_greetings_is_answered_at_once() -> None:
    assert not small_talk("bye " * 25_000 + "x")  # no catastrophic backtracking


def test_a_clause_keeps_the_mark_that_ends_its_sentence_as_the_searched_sentence_does() -> None:
    # Its "?" and "!" sentences and those a search of the whole message embeds are then the
    # same texts: a message whose clauses do not route on their own costs one model pass more
    # (the whole message), not one per sentence again. (A "." ends no clause.)
    text = "where is my order ORD1003? It was due on Monday! 订单还没有到吗？谢谢你的帮助。"
    assert split_intents(text) == [
        "where is my order ORD1003?",
        "It was due on Monday!",
        "订单还没有到吗？",
        "谢谢你的帮助。",
    ]
    assert set(query_parts(text)) <= set(split_intents(text))
    assert split_intents("Is my order ORD1003 late? and check the weather in Paris") == [
        "Is my order ORD1003 late?",
        "check the weather in Paris",
    ]
    assert split_intents("Where is order ORD1003?  Then show me the weather") == [
        "Where is order ORD1003?",
        "show me the weather",
    ]
    assert split_intents("done; now cancel ORD1 and check order ORD2") == [
        "now cancel ORD1",
        "check order ORD2",
    ]
