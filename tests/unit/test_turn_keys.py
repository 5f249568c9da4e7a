"""A thread's Idempotency-Keys kept with its record, and the answer a key's turn got."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from agents.turn_keys import (
    KEYS_KEPT,
    KEYS_KEPT_S,
    KeyedTurn,
    answer_to,
    ask_digest,
    keyed_turn,
    with_key,
)


def test_a_key_names_its_turn_until_it_is_older_than_the_window() -> None:
    record = {"keys": with_key(None, "k1", KeyedTurn("m1", "fp", "r1"), now=1000.0)}
    assert keyed_turn(record, "k1", now=1001.0) == KeyedTurn("m1", "fp", "r1")
    assert keyed_turn(record, "k2", now=1001.0) is None
    assert keyed_turn(record, "k1", now=1000.0 + KEYS_KEPT_S) is None
    assert "k1" not in str(record)  # kept as a digest, not as the client sent it


def test_a_key_again_moves_to_its_new_turn_and_only_the_last_keys_are_kept() -> None:
    record: dict[str, object] = {}
    for i in range(KEYS_KEPT + 3):
        record["keys"] = with_key(record, f"k{i}", KeyedTurn(f"m{i}", "fp", f"r{i}"), now=float(i))
    assert len(record["keys"]) == KEYS_KEPT  # type: ignore[arg-type]
    assert keyed_turn(record, "k0", now=20.0) is None
    record["keys"] = with_key(record, "k5", KeyedTurn("m-again", "fp", "r5"), now=21.0)
    assert keyed_turn(record, "k5", now=22.0) == KeyedTurn("m-again", "fp", "r5")
    assert len(record["keys"]) == KEYS_KEPT  # type: ignore[arg-type]


def test_the_answer_is_the_last_text_reply_before_the_next_user_message() -> None:
    history = [
        HumanMessage("first", id="h1"),
        AIMessage("", id="a1", tool_calls=[{"name": "t", "args": {}, "id": "c1"}]),
        ToolMessage("done", tool_call_id="c1", id="t1"),
        AIMessage("Answer one.", id="a2"),
        HumanMessage("second", id="h2"),
        AIMessage("", id="a3", tool_calls=[{"name": "t", "args": {}, "id": "c2"}]),
    ]
    assert answer_to(history, "h1") == history[3]
    assert answer_to(history, "h2") is None  # cut off before its answer
    assert answer_to(history, "a2") is None  # not a user message
    assert answer_to(history, "gone") is None


def test_what_a_turn_asked_is_kept_as_a_digest_not_as_the_message() -> None:
    digest = ask_digest("cancel my order ORD1001")
    record = {"keys": with_key(None, "k", KeyedTurn("m", digest, "r"), now=1.0)}
    assert "ORD1001" not in str(record)
    assert keyed_turn(record, "k", now=2.0) == KeyedTurn("m", digest, "r")
    assert ask_digest("cancel my order ORD1002") != digest
