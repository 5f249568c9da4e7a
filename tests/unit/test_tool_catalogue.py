"""The tool server's catalogue: safe names, what is listed, annotations, strict-mode schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from agents.errors import SkillNotFound
from agents.prompts import Prompts
from agents.skills.results import ToolResult
from agents.skills.service import SkillService, SkillsOptions
from agents.toolserver.catalogue import NAME_PATTERN, ToolCatalogue, public_name
from agents.toolserver.results import checked
from agents.toolserver.strict import loosen, strict_problems, strict_schema
from app.settings import Settings
from tests.skillkit import tool, write_skill

ECHO = "def echo(**values):\n    return values\n"


def catalogue(root: Path, **options: Any) -> ToolCatalogue:
    service = SkillService(SkillsOptions(root / "skills", root / "data", embeddings=False))
    service.reload()
    return ToolCatalogue(service, Prompts(), **options)


def echoes(root: Path) -> ToolCatalogue:
    """The catalogue of one skill, ``echoes``, whose tool ``echo`` takes an integer ``a``."""
    write_skill(
        root / "skills",
        "echoes",
        handler=ECHO,
        config={"tools": [tool("echo", "handler:echo", {"a": {"type": "integer"}})]},
    )
    return catalogue(root)


def many_tools(root: Path, count: int) -> None:
    for i in range(count):
        config = {"tools": [tool(f"tool_{i}", "handler:echo")]}
        write_skill(root / "skills", f"skill-{i}", handler=ECHO, config=config)


def test_a_skill_with_a_tool_named_like_a_meta_tool_is_refused_the_meta_tool_kept(
    tmp_path: Path,
) -> None:
    # It was offered here as `planner__load_skill`, but in chat the model saw the service's
    # `load_skill` only (QA): such a skill does not load anywhere now.
    write_skill(
        tmp_path / "skills",
        "planner",
        handler=ECHO,
        config={"tools": [tool("load_skill", "handler:echo"), tool("plan", "handler:echo")]},
    )
    tools = catalogue(tmp_path).all()
    assert tools["load_skill"].kind == "meta"
    assert not any(entry.skill == "planner" for entry in tools.values())


def test_a_long_clashing_name_is_cut_to_64_characters_the_same_way_every_time() -> None:
    skill = "a-very-long-skill-name-that-goes-on-and-on-and-on-and-on"
    first = public_name(skill, "search_skills", set())
    assert first == public_name(skill, "search_skills", set())
    assert len(first) <= 64
    assert NAME_PATTERN.match(first)
    assert first != public_name(skill + "-too", "search_skills", set())


@pytest.mark.parametrize(("count", "listed"), [(3, True), (49, True), (50, False)])
def test_skill_tools_are_listed_while_there_are_fewer_than_fifty(
    tmp_path: Path, count: int, listed: bool
) -> None:
    many_tools(tmp_path, count)
    tools = catalogue(tmp_path)
    names = [e.name for e in tools.listed()]
    assert names[:3] == ["search_skills", "load_skill", "call_skill_tool"]
    assert ("tool_0" in names) is listed
    assert tools.entry("tool_0").kind == "skill"  # callable by name either way


def test_the_operator_setting_overrides_the_count(tmp_path: Path) -> None:
    many_tools(tmp_path, 2)
    assert "tool_0" not in [e.name for e in catalogue(tmp_path, list_skill_tools=False).listed()]
    assert Settings(mcp_list_skill_tools="off").mcp_skill_tools_listed() is False
    assert Settings(mcp_list_skill_tools="YES").mcp_skill_tools_listed() is True
    assert Settings().mcp_skill_tools_listed() is None


def test_annotations_come_from_skill_yaml(tmp_path: Path) -> None:
    tools = [
        tool("read", "handler:echo", side_effects=False),
        tool("wipe", "handler:echo", side_effects=True, destructive=True, idempotent=True),
        tool(
            "count",
            "handler:echo",
            output_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
        ),
    ]
    write_skill(tmp_path / "skills", "store", handler=ECHO, config={"tools": tools})
    entries = catalogue(tmp_path).all()
    assert (entries["read"].read_only, entries["read"].destructive) == (True, None)
    wipe = entries["wipe"]
    assert (wipe.read_only, wipe.destructive, wipe.idempotent) == (False, True, True)
    assert entries["count"].output_schema == {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
    }


def test_an_unknown_tool_names_a_close_one(tmp_path: Path) -> None:
    with pytest.raises(SkillNotFound, match="search_skills") as raised:
        catalogue(tmp_path).entry("search_skill")
    assert raised.value.code == "tool_not_found"


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "description": "City."},
        "days": {"type": "integer", "default": 3},
        "units": {"enum": ["c", "f"]},
        "filters": {"type": "object", "description": "Anything."},
        "stops": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"at": {"type": "string"}, "note": {"type": "string"}},
                "required": ["at"],
            },
        },
        "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    },
    "required": ["city"],
}


def test_every_schema_gets_a_strict_variant_that_strict_mode_accepts() -> None:
    strict = strict_schema(SCHEMA)
    assert strict_problems(strict) == []
    assert strict_problems(SCHEMA) != []  # the checker does catch a loose one
    properties = strict["properties"]
    assert strict["required"] == list(SCHEMA["properties"])
    assert properties["city"] == {"type": "string", "description": "City."}
    assert properties["days"]["type"] == ["integer", "null"]
    assert properties["units"] == {"anyOf": [{"enum": ["c", "f"]}, {"type": "null"}]}
    assert properties["filters"]["type"] == ["string", "null"]  # free-form: JSON text
    assert properties["stops"]["items"]["required"] == ["at", "note"]
    assert SCHEMA["properties"]["days"] == {"type": "integer", "default": 3}  # not changed


def test_arguments_sent_in_strict_form_validate_against_the_declared_schema() -> None:
    sent = {
        "city": "Oslo",
        "days": None,
        "units": None,
        "filters": '{"rain": true}',
        "stops": [{"at": "9:00", "note": None}],
        "either": None,
    }
    loosened = loosen(SCHEMA, sent)
    assert loosened == {"city": "Oslo", "filters": {"rain": True}, "stops": [{"at": "9:00"}]}
    assert list(Draft202012Validator(SCHEMA).iter_errors(loosened)) == []
    assert loosen(SCHEMA, {"filters": "not json"}) == {"filters": "not json"}


async def test_call_skill_tool_with_arguments_that_are_no_json_says_so(tmp_path: Path) -> None:
    # QA: arguments "{bad" came back as "'{bad' is not of type 'object'", where a direct
    # call of the tool says the text is not JSON.
    tools = echoes(tmp_path)
    result = await tools.call(
        "call_skill_tool", {"skill": "echoes", "tool": "echo", "arguments": "{bad"}
    )
    assert (result.ok, result.error_code) == (False, "invalid_arguments")
    assert "arguments: is not valid JSON (Expecting property name" in result.content
    assert "not of type" not in result.content
    done = await tools.call(
        "call_skill_tool", {"skill": "echoes", "tool": "echo", "arguments": '{"a": 1}'}
    )
    assert done.ok, done.content


def test_loading_a_skill_no_longer_installed_says_so_whatever_the_scope(tmp_path: Path) -> None:
    # QA: a removed skill asked for with load_skill was "not part of this task".
    from agents.skills.meta import Scope, SkillTools

    write_skill(tmp_path / "skills", "echoes", handler=ECHO)
    service = SkillService(SkillsOptions(tmp_path / "skills", tmp_path / "data", embeddings=False))
    service.reload()
    tools = SkillTools(service, Prompts())
    scope = Scope(loadable={"echoes", "removed-one"})
    gone, ok = tools.decide(scope, "load_skill", {"name": "removed-one"}) or ("", True)
    assert (ok, gone.split(":")[0]) == (False, "error (unknown_skill)")
    narrow = Scope(loadable=set())
    refused, ok = tools.decide(narrow, "load_skill", {"name": "echoes"}) or ("", True)
    assert (ok, refused.split(":")[0]) == (False, "error (out_of_scope)")
    missing, ok = tools.decide(narrow, "load_skill", {"name": "removed-one"}) or ("", True)
    assert (ok, missing.split(":")[0]) == (False, "error (unknown_skill)")


async def test_arguments_that_are_no_json_object_are_refused_naming_what_came(
    tmp_path: Path,
) -> None:
    # QA: "must be a JSON object" said nothing of what was sent; a list went to the runner.
    tools = echoes(tmp_path)
    listed = await tools.call("echo", [1])
    assert (listed.ok, listed.error_code) == (False, "invalid_arguments")
    assert listed.content.endswith("the arguments of echo must be a JSON object, not an array")
    texted = await tools.call("search_skills", "[1]")
    assert texted.content.endswith("must be a JSON object, not JSON text of an array")
    no_json = await tools.call("echo", "{bad")
    assert "are not valid JSON (Expecting property name" in no_json.content
    inner = await tools.call("call_skill_tool", {"skill": "echoes", "tool": "echo", "arguments": 5})
    assert inner.content == (
        "error (invalid_arguments): invalid arguments for call_skill_tool: "
        "arguments (the tool's) must be a JSON object, not a number"
    )


async def test_a_refused_reference_names_a_few_of_the_skill_s_references(tmp_path: Path) -> None:
    # QA: every reference listed, or "use one of []" for a skill that has none.
    files = {f"references/r{i}.md": "text" for i in range(7)}
    write_skill(tmp_path / "skills", "manuals", files=files)
    write_skill(tmp_path / "skills", "bare")
    tools = catalogue(tmp_path)
    many = await tools.call("read_skill_reference", {"name": "manuals", "path": "../../x"})
    assert many.error_code == "bad_reference"
    assert many.content == (
        "error (bad_reference): '../../x' is outside skill 'manuals'; its references are "
        "'references/r0.md', 'references/r1.md', 'references/r2.md', 'references/r3.md', "
        "'references/r4.md' and 2 more"
    )
    none = await tools.call("read_skill_reference", {"name": "bare", "path": "guide.md"})
    assert none.content == (
        "error (bad_reference): skill 'bare' has no reference 'guide.md'; it has no references"
    )
    # A name longer than the file system takes: a refusal, not an OSError (a 500).
    long = await tools.call("read_skill_reference", {"name": "manuals", "path": "y" * 300})
    assert long.error_code == "bad_reference"
    assert f"'{'y' * 100}…' is not a usable path (File name too long)" in long.content


COUNTED = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


@pytest.mark.parametrize("path", ["direct", "call_skill_tool"])
async def test_a_result_against_its_output_schema_is_invalid_output_on_every_path(
    tmp_path: Path, path: str
) -> None:
    # Review: only MCP's tools/call of the tool itself checked it; through call_skill_tool,
    # or over /v1/tools, a result breaking its declared schema was handed over as it was.
    entry = tool("count", "handler:echo", {"n": {}}, output_schema=COUNTED)
    config = {"isolation": "thread", "tools": [entry]}
    write_skill(tmp_path / "skills", "counter", handler=ECHO, config=config)
    tools = catalogue(tmp_path)

    async def call(n: Any) -> ToolResult:
        if path == "direct":
            return await tools.call("count", {"n": n})
        sent = {"skill": "counter", "tool": "count", "arguments": {"n": n}}
        return await tools.call("call_skill_tool", sent)

    good = await call(3)
    assert (good.ok, good.data) == (True, {"n": 3})
    bad = await call("3")
    assert (bad.ok, bad.error_code, bad.data) == (False, "invalid_output", None)
    assert bad.content == (
        "error (invalid_output): count ran (what it does is done: do not call it again for "
        "this), but its result does not match its output_schema (n: '3' is not of type "
        "'integer'); fix the handler or the output_schema in skill.yaml"
    )
    await tools.skills.aclose()


def test_a_result_that_is_no_object_is_checked_as_structured_content_holds_it() -> None:
    listed = {"type": "object", "properties": {"result": {"type": "array"}}}
    assert checked(ToolResult("count", True, "[1]", [1]), listed).ok
    wrong = checked(ToolResult("count", True, "[1]", [1]), COUNTED)
    assert wrong.error_code == "invalid_output"
    assert "'n' is a required property" in wrong.content
    failed = ToolResult("count", False, "error (timeout): slow", None, "timeout")
    assert checked(failed, COUNTED) is failed  # a failure is no result to check
    broken = {"type": "object", "properties": {"n": {"pattern": "([unclosed"}}}
    unusable = checked(ToolResult("count", True, '{"n": "x"}', {"n": "x"}), broken)
    assert unusable.error_code == "invalid_schema"
    assert "the result of count cannot be checked: its output_schema fails" in unusable.content


LONG = "x" * 5_000
CUT = "x" * 100 + "…"  # as an error quotes a name sent: its first 100 characters


def test_the_tiers_quote_a_huge_skill_or_tool_name_cut(tmp_path: Path) -> None:
    # Review: the experts' load_skill, read_skill_reference and an unknown tool quoted a
    # 5,000-character name whole (the tool server's meta-tools cut it).
    from agents.skills.meta import Scope, SkillTools

    write_skill(tmp_path / "skills", "echoes", handler=ECHO)
    service = SkillService(SkillsOptions(tmp_path / "skills", tmp_path / "data", embeddings=False))
    service.reload()
    tools = SkillTools(service, Prompts())
    scope = Scope(loaded=["echoes"])
    calls = [
        ("load_skill", {"name": LONG}, "error (unknown_skill): no skill named"),
        ("read_skill_reference", {"name": LONG, "path": "a.md"}, "error (skill_not_loaded)"),
        ("read_skill_reference", {"name": "echoes", "path": LONG}, "error (bad_reference)"),
        (LONG, {}, "error (unknown_tool): no tool named"),
    ]
    for name, args, says in calls:
        text, ok = tools.decide(scope, name, args) or ("", True)
        assert not ok
        assert text.startswith(says), text
        assert f"'{CUT}'" in text
        assert "x" * 101 not in text
