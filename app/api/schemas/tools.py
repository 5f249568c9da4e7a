"""The tool server over HTTP: OpenAI function definitions and invocations."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agents.echo import not_an_object


class ToolFunctionPublic(BaseModel):
    """One tool as an OpenAI function definition."""

    name: str = Field(
        description="The name to call it by; matches `^[a-zA-Z0-9_-]{1,64}$`.",
        examples=["search_skills"],
    )
    description: str = Field(description="What the tool does, for a model.")
    parameters: dict[str, Any] = Field(
        description="JSON Schema of the arguments (the strict-mode variant unless "
        "`strict=false`: every property required, optional ones nullable, free-form "
        "objects as JSON text)."
    )
    strict: bool | None = Field(None, description="True: the schema is valid for strict mode.")


class ToolPublic(BaseModel):
    """One tool in OpenAI's ``tools`` format."""

    type: Literal["function"]
    function: ToolFunctionPublic


class ToolsPublic(BaseModel):
    """The tools to hand a model: the meta-tools, the workflow tools, every skill tool."""

    tools: list[ToolPublic]


class ToolInvokeRequest(BaseModel):
    """``{"arguments": ...}``: an object, or the JSON text a model's tool call carries."""

    model_config = ConfigDict(extra="forbid")

    arguments: dict[str, Any] | str = Field(
        default_factory=dict,
        description="Per the tool's parameters (`GET /v1/tools`); nulls for optional values "
        "and JSON text for free-form objects are accepted, as strict mode sends them.",
    )

    @field_validator("arguments", mode="before")
    @classmethod
    def _an_object(cls, value: Any) -> Any:
        # Else pydantic names its union's members ("arguments.dict[str,any]: ...").
        if value is None:  # as the tool server takes it: no arguments
            return {}
        problem = None if isinstance(value, str) else not_an_object("arguments", value)
        if problem is not None:
            raise ValueError(f"{problem} (the tool's arguments by name)")
        return value
