"""What a skill folder may contain, as pydantic models (SKILL.md frontmatter, skill.yaml)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agents.skills.schemas import object_schema

NAME_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"
DESCRIPTION_LIMIT = 1024  # characters, in the Agent Skills specification
COMPATIBILITY_LIMIT = 500
TOOL_NAME_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$"
# The functions the service itself offers a model (prompts/tools/*.yaml): a skill's tool of
# one of these names would be shadowed by, or shadow, the service's own.
RESERVED_TOOL_NAMES = frozenset(
    {
        "call_skill_tool",
        "choose_route",
        "get_workflow_run",
        "load_skill",
        "note_skill",
        "plan_tasks",
        "read_skill_reference",
        "run_workflow",
        "search_skills",
        "workflow_inputs",
        "write_examples",
    }
)
HANDLER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"


class Frontmatter(BaseModel):
    """SKILL.md frontmatter in the Agent Skills format (unknown keys are kept, not refused)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)

    name: str = Field(
        min_length=1,
        max_length=64,
        pattern=NAME_PATTERN,
        description="Lowercase letters, digits and single hyphens; equal to the folder name.",
    )
    # The spec's length limits (DESCRIPTION_LIMIT, COMPATIBILITY_LIMIT) are checked by the
    # loader: a skill over them loads with a warning, as other hosts load it.
    description: str = Field(min_length=1, description="What the skill does and when to use it.")
    license: str | None = Field(None, description="License name or file.")
    compatibility: str | None = Field(None, description="Environment requirements, if any.")
    metadata: dict[str, str] = Field(default_factory=dict, description="String to string.")
    allowed_tools: str | list[str] | None = Field(
        None, alias="allowed-tools", description="Tools the skill may use (experimental field)."
    )

    @field_validator("description")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():  # it is what routing reads: a blank one is never found
            raise ValueError("is blank: say what the skill does and when to use it")
        return value

    @field_validator("metadata", mode="before")
    @classmethod
    def _stringify_metadata(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): v if isinstance(v, str) else str(v) for k, v in value.items()}
        return value


class ResultLimits(BaseModel):
    """How a tool's result is trimmed before it enters the model's context."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_chars: int = Field(4000, ge=100, le=200_000, description="Cap on the result's text.")
    max_items: int | None = Field(None, ge=1, description="Cap on the items of a list result.")
    keep_fields: tuple[str, ...] | None = Field(
        None, description="For object results (or lists of objects): the fields kept."
    )


class ToolSpec(BaseModel):
    """One function a skill offers to the model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(
        pattern=TOOL_NAME_PATTERN,
        description="Unique across all skills; none of the service's own (load_skill, ...).",
    )
    description: str = Field(min_length=1, max_length=1024, description="For the model.")

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_TOOL_NAMES:
            raise ValueError(
                f"{value!r} is the name of one of the service's own tools (offered to the "
                "model beside a skill's): give the tool another name"
            )
        return value

    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema of the arguments (an object schema).",
    )
    handler: str = Field(
        pattern=HANDLER_PATTERN,
        description="'module:function' inside the skill folder, e.g. 'handler:get_order'.",
    )
    timeout_s: float = Field(30.0, gt=0, le=600, description="Seconds before the call is cut.")
    side_effects: bool = Field(
        False,
        description="Changes the world (gets an idempotency key; may need approval). Write "
        "`false` to tell tool-server callers that it changes nothing (MCP's readOnlyHint); "
        "left out, they are told nothing.",
    )
    limits: ResultLimits | None = Field(None, description="Overrides the skill's limits.")
    destructive: bool | None = Field(
        None,
        description="For a tool not declared `side_effects: false`: whether it may destroy "
        "or overwrite something (told to tool-server callers as MCP's destructiveHint).",
    )
    idempotent: bool | None = Field(
        None,
        description="Whether calling it twice with the same arguments does no more than once "
        "(MCP's idempotentHint).",
    )
    output_schema: dict[str, Any] | None = Field(
        None,
        description="JSON Schema (type: object) of the result, for tool-server callers "
        "(MCP's outputSchema); describe the result as trimmed by the limits.",
    )

    @property
    def read_only(self) -> bool | None:
        """Whether tool-server callers are told it changes nothing (MCP's readOnlyHint):
        true only when ``side_effects: false`` is written, false with ``side_effects: true``,
        None when it is left out (the default runs it unjournaled, but claims nothing)."""
        if "side_effects" not in self.model_fields_set:
            return None
        return not self.side_effects

    # Before pydantic copies the mapping: a YAML alias that makes the schema contain itself
    # is found where it is written. Anything but a mapping is left to the type's error.
    @field_validator("parameters", "output_schema", mode="before")
    @classmethod
    def _valid_schema(cls, value: Any) -> Any:
        return object_schema(value) if isinstance(value, dict) else value


class SkillConfig(BaseModel):
    """skill.yaml: Skilldesk's machine-readable part of a skill."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    triggers: tuple[str, ...] = Field((), description="Keywords and colloquial synonyms.")
    examples: tuple[str, ...] = Field((), description="Utterances that should select the skill.")
    pinned: bool = Field(False, description="Always listed in the prompt's skill index.")
    limits: ResultLimits = Field(default_factory=ResultLimits, description="Result trimming.")
    tools: tuple[ToolSpec, ...] = Field((), description="Functions offered to the model.")
    isolation: Literal["process", "thread"] = Field(
        "process",
        description="Where the handlers run: 'process' (default), worker processes that a "
        "timeout kills and replaces, with memory and CPU limits; 'thread', inside the "
        "service (about a millisecond faster per call, for trusted code only: a handler "
        "that spins or leaks there slows everyone).",
    )
    concurrency: int = Field(
        4, ge=1, le=64, description="Calls of this skill's tools that may run at once."
    )
    memory_mb: int | None = Field(
        1024,
        ge=64,
        description="Memory a worker process may allocate (process isolation); null: no limit.",
    )

    @field_validator("triggers", "examples", mode="before")
    @classmethod
    def _strings(cls, value: Any) -> Any:
        if isinstance(value, str):
            return (value,)
        return value

    @field_validator("tools")
    @classmethod
    def _unique_tools(cls, value: tuple[ToolSpec, ...]) -> tuple[ToolSpec, ...]:
        seen: set[str] = set()
        for tool in value:
            if tool.name in seen:
                raise ValueError(f"tool name {tool.name!r} appears twice")
            seen.add(tool.name)
        return value


def is_valid_name(name: str) -> bool:
    """Whether ``name`` is a valid skill name."""
    return bool(re.match(NAME_PATTERN, name)) and len(name) <= 64


SCHEMA_PATH_NAME = "skill.schema.json"


def skill_yaml_schema() -> dict[str, Any]:
    """The JSON Schema of skill.yaml, for editors (published as agents/skills/skill.schema.json)."""
    schema = SkillConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Skilldesk skill.yaml"
    return schema
