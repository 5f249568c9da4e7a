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


@pytest.mark.parametrize(
    ("content", "param", "words"),
    [
        ([{}], "messages.0.content.0", "unknown content part type None"),
        ([{"text": "x"}], "messages.0.content.0", "unknown content part type None"),
        ([{"type": "text"}], "messages.0.content.0", "needs a string 'text'"),
        ([{"type": "text", "text": "a"}, {"type": "video"}], "messages.0.content.1", "'video'"),
        ([{"type": "image_url", "image_url": {}}], "messages.0.content.0", "'url'"),
        ([7], "messages.0.content.0", "must be an object"),
    ],
)
def test_unreadable_content_parts_are_refused_naming_the_part(
    content: list[object], param: str, words: str
) -> None:
    with pytest.raises(InvalidTurn) as info:
        new_turn([{"role": "user", "content": content}], has_history=False)
    assert (info.value.code, info.value.param) == ("invalid_content", param)
    assert words in info.value.message


def test_the_part_is_named_by_its_index_in_the_request_not_in_the_new_messages() -> None:
    bad = {"role": "user", "content": [{"type": "text"}]}
    with pytest.raises(InvalidTurn) as info:
        new_turn([SYSTEM, HI, HELLO, bad], has_history=True)
    assert info.value.param == "messages.3.content.0"


def test_text_and_image_parts_are_accepted() -> None:
    parts = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]
    (message,) = new_turn([{"role": "user", "content": parts}], has_history=False)
    assert message.content == parts


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": ""}],
        [{"role": "user", "content": "   "}],
        [{"role": "user", "content": []}],
        [SYSTEM],
        [{"role": "assistant", "content": "I said this"}],
    ],
)
def test_a_turn_without_a_user_message_with_content_is_refused(
    messages: list[dict[str, object]],
) -> None:
    with pytest.raises(InvalidTurn) as info:
        new_turn(messages, has_history=False)
    assert info.value.code == "no_new_message"
