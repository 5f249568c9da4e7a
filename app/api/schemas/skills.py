"""Skills over HTTP: listing, definition, search and direct tool calls."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ToolCallRequest(BaseModel):
    """Arguments of a direct tool call: ``{"arguments": {...}}`` and nothing else."""

    model_config = ConfigDict(extra="forbid")

    arguments: dict[str, Any] = Field(
        default_factory=dict,
        description="Per the tool's JSON Schema (`GET /v1/skills/{name}` gives it).",
    )


class SkillBase(BaseModel):
    """What names and describes a skill."""

    name: str = Field(description="The skill's name (its folder's name).", examples=["inventory"])
    description: str = Field(description="What the skill does and when to use it.")


class SkillPublic(SkillBase):
    """One live skill, as the index knows it (tier 1)."""

    pinned: bool = Field(description="Always listed in the prompt's skill index.")
    instruction_only: bool = Field(description="No tools: the model follows its instructions.")
    tools: list[str] = Field(description="Names of the skill's tools.")


class SkillProblemPublic(BaseModel):
    """Why a skill folder failed to load (it is skipped; the others serve)."""

    skill: str = Field(description="The skill (folder) name.")
    file: str = Field(description="The file at fault.", examples=["SKILL.md"])
    field: str = Field(description="The field at fault, or empty.", examples=["name"])
    message: str = Field(description="What is wrong and how to fix it.")


class SkillsPublic(BaseModel):
    """Every live skill, the problems of the folders that failed to load, and what live
    skills loaded with (references left out, the Agent Skills spec's limits broken)."""

    skills: list[SkillPublic]
    errors: list[SkillProblemPublic]
    warnings: list[SkillProblemPublic] = Field(
        default_factory=list,
        description="A live skill's warnings: each names the file and what was left out.",
    )


class FunctionPublic(BaseModel):
    """A tool as OpenAI's function-calling definition describes it."""

    name: str = Field(description="The tool's name, unique across all skills.")
    description: str = Field(description="What the tool does.")
    parameters: dict[str, Any] = Field(description="JSON Schema of the tool's arguments.")


class ToolDefinitionPublic(BaseModel):
    """One tool of a skill, in OpenAI's ``tools`` format."""

    type: Literal["function"]
    function: FunctionPublic


class SkillDefinitionPublic(SkillBase):
    """A skill's full definition (tier 2): what ``load_skill`` gives a model."""

    instructions: str = Field(description="The SKILL.md body the model follows.")
    tools: list[ToolDefinitionPublic] = Field(description="The skill's tools.")
    references: list[str] = Field(
        description="Paths of its reference documents, read on demand.",
        examples=[["references/shipping.md"]],
    )
    instruction_only: bool = Field(description="No tools: the model follows its instructions.")


class SkillHitPublic(BaseModel):
    """One retrieved skill and its scores."""

    name: str = Field(description="The skill.")
    score: float = Field(description="Fused score, 0-1: what routing compares.")
    dense: float = Field(description="Embedding (cosine) similarity.")
    keyword: float = Field(description="BM25 score, normalised.")
    learned: float = Field(
        0.0, description="Cosine to the skill's closest example learned from use (0: none)."
    )


class SkillSearchPublic(BaseModel):
    """The skills that best match a query, best first."""

    query: str = Field(description="The query, as sent.")
    results: list[SkillHitPublic]
    ms: float = Field(description="Time the search took, in milliseconds.")


class ToolErrorPublic(BaseModel):
    """Why a tool call failed, readable by a person or a model."""

    code: str = Field(
        description="`invalid_arguments`, `tool_failed`, `timeout`, `busy`...",
        examples=["tool_failed"],
    )
    message: str = Field(
        description="What went wrong: `content` without its leading `error (code): ` (the "
        "same message as MCP's `structuredContent.error.message`)."
    )
    run_id: str | None = Field(
        default=None,
        description="`workflow_failed`: the workflow run that failed (`get_workflow_run` "
        "reads it); absent otherwise.",
    )
    status: str | None = Field(
        default=None, description="`workflow_failed`: the run's status (`FAILED`)."
    )


class ToolFilePublic(BaseModel):
    """A file the tool's handler made, returned with the result (a direct call has no
    thread to keep it as an attachment)."""

    name: str = Field(description="The file's name.", examples=["speech.wav"])
    media_type: str = Field(description="Its media type.", examples=["audio/wav"])
    size: int = Field(description="Its size in bytes.")
    caption: str = Field("", description="What the handler said it is, if anything.")
    data: str = Field(description="The file's bytes, base64.")


class ToolResultPublic(BaseModel):
    """The outcome of one tool call; a failed tool is a 200 with ``ok: false``."""

    tool: str = Field(description="The tool called.")
    ok: bool = Field(description="Whether the tool succeeded.")
    result: Any = Field(description="The tool's result (trimmed to its limits); null if it failed.")
    content: str = Field(description="The result or the error as the text a model reads.")
    error: ToolErrorPublic | None = Field(description="Why it failed; null if it succeeded.")
    truncated: bool = Field(description="The result was trimmed to the tool's declared limits.")
    ms: float = Field(description="Time the call took, in milliseconds.")
    files: list[ToolFilePublic] = Field(
        default_factory=list,
        description="The files the handler made (the result names each under `files`), "
        "16 MB at most in all.",
    )
