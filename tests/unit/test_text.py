"""Text that is not valid Unicode is found where it is and mended where it comes from."""

from __future__ import annotations

import dataclasses
import datetime
import json

from agents.json_bytes import json_bytes
from agents.skills.results import trim
from agents.skills.spec import ResultLimits
from agents.text import a_or_an, bad_text, mend


def test_the_path_of_a_lone_surrogate_is_named() -> None:
    assert bad_text({"a": [1, {"b": "ok \udc00"}]}) == "a.1.b"
    assert bad_text({"k\ud800": "v"}) == "k\ud800"
    assert bad_text("\ud800") == ""
    assert bad_text({"a": ["ok", "\U0001f600 fine"]}) is None


def test_a_handler_result_with_a_lone_surrogate_is_mended_not_kept() -> None:
    text, data, _ = trim({"name": "bad \ud800 text", "k\udc80": ["x\udfff"]}, ResultLimits())
    assert "\ud800" not in text
    text.encode("utf-8")  # what a response or a checkpoint does with it
    assert mend("a\udfffb") == "a\ufffdb"
    # The data too (QA): workflows keep it in their records, and one bad character made every
    # listing of workflow runs a 500, after restarts too.
    assert data == {"name": "bad \ufffd text", "k\ufffd": ["x\ufffd"]}
    assert bad_text(data) is None
    _, plain, _ = trim("bad \ud800 text", ResultLimits())
    assert plain == "bad \ufffd text"


def test_json_bytes_writes_what_json_writes_for_what_the_store_and_requests_hold() -> None:
    @dataclasses.dataclass
    class Point:
        x: int

    when = datetime.datetime(2026, 12, 5, 8, 30, tzinfo=datetime.UTC)
    body = {
        "text": "订单 ORD1001 — ok",
        "n": [1, 2.5, True, None],
        "when": when,  # as its str, not ISO: what readers of older documents parse
        "point": Point(3),
        "big": 2**70,  # past orjson's integers: json writes it
    }
    for value in (body, {k: v for k, v in body.items() if k != "big"}, {1: "non-str key"}):
        expected = json.dumps(value, ensure_ascii=False, default=str)
        assert json.loads(json_bytes(value)) == json.loads(expected)


def test_json_bytes_writes_text_that_is_not_valid_unicode_as_json_reads_it_back() -> None:
    value = {"text": "ok \ud800 订单", "big": 2**70}
    assert json.loads(json_bytes(value)) == value


def test_a_word_gets_the_article_it_is_said_with() -> None:
    # QA: "the handler returned a object", "a approval node".
    assert [a_or_an(w) for w in ("approval", "object", "Order", "tool")] == [
        "an approval",
        "an object",
        "an Order",
        "a tool",
    ]
