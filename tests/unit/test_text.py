"""Text that is not valid Unicode is found where it is and mended where it comes from."""

from __future__ import annotations

from agents.skills.results import trim
from agents.skills.spec import ResultLimits
from agents.text import bad_text, mend


def test_the_path_of_a_lone_surrogate_is_named() -> None:
    assert bad_text({"a": [1, {"b": "ok \udc00"}]}) == "a.1.b"
    assert bad_text({"k\ud800": "v"}) == "k\ud800"
    assert bad_text("\ud800") == ""
    assert bad_text({"a": ["ok", "\U0001f600 fine"]}) is None


def test_a_handler_result_with_a_lone_surrogate_is_mended_not_kept() -> None:
    text, _, _ = trim({"name": "bad \ud800 text"}, ResultLimits())
    assert "\ud800" not in text
    text.encode("utf-8")  # what a response or a checkpoint does with it
    assert mend("a\udfffb") == "a\ufffdb"
