"""Which of a client's messages are new on a thread (OpenAI clients resend everything)."""

from __future__ import annotations

import pytest

from agents.conversations import InvalidTurn, new_turn

SYSTEM = {"role": "system", "content": "Be terse."}
HI = {"role": "user", "content": "hi"}
HELLO = {"role": "assistant", "content": "hello"}
AGAIN = {"role": "user", "content": "again"}


def test_a_new_thread_takes_every_message_system_included() -> None:
    assert [m.type for m in new_turn([SYSTEM, HI], has_history=False)] == ["system", "human"]


def test_an_existing_thread_takes_only_what_follows_the_last_assistant_message() -> None:
    turn = new_turn([SYSTEM, HI, HELLO, AGAIN], has_history=True)
    assert [(m.type, m.text) for m in turn] == [("human", "again")]


def test_a_resent_history_without_a_new_message_is_refused() -> None:
    with pytest.raises(InvalidTurn) as info:
        new_turn([HI, HELLO], has_history=True)
    assert info.value.code == "no_new_message"


def test_client_tool_results_are_refused_naming_the_message() -> None:
    with pytest.raises(InvalidTurn) as info:
        new_turn([HI, {"role": "tool", "tool_call_id": "c1", "content": "42"}], has_history=False)
    assert (info.value.code, info.value.param) == ("client_tools_unsupported", "messages.1")
