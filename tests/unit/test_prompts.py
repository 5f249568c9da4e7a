"""Text the model reads comes from prompts/: tool definitions, replies, templates."""

from __future__ import annotations

from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from agents.errors import ConfigError
from agents.prompts import DEFAULT_PROMPTS_DIR, Prompts

# The values each tool template is rendered with in the service.
TOOL_VALUES = {
    "choose_route": {"skills": ["order-query", "inventory"]},
    "note_skill": {"skills": ["leave-balance", "holiday-calendar"]},
    "plan_tasks": {"skills": ["order-query", "inventory"], "max_tasks": 6},
    "workflow_inputs": {"properties": {"device_id": {"type": "string", "description": "Id."}}},
    "run_workflow": {"workflows": [{"name": "triage", "summary": "Sorts a ticket", "inputs": ""}]},
    "write_examples": {"most": 8},
}


@pytest.mark.parametrize(
    "name", sorted(p.stem for p in (DEFAULT_PROMPTS_DIR / "tools").glob("*.yaml"))
)
def test_every_tool_file_is_a_function_with_a_valid_schema(name: str) -> None:
    tool = Prompts().tool(name, **TOOL_VALUES.get(name, {}))
    assert tool["name"] == name
    assert tool["description"].strip()
    Draft202012Validator.check_schema(tool["parameters"])
    for field, schema in tool["parameters"]["properties"].items():
        assert isinstance(schema, dict), f"{name}.{field} is not a schema: {schema!r}"
        assert schema.get("description") or schema.get("items"), f"{name}.{field} is undescribed"


def test_tool_values_fill_the_schema_and_copies_are_independent() -> None:
    prompts = Prompts()
    tool = prompts.tool("choose_route", skills=["a", "b"])
    assert tool["parameters"]["properties"]["skill"]["enum"] == ["a", "b", "none"]
    tool["parameters"]["properties"]["skill"]["enum"].append("planted")
    again = prompts.tool("choose_route", skills=["a", "b"])
    assert again["parameters"]["properties"]["skill"]["enum"] == ["a", "b", "none"]
    plan = prompts.tool("plan_tasks", skills=["x"], max_tasks=3)["parameters"]
    assert plan["properties"]["tasks"]["maxItems"] == 3
    assert plan["properties"]["tasks"]["items"]["properties"]["skill"]["enum"] == ["x"]


def test_replies_render_with_their_values() -> None:
    prompts = Prompts()
    tasks = [
        {"skill": "a", "status": "done", "result": "shipped", "error": None},
        {"skill": "b", "status": "failed", "result": None, "error": "timeout"},
    ]
    assert prompts.reply("tasks_summary", tasks=tasks) == "- a: shipped\n- b: failed (timeout)"
    assert "3 rounds" in prompts.reply("max_rounds", rounds=3)
    assert prompts.reply("unknown_skill", name="nope") == "There is no skill named 'nope' here."


def test_a_missing_value_or_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="rounds"):
        Prompts().reply("max_rounds")
    with pytest.raises(ConfigError, match="no reply 'nope'"):
        Prompts().reply("nope")
    with pytest.raises(ConfigError, match=r"tools/nope\.yaml is missing"):
        Prompts().tool("nope")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "bad.yaml").write_text("name: bad\ndescription: no parameters\n")
    with pytest.raises(ConfigError, match="lacks parameters"):
        Prompts(tmp_path).tool("bad")


def test_no_text_the_model_reads_is_left_in_python() -> None:
    """Tool descriptions and canned replies live in prompts/: none of their wording is in code."""
    code = "\n".join(p.read_text(encoding="utf-8") for p in Path("agents").rglob("*.py"))
    for phrase in (
        "Load a skill's full instructions",
        "Pick what should answer",
        "The tasks to carry out",
        "I had to stop",
        "I stopped after",
        "I could not answer this request",
        "Here is what I have so far",
    ):
        assert phrase not in code, phrase
