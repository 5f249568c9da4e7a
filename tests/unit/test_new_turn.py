"""Which of a client's messages are new on a thread (OpenAI clients resend everything)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from agents.errors import InvalidTurn
from agents.feed import asked_of, fingerprint
from agents.turns import ClientTurn, new_turn, turn_fingerprint

SYSTEM = {"role": "system", "content": "Be terse."}
HI = {"role": "user", "content": "hi"}
HELLO = {"role": "assistant", "content": "hello"}
AGAIN = {"role": "user", "content": "again"}
P0 = "messages.0.content.0"


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
        ([{}], "messages.0.content.0", "content part type None is not allowed"),
        ([{"text": "x"}], "messages.0.content.0", "content part type None is not allowed"),
        ([{"type": "refusal", "refusal": "no"}], "messages.0.content.0", "for role 'user'"),
        ([{"type": "input_audio", "input_audio": {}}], "messages.0.content.0", "'format'"),
        ([{"type": "file", "file": {}}], "messages.0.content.0", "'file_id'"),
        ([{"type": "text"}], "messages.0.content.0", "needs a string 'text'"),
        ([{"type": "text", "text": "a"}, {"type": "video"}], "messages.0.content.1", "'video'"),
        ([{"type": "image_url", "image_url": {}}], "messages.0.content.0", "'url'"),
        ([7], "messages.0.content.0", "must be an object"),
        ([{"type": "image_url", "image_url": {"url": "not a url"}}], P0, "http(s) URL"),
        ([{"type": "image_url", "image_url": "ftp://h/a.png"}], P0, "http(s) URL"),
        ([{"type": "image_url", "image_url": {"url": "https://"}}], P0, "http(s) URL"),
        ([{"type": "image_url", "image_url": {"url": "data:text/plain,hi"}}], P0, "data:image/"),
        ([{"type": "image_url", "image_url": {"url": "data:image/png;base64,!!"}}], P0, "base64"),
        ([{"type": "image_url", "image_url": {"url": "data:image/png;base64,"}}], P0, "no data"),
        (
            [{"type": "input_audio", "input_audio": {"data": "!!no!!", "format": "wav"}}],
            P0,
            "base64",
        ),
        ([{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}], P0, "empty"),
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


@pytest.mark.parametrize(
    ("role", "part"),
    [
        ("assistant", {"type": "image_url", "image_url": {"url": "https://x/y.png"}}),
        ("system", {"type": "image_url", "image_url": {"url": "https://x/y.png"}}),
        ("system", {"type": "refusal", "refusal": "no"}),
    ],
)
def test_each_role_may_send_only_its_own_part_types(role: str, part: dict[str, object]) -> None:
    messages = [{"role": role, "content": [part]}, HI]
    with pytest.raises(InvalidTurn) as info:
        new_turn(messages, has_history=False)
    assert (info.value.code, info.value.param) == ("invalid_content", "messages.0.content.0")
    assert f"for role {role!r}" in info.value.message


def test_a_blank_text_part_is_no_message_but_an_image_is() -> None:
    blank = {"role": "user", "content": [{"type": "text", "text": "  "}]}
    with pytest.raises(InvalidTurn) as info:
        new_turn([blank], has_history=False)
    assert info.value.code == "no_new_message"
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    assert new_turn([{"role": "user", "content": [image]}], has_history=False)


def test_a_turn_must_end_with_the_users_message() -> None:
    with pytest.raises(InvalidTurn) as info:
        new_turn([HI, HELLO], has_history=False)
    assert (info.value.code, info.value.param) == ("no_new_message", "messages.1")
    assert "assistant" in info.value.message


def test_a_blank_last_user_message_is_refused_even_after_a_real_one() -> None:
    with pytest.raises(InvalidTurn) as info:
        new_turn([HI, {"role": "user", "content": "  "}], has_history=False)
    assert (info.value.code, info.value.param) == ("no_new_message", "messages.1.content")


@pytest.mark.parametrize(
    ("content", "param"),
    [
        ("x \ud800 y", "messages.0.content"),
        (
            [{"type": "text", "text": "ok"}, {"type": "text", "text": "\udfff"}],
            "messages.0.content.1.text",
        ),
    ],
)
def test_text_that_is_not_valid_unicode_is_refused_naming_where(content: Any, param: str) -> None:
    with pytest.raises(InvalidTurn) as caught:
        new_turn([{"role": "user", "content": content}], has_history=False)
    assert (caught.value.code, caught.value.param) == ("invalid_text", param)
    assert "surrogate" in caught.value.message


def test_a_valid_surrogate_pair_is_an_ordinary_character() -> None:
    # JSON's "\ud83d\ude00" decodes to one character (U+1F600): nothing to refuse.
    [message] = new_turn([{"role": "user", "content": "smile \U0001f600"}], has_history=False)
    assert message.content == "smile \U0001f600"


def test_a_stored_part_no_provider_reads_is_left_out_of_the_next_run() -> None:
    # Stored before parts were checked: sent again with every later turn, a provider's 400
    # for it failed every turn of the thread. The next run leaves it out.
    from langchain_core.messages import HumanMessage

    from agents.turns import repairs

    bad = {"type": "image_url", "image_url": {"url": "not a url"}}
    stored = HumanMessage([{"type": "text", "text": "look"}, bad], id="m1")
    [repaired] = repairs([stored])
    assert repaired.content == [{"type": "text", "text": "look"}]
    fine = HumanMessage([{"type": "image_url", "image_url": {"url": "https://x.org/a.png"}}])
    assert repairs([fine.model_copy(update={"id": "m2"})]) == []


@pytest.mark.parametrize(
    "url",
    [
        "https://x.org/a.png",
        "HTTPS://X.org/a.png",
        "http://127.0.0.1:8000/a.png",
        "gs://bucket/photo.png",  # litellm hands it to Vertex AI
        "data:image/png;base64,AA==",
        "data:IMAGE/PNG;name=a.png;base64,AAAA",
    ],
)
def test_image_urls_providers_take_are_accepted(url: str) -> None:
    part = {"type": "image_url", "image_url": {"url": url}}
    [turn] = new_turn([{"role": "user", "content": [part]}], has_history=False)
    assert turn.content == [part]


def test_a_stored_history_is_checked_without_decoding_its_images_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before every run: decoding megabytes of stored images at every turn cost milliseconds.
    from langchain_core.messages import HumanMessage

    from agents import turns

    big = "data:image/png;base64," + "A" * 4_000_000
    stored = HumanMessage([{"type": "image_url", "image_url": {"url": big}}], id="m1")
    decoded: list[int] = []
    real = turns._is_base64
    monkeypatch.setattr(turns, "_is_base64", lambda data: decoded.append(len(data)) or real(data))
    assert turns.repairs([stored]) == []
    assert decoded == []
    new_turn([{"role": "user", "content": stored.content}], has_history=False)
    assert decoded == [4_000_000]  # a request's own images are decoded as they come in


def test_a_turns_fingerprint_tells_the_same_message_for_another_target_apart() -> None:
    said = [HumanMessage("where is ORD1?")]
    plain = turn_fingerprint(said)
    assert plain == turn_fingerprint(said, {"skill": None, "owner": "alice"}) == "where is ORD1?"
    named = {
        turn_fingerprint(said, {"skill": "order-query"}),
        turn_fingerprint(said, {"skill": "returns-policy"}),
        turn_fingerprint(said, {"workflow": "order-query"}),
        turn_fingerprint(said, {"profile": "fast"}),
    }
    assert len(named) == 4
    assert plain not in named
    client = ClientTurn([{"role": "user", "content": "where is ORD1?"}])
    assert turn_fingerprint(client, {"skill": "order-query"}) in named
    assert turn_fingerprint([], {"skill": "order-query"}) == ""  # a resume asks nothing


def test_a_message_holding_the_target_mark_is_told_apart_from_a_targeted_one() -> None:
    # The mark (a control character) between a message and its target in a fingerprint:
    # typed into a message, it made the message alone read as another message for a target.
    targeted = turn_fingerprint([HumanMessage("hi")], {"skill": "order-query"})
    typed = [HumanMessage(targeted)]
    assert turn_fingerprint(typed) != targeted
    # and the message part of its fingerprint is still the message, target or not
    again = turn_fingerprint(typed, {"skill": "order-query"})
    assert asked_of(again) == asked_of(turn_fingerprint(typed)) == fingerprint(targeted)
    assert asked_of(targeted) == fingerprint("hi") == "hi"
    # nor is it taken for the text its escaped form spells
    spelled = fingerprint(targeted)
    assert fingerprint(spelled) != spelled
    assert fingerprint(spelled.removeprefix("\x1e")) != spelled
