"""YAML read within bounds: an alias bomb or an alias inside its own anchor is refused from
the node graph, at once and naming the line, before anything expands it."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from agents import yamlsafe
from tests.workflowkit import alias_bomb


def test_an_alias_bomb_is_refused_at_once_in_little_memory_naming_the_anchor() -> None:
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(yamlsafe.YamlRefused) as refused:
        yamlsafe.load(alias_bomb())  # 9**9 values: once 8.5 GB in 30 s
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 0.5
    assert peak < 5_000_000
    assert refused.value.line == 6
    assert refused.value.reason.startswith("&l5 expands to more than 250,000 values")


def test_an_alias_inside_its_own_anchor_is_refused_naming_the_line() -> None:
    with pytest.raises(yamlsafe.YamlRefused) as flow:
        yamlsafe.load("name: k-anchor\nversion: 1\ndescription: &a [*a]\nnodes: []\n")
    assert flow.value.line == 3
    assert "an alias to &a is inside the node it names" in flow.value.reason
    with pytest.raises(yamlsafe.YamlRefused) as block:
        yamlsafe.load("top: &loop\n  name: x\n  inner:\n    child: *loop\n")
    assert block.value.line == 4  # the key whose value is the alias
    assert "an alias to &loop is inside" in block.value.reason


def test_cycles_may_be_left_to_the_caller_and_still_count_once() -> None:
    loop = yamlsafe.load("a: &a [*a]\n", cycles=True)["a"]
    assert loop[0] is loop
    with pytest.raises(yamlsafe.YamlRefused):
        yamlsafe.load(alias_bomb() + "loop: &z [*z]\n", cycles=True)


def test_aliases_that_stay_small_and_big_plain_documents_load() -> None:
    shared = "defaults: &d {retries: 3, timeout_s: 10}\n" + "".join(
        f"n{i}: *d\n" for i in range(1_000)
    )
    loaded = yamlsafe.load(shared)
    assert loaded["n999"] == {"retries": 3, "timeout_s": 10}
    # A workflow of 3,000 nodes (some 40,000 values) is within bounds, checked fast.
    nodes = "".join(
        f"  - {{id: n{i}, kind: set, values: {{a: '{{{{ inputs.x }}}}', b: t{i}}}, "
        f"next: n{i + 1}}}\n"
        for i in range(3_000)
    )
    text = f"name: big\ndescription: d\nnodes:\n{nodes}"
    started = time.perf_counter()
    assert len(yamlsafe.load(text)["nodes"]) == 3_000
    assert time.perf_counter() - started < 2.0


def test_a_document_nested_too_deep_is_refused() -> None:
    text = "".join(f"{'  ' * i}k{i}:\n" for i in range(300)) + f"{'  ' * 300}v: 1\n"
    with pytest.raises(yamlsafe.YamlRefused, match="nests more than 200 levels deep"):
        yamlsafe.load(text)
    assert yamlsafe.load("") is None


@pytest.mark.parametrize(
    ("kind", "given", "said"),
    [
        ("tuple_type", "sk-secret", "should be a list (`- item` lines, or `[a, b]`), not text"),
        ("list_type", 3, "should be a list (`- item` lines, or `[a, b]`), not a number"),
        ("dict_type", ["a"], "should be a mapping (`key: value` lines), not a list"),
        ("model_type", None, "should be a mapping (`key: value` lines), not empty"),
    ],
)
def test_a_value_of_the_wrong_shape_is_told_in_yamls_words(
    kind: str, given: object, said: str
) -> None:
    err = {"type": kind, "input": given, "msg": "Input should be a valid tuple", "loc": ("x",)}
    assert yamlsafe.validation_message(err) == said


def test_other_validation_messages_lose_only_pydantics_prefix() -> None:
    err = {"type": "value_error", "msg": "Value error, no such skill", "loc": ("x",)}
    assert yamlsafe.validation_message(err) == "no such skill"
