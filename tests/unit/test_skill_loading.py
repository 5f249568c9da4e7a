"""Tier 1: folders are read (frontmatter and skill.yaml only) and every mistake is named."""

from __future__ import annotations

import asyncio
import inspect
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agents import yamlsafe
from agents.errors import SkillLoadError, SkillNotFound
from agents.skills import loader
from agents.skills.importing import _KEPT, import_handler
from agents.skills.loader import load_skill
from agents.skills.packages import skill_package
from agents.skills.registry import SkillRegistry
from agents.skills.service import SkillService, SkillsOptions
from tests.skillkit import FIXTURE_SKILLS, tool, write_skill
from tests.workflowkit import alias_bomb


def problems_of(folder: Path) -> list[str]:
    with pytest.raises(SkillLoadError) as info:
        load_skill(folder)
    return [str(p) for p in info.value.problems]


def test_a_plain_agent_skills_folder_loads_unchanged(tmp_path: Path) -> None:
    folder = write_skill(
        tmp_path,
        "pdf-processing",
        "Extract text and tables from PDF files. Use when working with PDFs.",
        frontmatter={
            "license": "Apache-2.0",
            "compatibility": "Requires pdfplumber",
            "metadata": {"author": "example-org", "version": 1.0},
            "allowed-tools": "Bash(python:*) Read",
        },
        files={
            "scripts/extract.py": "print('x')\n",
            "references/REFERENCE.md": "# Ref\n",
            "assets/template.txt": "t",
        },
    )
    skill = load_skill(folder)
    assert skill.name == "pdf-processing"
    assert skill.instruction_only
    assert skill.frontmatter.metadata == {"author": "example-org", "version": "1.0"}
    assert skill.frontmatter.allowed_tools == "Bash(python:*) Read"
    assert skill.references == ("references/REFERENCE.md",)
    assert skill.body() == "Follow these steps."


def test_reference_folder_singular_is_accepted(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "x-skill", files={"reference/guide.md": "g"})
    assert load_skill(folder).references == ("reference/guide.md",)


def test_name_must_equal_folder(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "order-query", frontmatter={"name": "orders"})
    [problem] = problems_of(folder)
    assert "SKILL.md [name]" in problem
    assert "'orders' but the folder is 'order-query'" in problem
    assert problem.endswith("rename one")


def test_a_folder_whose_name_is_no_skill_name_is_the_one_to_rename(tmp_path: Path) -> None:
    # QA: "rename one", though a skill name in capitals is refused: the folder must change.
    folder = write_skill(tmp_path, "Case-Skill", frontmatter={"name": "case-skill"})
    joined = "\n".join(problems_of(folder))
    assert "rename the folder to 'case-skill'" in joined


@pytest.mark.parametrize(
    ("meta", "field", "words"),
    [
        ({"name": "Bad_Name"}, "name", "lowercase letters, digits and single hyphens"),
        ({"name": "a--b"}, "name", "single hyphens"),
        ({"description": ""}, "description", "at least 1 character"),
        ({"metadata": ["not", "a", "map"]}, "metadata", "should be a mapping"),
    ],
)
def test_frontmatter_fields_are_checked(
    tmp_path: Path, meta: dict[str, object], field: str, words: str
) -> None:
    folder = write_skill(
        tmp_path, str(meta.get("name", "good-name")).lower().replace("_", "-"), frontmatter=meta
    )
    found = [p for p in problems_of(folder) if f"[{field}]" in p]
    assert found
    assert words in found[0]


def test_a_description_over_the_spec_limit_loads_whole_with_a_warning_and_the_fix(
    tmp_path: Path,
) -> None:
    description = "Build apps with the Claude API. " * 34  # 1,088 characters, as claude-api's
    folder = write_skill(tmp_path, "claude-api", description)
    skill = load_skill(folder)
    assert skill.description == description.strip()
    [deviation] = skill.deviations
    assert (deviation.file, deviation.field) == ("SKILL.md", "description")
    assert "1,087 characters, over the spec's 1,024" in deviation.message
    assert "shorten it" in deviation.message
    assert str(deviation) in skill.warnings  # logged when the skill loads


def test_a_name_in_another_case_than_its_folder_is_served_as_the_folder(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "pdf-tools", frontmatter={"name": "PDF-Tools"})
    skill = load_skill(folder)
    assert skill.name == "pdf-tools"
    [deviation] = skill.deviations
    assert deviation.field == "name"
    assert "'PDF-Tools'" in deviation.message
    assert "lowercase" in deviation.message


@pytest.mark.parametrize(
    ("meta", "field"),
    [
        ({"name": None}, "name"),
        ({"description": None}, "description"),
        ({"description": "   "}, "description"),  # QA: loaded, served as ""
    ],
)
def test_a_skill_without_a_name_or_a_description_is_refused(
    tmp_path: Path, meta: dict[str, object], field: str
) -> None:
    folder = write_skill(tmp_path, "half-skill", frontmatter=meta)
    assert any(f"[{field}]" in p for p in problems_of(folder))


def test_missing_frontmatter_says_how_to_write_it(tmp_path: Path) -> None:
    folder = tmp_path / "no-front"
    folder.mkdir()
    (folder / "SKILL.md").write_text("# Just markdown\n", encoding="utf-8")
    [problem] = problems_of(folder)
    assert "start the file with '---'" in problem


def test_a_list_given_as_text_is_named_a_list_not_a_tuple(tmp_path: Path) -> None:
    # QA: "Input should be a valid tuple" for a YAML list: pydantic's words, not YAML's.
    folder = write_skill(tmp_path, "orders", config={"tools": "get_order"})
    [problem] = problems_of(folder)
    assert "skill.yaml [tools]: should be a list (`- item` lines" in problem
    assert problem.endswith("not text")
    assert "tuple" not in problem


def test_missing_skill_md_points_at_the_scaffold(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    [problem] = problems_of(tmp_path / "empty")
    assert "skilldesk skills new" in problem


def test_skill_yaml_errors_name_the_tool_and_field(tmp_path: Path) -> None:
    folder = write_skill(
        tmp_path,
        "orders",
        config={
            "triggers": ["order"],
            "tools": [
                tool("get_order", "handler:get_order"),
                {
                    "name": "bad",
                    "description": "d",
                    "handler": "handler",
                    "parameters": {"type": "string"},
                },
            ],
            "colour": "blue",
        },
        handler="def get_order():\n    return 1\n",
    )
    problems = problems_of(folder)
    joined = "\n".join(problems)
    assert "skill.yaml [tools[1] (bad).handler]" in joined
    assert "write 'module:function'" in joined  # not the pattern's regex (QA)
    assert "[A-Za-z_]" not in joined
    assert "skill.yaml [tools[1] (bad).parameters]" in joined
    assert "type: object" in joined
    assert "skill.yaml [colour]: is not a known field" in joined


def test_a_tool_name_too_long_is_refused_for_its_length_not_as_a_skill_name(
    tmp_path: Path,
) -> None:
    # QA: a tool name of 70 characters was refused with the skill names' rule ("lowercase
    # letters, digits and single hyphens"), wrong for tools, silent on the length.
    long_name = "look_up_an_order_by_its_number_and_the_customer_email_address_quickly"
    folder = write_skill(
        tmp_path,
        "orders",
        config={"tools": [tool(long_name, "handler:get_order")]},
        handler="def get_order():\n    return 1\n",
    )
    joined = "\n".join(problems_of(folder))
    assert f"64 characters at most (it has {len(long_name)})" in joined
    assert "single hyphens" not in joined


@pytest.mark.parametrize("reserved", ["load_skill", "read_skill_reference", "note_skill"])
def test_a_tool_named_as_one_of_the_services_own_is_refused(tmp_path: Path, reserved: str) -> None:
    # QA: a skill's `load_skill` loaded, and in chat the model was offered the service's one
    # only: the skill's handler could never be reached.
    folder = write_skill(
        tmp_path,
        "clash",
        config={"tools": [tool(reserved, "handler:run")]},
        handler="def run():\n    return 1\n",
    )
    joined = "\n".join(problems_of(folder))
    assert f"{reserved!r} is the name of one of the service's own tools" in joined


def test_the_reserved_tool_names_are_the_services_own_tool_definitions() -> None:
    from agents.skills.spec import RESERVED_TOOL_NAMES

    defined = {p.stem for p in (Path(__file__).parents[2] / "prompts" / "tools").glob("*.yaml")}
    assert defined == RESERVED_TOOL_NAMES


def schema_tool(parameters: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "name": "bs_tool",
        "description": "d",
        "handler": "handler:bs_tool",
        "parameters": parameters,
        **extra,
    }


BS_HANDLER = "def bs_tool(**values):\n    return values\n"


def test_a_tool_schema_that_cannot_check_arguments_is_refused_naming_the_place(
    tmp_path: Path,
) -> None:
    # Arguments are checked by jsonschema with Python's re: a pattern it cannot compile, or a
    # $ref that leads nowhere, would fail every call, so the skill is refused at load.
    parameters = {
        "type": "object",
        "properties": {
            "b": {"type": "string", "pattern": "([unclosed"},
            "c": {"$ref": "#/nope"},
            "d": {"type": "array", "items": {"$ref": "#missing-anchor"}},
        },
        "patternProperties": {"^x(": {"type": "string"}},
    }
    folder = write_skill(
        tmp_path, "badschema", config={"tools": [schema_tool(parameters)]}, handler=BS_HANDLER
    )
    problems = problems_of(folder)
    where = "skill 'badschema', skill.yaml [tools[0] (bs_tool).parameters"
    assert f"{where}.properties.b.pattern]: '([unclosed' " in "\n".join(problems)
    [pattern] = [p for p in problems if ".properties.b.pattern]" in p]
    assert "unterminated character set at position 1" in pattern
    assert "Python's re" in pattern
    [key] = [p for p in problems if ".patternProperties." in p]
    assert key.startswith(f"{where}.patternProperties.^x(]: '^x(' ")
    [ref] = [p for p in problems if ".properties.c.$ref]" in p]
    assert ref.startswith(f"{where}.properties.c.$ref]: '#/nope' does not resolve")
    [anchor] = [p for p in problems if ".properties.d.items.$ref]" in p]
    assert "'#missing-anchor' does not resolve" in anchor
    assert len(problems) == 4


def test_a_tool_schema_must_be_valid_json_schema_2020_12_which_checks_the_arguments(
    tmp_path: Path,
) -> None:
    # ``items`` as a list is draft 7's tuple form: 2020-12, which the runner validates with,
    # has no such thing (prefixItems instead).
    tuple_items = {
        "type": "object",
        "properties": {"pair": {"type": "array", "items": [{"type": "string"}]}},
    }
    folder = write_skill(
        tmp_path, "badschema", config={"tools": [schema_tool(tuple_items)]}, handler=BS_HANDLER
    )
    [problem] = problems_of(folder)
    assert "[tools[0] (bs_tool).parameters.properties.pair.items]: is not a valid JSON" in problem
    output = {"type": "object", "properties": {"id": {"type": "string", "pattern": "(?<x>a)"}}}
    config = {"tools": [schema_tool({"type": "object"}, output_schema=output)]}
    write_skill(tmp_path, "badschema", config=config, handler=BS_HANDLER)
    [problem] = problems_of(folder)
    assert "[tools[0] (bs_tool).output_schema.properties.id.pattern]: '(?<x>a)'" in problem


def test_references_that_resolve_within_the_schema_load(tmp_path: Path) -> None:
    parameters = {
        "type": "object",
        "$defs": {
            "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$"},
            "named": {"$anchor": "qty", "type": "integer", "minimum": 1},
            "line": {
                "$id": "https://example.com/line",
                "type": "object",
                "properties": {"sku": {"$ref": "#/$defs/inner"}},
                "$defs": {"inner": {"type": "string"}},
            },
        },
        "properties": {
            "sku": {"$ref": "#/$defs/sku"},
            "quantity": {"$ref": "#qty"},
            "line": {"$ref": "https://example.com/line"},
            "tree": {"type": "array", "items": {"$ref": "#"}},
        },
    }
    folder = write_skill(
        tmp_path, "goodschema", config={"tools": [schema_tool(parameters)]}, handler=BS_HANDLER
    )
    assert load_skill(folder).tools[0].parameters == parameters


def test_a_reference_that_would_be_fetched_from_the_network_is_refused(tmp_path: Path) -> None:
    parameters = {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}
    folder = write_skill(
        tmp_path, "remote", config={"tools": [schema_tool(parameters)]}, handler=BS_HANDLER
    )
    [problem] = problems_of(folder)
    assert "[tools[0] (bs_tool).parameters.properties.a.$ref]: " in problem
    assert "'https://example.com/a.json' does not resolve" in problem
    assert "not fetched" in problem


def test_an_alias_bomb_in_the_frontmatter_or_skill_yaml_is_refused_and_the_rest_load(
    tmp_path: Path,
) -> None:
    # Once ~3 GB and ~10 s of a service that answered nothing.
    write_skill(tmp_path, "good-one")
    laughs = write_skill(tmp_path, "laughs")
    (laughs / "SKILL.md").write_text(
        f"---\nname: laughs\n{alias_bomb()}---\nBody.\n", encoding="utf-8"
    )
    many = write_skill(tmp_path, "many", handler=BS_HANDLER)
    (many / "skill.yaml").write_text(alias_bomb(key="triggers"), encoding="utf-8")
    registry = SkillRegistry(tmp_path)
    started = time.perf_counter()
    registry.reload()
    assert time.perf_counter() - started < 2.0
    assert [s.name for s in registry.all()] == ["good-one"]
    found = {(e.skill, e.file, e.field): e.message for e in registry.errors}
    message = "&l5 expands to more than 250,000 values (YAML aliases repeat what their anchor"
    assert found["laughs", "SKILL.md", "frontmatter"].startswith(message)
    assert found["laughs", "SKILL.md", "frontmatter"].endswith("(line 8)")  # of SKILL.md
    assert found["many", "skill.yaml", ""].startswith(message)


def test_an_alias_inside_its_own_anchor_in_the_frontmatter_is_refused(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "loop")
    (folder / "SKILL.md").write_text(
        "---\nname: loop\ndescription: d\nmetadata: &m {a: *m}\n---\nBody.\n", encoding="utf-8"
    )
    [problem] = problems_of(folder)
    assert "frontmatter" in problem
    assert "an alias to &m is inside the node it names" in problem
    assert problem.endswith("(line 4)")


def test_a_schema_that_contains_itself_is_refused_and_the_rest_load(tmp_path: Path) -> None:
    # A YAML alias to an enclosing node makes the schema infinite: once, the recursion took
    # the whole reload down with it.
    write_skill(tmp_path, "good-one")
    folder = write_skill(tmp_path, "recursive", handler=BS_HANDLER)
    (folder / "skill.yaml").write_text(
        "tools:\n"
        "  - name: bs_tool\n"
        "    description: d\n"
        "    handler: 'handler:bs_tool'\n"
        "    parameters: &schema\n"
        "      type: object\n"
        "      properties:\n"
        "        child: *schema\n",
        encoding="utf-8",
    )
    registry = SkillRegistry(tmp_path)
    registry.reload()
    assert [s.name for s in registry.all()] == ["good-one"]
    [error] = registry.errors
    assert (error.file, error.field) == (
        "skill.yaml",
        "tools[0] (bs_tool).parameters.properties.child",
    )
    assert "contains itself" in error.message
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(40):  # 80 mappings deep; jsonschema gives up near 200
        deep = {"type": "object", "properties": {"x": deep}}
    write_skill(tmp_path, "recursive", config={"tools": [schema_tool(deep)]}, handler=BS_HANDLER)
    registry.reload()
    [error] = registry.errors
    assert "nests more than" in error.message


SCHEMAS_SEEN = [
    {"type": "object", "properties": {"a": {"type": "strin"}}},
    {"type": "object", "properties": {"a": {"type": "string", "required": True}}},
    {"type": "object", "properties": [], "required": "a"},
    {"type": "object", "properties": {"a": {"items": [{"type": "string"}]}}},
    {"type": "object", "properties": {"a": {"pattern": "([x", "minLength": -1}}},
    {"type": "object", "patternProperties": {"(": {}}, "dependentRequired": {"a": [1]}},
    {"type": "object", "$defs": {"a": {"$anchor": "1bad", "enum": []}}, "allOf": []},
    {"type": "object", "dependencies": {"a": 3}, "$recursiveAnchor": "x y"},
    {"type": "object", "$vocabulary": {"nope": 1}, "$id": "x#frag", "$ref": 7},
    {"type": "object", "unevaluatedProperties": {"type": 5}, "contentSchema": 1},
    {"type": "object", "if": {"const": 1}, "then": False, "else": {"format": 3}},
    {"type": "object", "properties": {"a": {"$dynamicRef": 5, "prefixItems": [1]}}},
]


def test_the_fast_meta_schema_gives_the_verdicts_of_the_validators_own() -> None:
    # Tool schemas are checked against a flattened copy of the 2020-12 meta-schema (a
    # seventh of the time): it must refuse what the runner's validator class refuses, and
    # only that, at the same places.
    from agents.skills.schemas import META, VALIDATOR

    official = VALIDATOR(VALIDATOR.META_SCHEMA, format_checker=VALIDATOR.FORMAT_CHECKER)
    root = Path(__file__).parents[2]
    configs = [*root.glob("skills/*/skill.yaml"), *FIXTURE_SKILLS.glob("*/*/skill.yaml")]
    shipped = [
        entry["parameters"]
        for config in configs
        for entry in (yamlsafe.load(config.read_text(encoding="utf-8")) or {}).get("tools", [])
        if "parameters" in entry
    ]
    assert len(shipped) > 20
    for schema in [*shipped, *SCHEMAS_SEEN]:
        ours = {str(list(e.absolute_path)) for e in META.iter_errors(schema)}
        theirs = {str(list(e.absolute_path)) for e in official.iter_errors(schema)}
        assert ours == theirs, schema
    assert all(list(official.iter_errors(s)) for s in SCHEMAS_SEEN)


def test_a_broken_tool_schema_in_an_edit_keeps_the_last_good_version(tmp_path: Path) -> None:
    good = {"type": "object", "properties": {"b": {"type": "string", "pattern": "^x"}}}
    write_skill(tmp_path, "badschema", config={"tools": [schema_tool(good)]}, handler=BS_HANDLER)
    registry = SkillRegistry(tmp_path)
    registry.reload()
    broken = {"type": "object", "properties": {"b": {"type": "string", "pattern": "^x("}}}
    write_skill(tmp_path, "badschema", config={"tools": [schema_tool(broken)]}, handler=BS_HANDLER)
    report = registry.reload()
    assert report.changed == []
    assert registry.tool("bs_tool")[1].parameters == good
    [error] = registry.errors
    assert (error.skill, error.file) == ("badschema", "skill.yaml")
    assert error.field == "tools[0] (bs_tool).parameters.properties.b.pattern"
    assert error.message.startswith("'^x(' does not compile")


def test_handler_reference_is_resolved_without_importing(tmp_path: Path) -> None:
    folder = write_skill(
        tmp_path,
        "orders",
        config={
            "tools": [
                tool("get_order", "handler:get_order"),
                tool("other", "handler:missing_fn"),
            ]
        },
        handler="import nonexistent_module_xyz\n\ndef get_order():\n    return 1\n",
    )
    [problem] = problems_of(folder)
    assert "defines no top-level function 'missing_fn'" in problem
    assert not any("nonexistent_module_xyz" in m for m in sys.modules)


def test_a_handler_that_does_not_parse_says_where_and_why(tmp_path: Path) -> None:
    folder = write_skill(
        tmp_path,
        "orders",
        config={"tools": [tool("get_order", "handler:get_order")]},
        handler="def get_order(:\n    return 1\n",
    )
    [problem] = problems_of(folder)
    assert "handler.py does not parse: " in problem
    assert "(line 1)" in problem
    missing = write_skill(tmp_path, "lookup", config={"tools": [tool("find", "lookup:find")]})
    [problem] = problems_of(missing)
    assert "lookup.py is missing; create it" in problem


def test_a_module_a_handler_imports_that_does_not_parse_is_reported_with_the_skill(
    tmp_path: Path,
) -> None:
    # Only handler modules were parsed: a broken helper loaded as the skill's last good
    # version, and every call of its tools then failed on import.
    folder = write_skill(
        tmp_path,
        "orders",
        config={"tools": [tool("get_order", "handler:get_order")]},
        handler="from .helpers import fetch\n\ndef get_order():\n    return fetch()\n",
    )
    (folder / "helpers").mkdir()
    (folder / "helpers" / "__init__.py").write_text("from .wire import fetch\n")
    (folder / "helpers" / "wire.py").write_text("def fetch(:\n    return 1\n")
    # Not imported by a handler: a script of the Agent Skills format, run by others; nor
    # when the handler is imported (inside a function, for type checkers only).
    (folder / "scripts").mkdir()
    (folder / "scripts" / "template.py").write_text("{{ placeholder }} = 1\n")
    (folder / "handler.py").write_text(
        "from typing import TYPE_CHECKING\nfrom .helpers import fetch\n"
        "if TYPE_CHECKING:\n    from .typing_only import Order\n"
        "def get_order():\n    from .later import maybe\n    return fetch()\n"
    )
    (folder / "typing_only.py").write_text("class Order(:\n")
    (folder / "later.py").write_text("def maybe(:\n")
    [problem] = problems_of(folder)
    assert "helpers/wire.py" in problem
    assert "does not parse: " in problem
    assert "(line 1)" in problem
    (folder / "helpers" / "wire.py").write_text("def fetch():\n    return 1\n")
    assert "def fetch():" in load_skill(folder).code["helpers/wire.py"]


def test_invalid_yaml_reports_line_and_column(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "broken")
    (folder / "skill.yaml").write_text("triggers: [a, b\nexamples: x\n", encoding="utf-8")
    [problem] = problems_of(folder)
    assert "skill.yaml" in problem
    assert "line" in problem


def test_registry_skips_bad_skills_and_loads_the_rest(tmp_path: Path) -> None:
    write_skill(tmp_path, "good-one")
    write_skill(tmp_path, "bad-one", frontmatter={"name": "other"})
    (tmp_path / ".hidden").mkdir()
    registry = SkillRegistry(tmp_path)
    report = registry.reload()
    assert report.added == ["good-one"]
    assert [p.skill for p in registry.errors] == ["bad-one"]
    assert [s.name for s in registry.all()] == ["good-one"]


def test_duplicate_tool_names_are_refused_naming_both(tmp_path: Path) -> None:
    handler = "def f():\n    return 1\n"
    write_skill(tmp_path, "alpha", config={"tools": [tool("lookup", "handler:f")]}, handler=handler)
    write_skill(tmp_path, "beta", config={"tools": [tool("lookup", "handler:f")]}, handler=handler)
    registry = SkillRegistry(tmp_path)
    registry.reload()
    assert registry.tool("lookup")[0].name == "alpha"
    assert "beta" not in registry
    assert "already defined by skill 'alpha'" in registry.errors[0].message


def test_a_broken_edit_keeps_the_last_good_version(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "orders", "Version one.")
    registry = SkillRegistry(tmp_path)
    registry.reload()
    (folder / "SKILL.md").write_text("---\nname: orders\ndescription: [unclosed\n---\n")
    report = registry.reload()
    assert report.errors
    assert registry.get("orders").description == "Version one."
    assert registry.errors
    write_skill(tmp_path, "orders", "Version two.")
    report = registry.reload()
    assert report.changed == ["orders"]
    assert registry.get("orders").description == "Version two."
    assert registry.errors == []


def test_removed_folder_is_dropped(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "temp-skill")
    registry = SkillRegistry(tmp_path)
    registry.reload()
    for path in sorted(folder.rglob("*"), reverse=True):
        path.unlink()
    folder.rmdir()
    assert registry.reload().removed == ["temp-skill"]
    with pytest.raises(SkillNotFound, match="no skill named 'temp-skill'"):
        registry.get("temp-skill")


def test_a_skill_asked_for_whose_folder_did_not_load_says_why(tmp_path: Path) -> None:
    # It said "no skill named ..." as for one that was never there (QA).
    write_skill(
        tmp_path,
        "orders",
        config={"tools": [tool("get_order", "handler:get_order")]},
        handler="def get_order(:\n    return 1\n",
    )
    registry = SkillRegistry(tmp_path)
    registry.reload()
    with pytest.raises(SkillNotFound) as info:
        registry.get("orders")
    message = str(info.value)
    assert message.startswith("skill 'orders' is not available: its folder did not load: ")
    assert "handler.py does not parse" in message
    assert info.value.code == "skill_not_found"


def test_unknown_skill_suggests_close_names(tmp_path: Path) -> None:
    write_skill(tmp_path, "order-query")
    registry = SkillRegistry(tmp_path)
    registry.reload()
    with pytest.raises(SkillNotFound, match="did you mean 'order-query'"):
        registry.get("order-qurey")


def test_published_skill_yaml_schema_matches_the_model() -> None:
    import json

    from agents.skills.spec import skill_yaml_schema

    published = Path(__file__).parents[2] / "agents" / "skills" / "skill.schema.json"
    assert json.loads(published.read_text(encoding="utf-8")) == skill_yaml_schema(), (
        "regenerate: python -c 'import json; from agents.skills.spec import skill_yaml_schema; "
        "print(json.dumps(skill_yaml_schema(), indent=2))' > agents/skills/skill.schema.json"
    )


def test_scaffolded_skill_validates(tmp_path: Path) -> None:
    from agents.skills.scaffold import scaffold

    folder = scaffold(tmp_path, "my-new-skill")
    skill = load_skill(folder)
    assert skill.tools[0].name == "my_new_skill_run"
    # The editor's schema hint resolves from wherever the folder is.
    first = (folder / "skill.yaml").read_text(encoding="utf-8").splitlines()[0]
    hint = first.removeprefix("# yaml-language-server: $schema=")
    assert (folder / hint).resolve().name == "skill.schema.json"
    assert (folder / hint).resolve().is_file()
    with pytest.raises(ValueError, match="not a valid skill name"):
        scaffold(tmp_path, "My Skill")
    with pytest.raises(ValueError, match="already exists"):
        scaffold(tmp_path, "my-new-skill")


def test_a_newcomer_cannot_take_over_a_live_tool(tmp_path: Path) -> None:
    handler = "def f():\n    return 1\n"
    write_skill(
        tmp_path, "z-orders", config={"tools": [tool("get_order", "handler:f")]}, handler=handler
    )
    registry = SkillRegistry(tmp_path)
    registry.reload()
    write_skill(
        tmp_path, "a-intruder", config={"tools": [tool("get_order", "handler:f")]}, handler=handler
    )
    report = registry.reload()
    assert registry.tool("get_order")[0].name == "z-orders"
    assert "a-intruder" not in registry
    assert report.added == []
    assert "already defined by skill 'z-orders'" in report.errors[0].message


def test_a_refused_duplicate_is_listed_only_while_it_is_refused(tmp_path: Path) -> None:
    import shutil

    handler = "def f():\n    return 1\n"
    counter = {"tools": [tool("counter", "handler:f")]}
    write_skill(tmp_path, "qa-ledger", config=counter, handler=handler)
    registry = SkillRegistry(tmp_path)
    registry.reload()
    write_skill(tmp_path, "dup-tool", config=counter, handler=handler)
    registry.reload()
    assert [p.skill for p in registry.errors] == ["dup-tool"]
    shutil.rmtree(tmp_path / "qa-ledger")
    assert registry.reload().added == ["dup-tool"]
    assert registry.errors == []  # serving, so no longer refused
    write_skill(tmp_path, "qa-ledger", config=counter, handler=handler)
    registry.reload()
    [problem] = registry.errors
    assert problem.skill == "qa-ledger"
    assert "already defined by skill 'dup-tool'" in problem.message
    shutil.rmtree(tmp_path / "dup-tool")
    assert registry.reload().added == ["qa-ledger"]
    assert registry.errors == []


def test_references_that_link_out_of_the_skill_are_not_listed(tmp_path: Path) -> None:
    outside = tmp_path / "system-docs"
    (outside / "deep").mkdir(parents=True)
    for i in range(50):
        (outside / "deep" / f"page-{i}.md").write_text("foreign")
    (outside / "secret.txt").write_text("do not list")
    linked = write_skill(tmp_path / "skills", "linked")
    (linked / "references").symlink_to(outside, target_is_directory=True)
    mixed = write_skill(tmp_path / "skills", "mixed", files={"references/own.md": "mine"})
    (mixed / "references" / "leak.md").symlink_to(outside / "secret.txt")
    (mixed / "references" / "docs").symlink_to(outside, target_is_directory=True)

    skill = load_skill(linked)
    assert skill.references == ()
    assert any("links outside" in w for w in skill.warnings)
    skill = load_skill(mixed)
    assert skill.references == ("references/own.md",)
    assert any("leak.md links outside" in w for w in skill.warnings)


def test_a_long_reference_list_is_capped_with_a_warning(tmp_path: Path) -> None:
    files = {f"references/doc-{i:04}.md": "x" for i in range(500)}
    skill = load_skill(write_skill(tmp_path, "many", files=files))
    assert len(skill.references) == 200
    assert any("300 of 500 references are not listed" in w for w in skill.warnings)


def test_every_fixture_skill_set_is_a_skills_folder_that_loads_cleanly() -> None:
    sets = sorted(p for p in FIXTURE_SKILLS.iterdir() if p.is_dir())
    assert [s.name for s in sets] == ["containment", "runner", "shop-floor", "storefront"]
    for folder in sets:
        registry = SkillRegistry(folder)
        report = registry.reload()
        assert registry.errors == [], folder.name
        assert report.added == sorted(p.parent.name for p in folder.glob("*/SKILL.md"))


def test_a_reload_logs_counts_and_only_the_first_few_names(tmp_path: Path) -> None:
    from structlog.testing import capture_logs

    for i in range(12):
        write_skill(tmp_path, f"skill-{i:02d}")
    with capture_logs() as logs:
        SkillRegistry(tmp_path).reload()
    [line] = [e for e in logs if e["event"] == "skills.reloaded"]
    assert (line["added"], line["changed"], line["removed"], line["total"]) == (12, 0, 0, 12)
    assert line["added_names"] == "skill-00, skill-01, skill-02, skill-03, skill-04 and 7 more"
    assert "changed_names" not in line


def test_the_body_is_read_again_only_when_skill_md_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An expert's prompt holds its skill's body every turn: read once, looked at (a stat)
    # at most once a second, read again when it changed or the skill is loaded again.
    folder = write_skill(tmp_path, "steps", body="Follow these steps.")
    skill = load_skill(folder)
    reads: list[Path] = []
    stats: list[Path] = []
    read_text, stat = Path.read_text, Path.stat

    def counted(self: Path, *args: Any, **kwargs: Any) -> str:
        reads.append(self)
        return read_text(self, *args, **kwargs)

    def looked(self: Path, *args: Any, **kwargs: Any) -> Any:
        stats.append(self)
        return stat(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted)
    monkeypatch.setattr(Path, "stat", looked)
    assert [skill.body() for _ in range(3)] == ["Follow these steps."] * 3
    assert (len(reads), len(stats)) == (1, 1)
    write_skill(tmp_path, "steps", body="Follow these other steps, slowly.")
    assert skill.body() == "Follow these steps."  # within the second: not looked at
    monkeypatch.setattr(loader, "BODY_CHECK_S", 0.0)
    assert skill.body() == "Follow these other steps, slowly."
    assert len(reads) == 2
    monkeypatch.setattr(loader, "BODY_CHECK_S", 60.0)
    write_skill(tmp_path, "steps", body="Now these.")
    assert load_skill(folder).body() == "Now these."  # a reload reads it at once


async def test_closing_the_skills_waits_for_a_reload_under_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reload runs on a thread, which a cancel of its caller (the watcher stopped) leaves
    # going: it went on past the service, logging into a closed test capture.
    service = SkillService(SkillsOptions(tmp_path / "skills", tmp_path / "data", embeddings=False))
    entered, through = threading.Event(), threading.Event()
    real = service.registry.reload

    def slow_reload() -> Any:
        entered.set()
        time.sleep(0.3)
        report = real()
        through.set()
        return report

    monkeypatch.setattr(service.registry, "reload", slow_reload)
    reloading = asyncio.create_task(service.areload())
    assert await asyncio.to_thread(entered.wait, 5)
    reloading.cancel()
    await service.aclose()
    assert through.is_set()


def test_handlers_are_imported_from_the_code_their_version_loaded_with(tmp_path: Path) -> None:
    # A broken edit keeps the last good version serving: its handlers and the siblings they
    # import come from the code it loaded with, not the files edited since; data files are
    # still found beside them.
    folder = write_skill(
        tmp_path,
        "kept-code",
        "Answers from kept code. Use it to test imports.",
        config={"tools": [tool("kept_answer", "handler:kept_answer")]},
        handler=(
            "from pathlib import Path\n"
            "from .helpers import word\n"
            "def kept_answer():\n"
            "    return word() + (Path(__file__).parent / 'data.txt').read_text()\n"
        ),
    )
    (folder / "helpers.py").write_text("def word():\n    return 'kept '\n")
    (folder / "data.txt").write_text("beside")
    skill = load_skill(folder)
    assert set(skill.code) == {"handler.py", "helpers.py"}
    (folder / "handler.py").write_text("def kept_answer(:\n")  # broken since
    (folder / "helpers.py").write_text("def word():\n    return 'edited '\n")
    module = import_handler(skill_package(skill), str(folder), "handler", skill.code)
    assert module.kept_answer() == "kept beside"
    assert module.__file__ == str(folder / "handler.py")
    assert "def kept_answer():" in inspect.getsource(module.kept_answer)  # not the edit
    # The next version's code replaces this one's (not kept for every version imported).
    (folder / "handler.py").write_text("def kept_answer():\n    return 'next'\n")
    nearer = load_skill(folder)
    module = import_handler(skill_package(nearer), str(folder), "handler", nearer.code)
    assert module.kept_answer() == "next"
    kin = skill_package(skill)[:-8]  # the skill's packages, whatever their version
    assert [p for p in _KEPT.code if p.startswith(kin)] == [skill_package(nearer)]
