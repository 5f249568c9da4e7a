"""The workflow language: a YAML file as pydantic models (published as workflow.schema.json).

```yaml
name: equipment-maintenance
version: 1
description: Alarms, readings, knowledge, diagnosis, work order, approval, notification.
intent: {keywords: [maintenance, repair], examples: ["CNC-001 is down, get it repaired"]}
inputs:
  device_id: {type: string, pattern: "\\b([A-Z]{2,5}-\\d{2,4})\\b", description: The machine.}
nodes:
  - {id: alarms, kind: tool, tool: list_alarms, arguments: {device_id: "{{ inputs.device_id }}"}}
  - {id: approve, kind: approval, summary: "Open a work order for {{ inputs.device_id }}?"}
outputs:
  message: "Done: {{ nodes.alarms.output | length }} alarms."
```

Nodes run in the listed order unless ``edges`` (or a node's ``next``) say otherwise. A switch,
an approval's reject branch and ``on_error: {goto: node}`` add their own edges; a ``join``
waits for every node with an edge into it.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agents.skills.schemas import object_schema

NAME_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"
# Node ids and input names are identifiers, so templates reach them as nodes.<id>.output.
ID_PATTERN = r"^[a-z_][a-z0-9_]*$"
# Names templates see besides inputs and nodes.
TEMPLATE_GLOBALS = ("inputs", "nodes", "run")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Intent(_Strict):
    """How the router recognises a message that asks for this workflow."""

    keywords: tuple[str, ...] = Field((), description="Words or phrases that name the procedure.")
    examples: tuple[str, ...] = Field((), description="Messages that should start it.")


class InputSpec(_Strict):
    """One input of a workflow, and how it is taken from a chat message."""

    type: Literal["string", "number", "integer", "boolean"] = Field("string")
    description: str = Field("", description="What the value is; the model reads it.")
    required: bool = Field(True, description="A run cannot start without it (or its default).")
    default: Any = Field(None, description="The value when none is given.")
    enum: tuple[Any, ...] | None = Field(None, description="The values allowed.")
    pattern: str | None = Field(
        None,
        description="A regular expression that finds the value in the message (its first "
        "group, or the whole match).",
    )
    extract: Literal["pattern", "model", "none"] | None = Field(
        None,
        description="How a chat message gives the value: by `pattern`, by the `model` "
        "(function calling with this input's schema), or `none` (asked for). Default: "
        "pattern when one is set, else model.",
    )

    @model_validator(mode="before")
    @classmethod
    def _default_as_given(cls, data: Any) -> Any:
        """A default is read as a value given for the input is (``inputs.convert``): of its
        type, one of its ``enum``; it is used as it is, with no check at a run's start."""
        if not isinstance(data, dict) or data.get("default") is None:
            return data
        kind, enum = data.get("type", "string"), data.get("enum")
        if kind not in ("string", "number", "integer", "boolean") or not isinstance(
            enum, list | tuple | None
        ):
            return data  # the field's own check says what is wrong
        from agents.workflows.inputs import convert  # which reads this module

        declared = SimpleNamespace(type=kind, enum=tuple(enum) if enum is not None else None)
        try:
            return {**data, "default": convert(declared, data["default"])}  # type: ignore[arg-type]
        except ValueError as exc:
            raise ValueError(f"default {data['default']!r} {exc}") from None

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"is not a valid regular expression: {exc}") from None
        return value

    @property
    def how(self) -> str:
        """How a chat message gives the value: pattern, model or none."""
        return self.extract or ("pattern" if self.pattern else "model")


class Retry(_Strict):
    """How often a failed node is tried again."""

    attempts: int = Field(1, ge=1, le=10, description="Tries in all (1: no retry).")
    backoff_s: float = Field(0.5, ge=0, le=60, description="Wait before the second try; doubles.")


class GoTo(_Strict):
    """Continue at another node."""

    goto: str = Field(pattern=ID_PATTERN)


OnError = Literal["fail", "continue"] | GoTo


class NodeBase(_Strict):
    """What every node may set."""

    id: str = Field(pattern=ID_PATTERN, description="Unique in the workflow; templates use it.")
    label: str = Field("", description="A short human name (graphs, events).")
    next: str | list[str] | None = Field(
        None, description="The node(s) after this one (instead of `edges`)."
    )
    retry: Retry = Field(default_factory=Retry)
    timeout_s: float | None = Field(None, gt=0, le=3600, description="Cut the node after this.")
    on_error: OnError = Field(
        "fail",
        description="fail the run; continue with `default` as the output; or {goto: node}.",
    )
    default: Any = Field(None, description="The output when `on_error: continue` applies.")
    max_visits: int = Field(
        1, ge=1, le=100, description="How often the node may run in one run (loops need > 1)."
    )

    @property
    def successors(self) -> list[str]:
        """The nodes ``next`` names."""
        if self.next is None:
            return []
        return [self.next] if isinstance(self.next, str) else list(self.next)

    def branches(self) -> list[str]:
        """Nodes this one may jump to besides its successors (switch cases, reject, goto)."""
        return [self.on_error.goto] if isinstance(self.on_error, GoTo) else []

    def templates(self) -> list[tuple[str, str]]:
        """Each template of the node: (field, text)."""
        return []


def _templates(field: str, value: Any) -> list[tuple[str, str]]:
    """Every string inside ``value`` (a template, possibly), with its dotted field."""
    if isinstance(value, str):
        return [(field, value)]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in _templates(f"{field}.{k}", v)]
    if isinstance(value, list | tuple):
        return [t for i, v in enumerate(value) for t in _templates(f"{field}.{i}", v)]
    return []


class ToolNode(NodeBase):
    """Call one skill tool: validated, trimmed and idempotent as inside experts."""

    kind: Literal["tool"]
    tool: str = Field(description="The tool's name (unique across installed skills).")
    arguments: dict[str, Any] = Field(
        default_factory=dict, description="Its arguments; strings are templates."
    )

    def templates(self) -> list[tuple[str, str]]:
        return _templates("arguments", self.arguments)


class ExpertNode(NodeBase):
    """A model reasoning with one skill (its instructions and tools) on a task."""

    kind: Literal["expert"]
    skill: str = Field(description="The installed skill the expert works with.")
    prompt: str = Field(description="The task, a template.")
    model: str | None = Field(None, description="The model profile (default: the default one).")

    def templates(self) -> list[tuple[str, str]]:
        return [("prompt", self.prompt)]


class LlmNode(NodeBase):
    """One model call with a prompt template; structured output when ``schema`` is set."""

    kind: Literal["llm"]
    prompt: str = Field(description="The user message, a template.")
    system: str = Field("", description="The system prompt, a template.")
    output_schema: dict[str, Any] | None = Field(
        None,
        alias="schema",
        description="A JSON Schema (an object): the output is the object the model fills.",
    )
    model: str | None = Field(None, description="The model profile (default: the default one).")

    # Checked as a skill's tool schemas are: one whose pattern Python cannot compile or whose
    # $ref resolves nowhere would fail every run at this node.
    @field_validator("output_schema", mode="before")
    @classmethod
    def _valid_schema(cls, value: Any) -> Any:
        return object_schema(value) if isinstance(value, dict) else value

    def templates(self) -> list[tuple[str, str]]:
        return [("prompt", self.prompt), ("system", self.system)]


class Case(_Strict):
    """One branch of a switch."""

    when: str = Field(description="A condition: a Jinja expression, e.g. inputs.amount < 100.")
    goto: str = Field(pattern=ID_PATTERN)


class SwitchNode(NodeBase):
    """Go to the first case whose condition holds, else to ``default_goto``."""

    kind: Literal["switch"]
    cases: tuple[Case, ...] = Field(min_length=1)
    otherwise: str | None = Field(
        None, pattern=ID_PATTERN, description="The node when no case holds (else: the end)."
    )

    def branches(self) -> list[str]:
        out = [c.goto for c in self.cases] + super().branches()
        return out + ([self.otherwise] if self.otherwise else [])

    def templates(self) -> list[tuple[str, str]]:
        return [(f"cases.{i}.when", "{{ " + c.when + " }}") for i, c in enumerate(self.cases)]


class ApprovalNode(NodeBase):
    """Wait for a person to approve; the run pauses (across restarts) until it is decided."""

    kind: Literal["approval"]
    summary: str = Field(description="What is to be approved, a template.")
    data: dict[str, Any] = Field(
        default_factory=dict, description="The data behind it, shown to the approver."
    )
    on_reject: str | None = Field(
        None, pattern=ID_PATTERN, description="The node after a rejection (else: the run ends)."
    )

    def branches(self) -> list[str]:
        return super().branches() + ([self.on_reject] if self.on_reject else [])

    def templates(self) -> list[tuple[str, str]]:
        return [("summary", self.summary), *_templates("data", self.data)]


class Webhook(_Strict):
    """A POST of the notification as JSON, retried."""

    url: str = Field(description="http(s) URL; a template.")
    headers: dict[str, str] = Field(default_factory=dict)
    attempts: int = Field(3, ge=1, le=10)


class NotifyNode(NodeBase):
    """Tell someone: a log line, and a webhook POST when ``webhook`` is set."""

    kind: Literal["notify"]
    message: str = Field(description="The notification, a template.")
    channel: str = Field("log", description="Who it is for (a name in the log line).")
    webhook: Webhook | None = None

    def templates(self) -> list[tuple[str, str]]:
        out = [("message", self.message)]
        return out + ([("webhook.url", self.webhook.url)] if self.webhook else [])


class WorkflowNode(NodeBase):
    """Run another workflow to its end; its outputs are this node's output."""

    kind: Literal["workflow"]
    workflow: str = Field(pattern=NAME_PATTERN)
    inputs: dict[str, Any] = Field(default_factory=dict, description="Strings are templates.")

    def templates(self) -> list[tuple[str, str]]:
        return _templates("inputs", self.inputs)


class SetNode(NodeBase):
    """Compute values from earlier outputs (a small transform); the mapping is the output."""

    kind: Literal["set"]
    values: dict[str, Any] = Field(description="Name → value; strings are templates.")

    def templates(self) -> list[tuple[str, str]]:
        return _templates("values", self.values)


class JoinNode(NodeBase):
    """Wait for every branch with an edge into it; its output maps each to its output."""

    kind: Literal["join"]


Node = Annotated[
    ToolNode
    | ExpertNode
    | LlmNode
    | SwitchNode
    | ApprovalNode
    | NotifyNode
    | WorkflowNode
    | SetNode
    | JoinNode,
    Field(discriminator="kind"),
]
NODE_KINDS = ("tool", "expert", "llm", "switch", "approval", "notify", "workflow", "set", "join")
# Each kind's model, for tools that work per kind (the validator's hints, the engine's executors).
NODE_TYPES: dict[str, type[NodeBase]] = {
    "tool": ToolNode,
    "expert": ExpertNode,
    "llm": LlmNode,
    "switch": SwitchNode,
    "approval": ApprovalNode,
    "notify": NotifyNode,
    "workflow": WorkflowNode,
    "set": SetNode,
    "join": JoinNode,
}


class Edge(_Strict):
    """One edge of the graph."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    source: str = Field(alias="from", pattern=ID_PATTERN)
    target: str = Field(alias="to", pattern=ID_PATTERN)


class WorkflowSpec(_Strict):
    """One workflow file."""

    name: str = Field(pattern=NAME_PATTERN, max_length=64, description="Unique; how it is run.")
    version: int | str = Field(1, description="Shown in execution records.")
    description: str = Field(min_length=1, max_length=1024, description="What it does.")
    intent: Intent = Field(default_factory=Intent)
    inputs: dict[str, InputSpec] = Field(default_factory=dict)
    nodes: tuple[Node, ...] = Field(min_length=1)
    edges: tuple[Edge, ...] | None = Field(
        None, description="The graph; omitted: the nodes run in the listed order."
    )
    outputs: dict[str, str] = Field(
        default_factory=dict,
        description="Templates; `message` is what the user is told at the end.",
    )

    @field_validator("inputs")
    @classmethod
    def _input_names(cls, value: dict[str, InputSpec]) -> dict[str, InputSpec]:
        for name in value:
            if not re.match(ID_PATTERN, name):
                raise ValueError(f"input name {name!r} must match {ID_PATTERN}")
        return value

    def node(self, node_id: str) -> Any:
        """The node with id ``node_id``."""
        return next(n for n in self.nodes if n.id == node_id)


def workflow_schema() -> dict[str, Any]:
    """The JSON Schema of a workflow file (published as agents/workflows/workflow.schema.json)."""
    schema = WorkflowSpec.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Skilldesk workflow"
    return schema
