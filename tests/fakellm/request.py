"""A parsed view of one chat-completions request, for script callables to choose a reply from.

Like pydantic-ai's ``AgentInfo`` for ``FunctionModel``: a script reads which tools are
offered, which tool is forced, what the messages say and whether a given text (a skill's
instructions, an earlier result) is in the system prompt, never the prompt template's own
wording, so a prompt can be reworded without breaking a test.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class OfferedTool:
    """A function the request offers the model.

    Attributes:
        name: Function name.
        description: Its description ("" when absent).
        parameters: Its JSON Schema (``{}`` when absent).
    """

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True)
class CalledTool:
    """A tool call an earlier assistant message made.

    Attributes:
        id: The call's id.
        name: Function name.
        arguments: The arguments as sent (a JSON text, possibly malformed).
    """

    id: str
    name: str
    arguments: str

    @property
    def args(self) -> Any:
        """The arguments decoded from JSON, or None when they are not valid JSON."""
        try:
            return json.loads(self.arguments)
        except ValueError:
            return None


@dataclass(frozen=True)
class Message:
    """One message of the request.

    Attributes:
        role: "system", "user", "assistant", "tool"…
        text: The text content (text parts of a list content joined; "" when none).
        tool_calls: The tool calls of an assistant message.
        tool_call_id: For a tool result, the call it answers.
        tool_name: For a tool result, the name of the tool that was called (from the
            assistant message that made the call, else the message's own ``name``).
    """

    role: str
    text: str
    tool_calls: tuple[CalledTool, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None

    @property
    def is_tool_result(self) -> bool:
        """Whether this message carries a tool's result."""
        return self.role == "tool"


@dataclass(frozen=True)
class SkillSignature:
    """What a scripted model can recognise a skill by: its name, its own instructions
    (the SKILL.md body) and the names of its tools. ``tests.skillkit.signature`` reads one
    from a skill folder."""

    name: str
    instructions: str
    tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class RequestView:
    """The parsed view of one chat-completions request.

    Attributes:
        body: The raw JSON body, for tests about the wire format.
        model: The requested model name.
        system: The text of the system messages, joined by blank lines.
        tools: The offered tools, in order.
        forced_tool: The function named by ``tool_choice``, if the request forces one.
        messages: Every message, system messages included, in order.
        stream: Whether a streamed answer was asked for.
    """

    body: Mapping[str, Any]
    model: str
    system: str
    tools: tuple[OfferedTool, ...]
    forced_tool: str | None
    messages: tuple[Message, ...]
    stream: bool

    @classmethod
    def parse(cls, body: Mapping[str, Any]) -> RequestView:
        """Build the view of ``body``; a malformed part is read as empty, never an error."""
        messages = _messages(body.get("messages"))
        return cls(
            body=body,
            model=str(body.get("model") or ""),
            system="\n\n".join(m.text for m in messages if m.role in ("system", "developer")),
            tools=_tools(body.get("tools")),
            forced_tool=_forced(body.get("tool_choice")),
            messages=messages,
            stream=bool(body.get("stream")),
        )

    @property
    def tool_names(self) -> frozenset[str]:
        """Names of the offered tools."""
        return frozenset(t.name for t in self.tools)

    def offers(self, *names: str) -> bool:
        """Whether every one of ``names`` is offered (and at least one tool when none given)."""
        return set(names) <= self.tool_names if names else bool(self.tools)

    def tool(self, name: str) -> OfferedTool:
        """The offered tool called ``name`` (KeyError naming the offered ones if absent)."""
        for offered in self.tools:
            if offered.name == name:
                return offered
        raise KeyError(f"tool {name!r} is not offered; offered: {sorted(self.tool_names)}")

    def system_contains(self, text: str) -> bool:
        """Whether ``text`` (a skill's instructions, an earlier result…) is in the system
        prompt."""
        return text.strip() in self.system

    def holds(self, skill: SkillSignature) -> bool:
        """Whether the request works with ``skill``: its instructions are in the system
        prompt and all its tools are offered."""
        return self.system_contains(skill.instructions) and self.offers(*skill.tools)

    def skills(self, candidates: Iterable[SkillSignature]) -> list[str]:
        """Names of the ``candidates`` this request holds, in their order."""
        return [s.name for s in candidates if self.holds(s)]

    @property
    def last(self) -> Message | None:
        """The last message, if any."""
        return self.messages[-1] if self.messages else None

    @property
    def last_user(self) -> str:
        """The text of the last user message ("" when there is none)."""
        return next((m.text for m in reversed(self.messages) if m.role == "user"), "")

    @property
    def turn(self) -> tuple[Message, ...]:
        """The messages after the last user message: this turn's tool calls and results."""
        for index in range(len(self.messages) - 1, -1, -1):
            if self.messages[index].role == "user":
                return self.messages[index + 1 :]
        return self.messages

    @property
    def results(self) -> tuple[Message, ...]:
        """Every tool result in the request, in order."""
        return tuple(m for m in self.messages if m.is_tool_result)

    def results_of(self, tool: str) -> tuple[Message, ...]:
        """The tool results of calls to ``tool``, in order."""
        return tuple(m for m in self.results if m.tool_name == tool)

    def describe(self, width: int = 80) -> str:
        """One line naming the request: the forced or offered tools and the last message."""
        last = self.last
        said = "no messages"
        if last is not None:
            text = last.text or ", ".join(f"{c.name}(…)" for c in last.tool_calls)
            said = f"last {last.role} message {_clip(text, width)!r}"
        if self.forced_tool:
            return f"forcing {self.forced_tool}, {said}"
        offered = ", ".join(sorted(self.tool_names)) or "none"
        return f"{said}, tools offered: {offered}"


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text") or "") for p in content if isinstance(p, dict) and "text" in p
        )
    return ""


def _calls(raw: Any) -> tuple[CalledTool, ...]:
    calls = []
    for call in raw if isinstance(raw, list) else []:
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        if not isinstance(function, dict):
            function = {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        calls.append(CalledTool(str(call.get("id") or ""), str(function.get("name")), arguments))
    return tuple(calls)


def _messages(raw: Any) -> tuple[Message, ...]:
    names: dict[str, str] = {}
    out = []
    for message in raw if isinstance(raw, list) else []:
        if not isinstance(message, dict):
            continue
        role = str(message.get("role") or "")
        calls = _calls(message.get("tool_calls"))
        names.update((c.id, c.name) for c in calls)
        call_id = message.get("tool_call_id")
        tool_name = None
        if role == "tool":
            tool_name = names.get(str(call_id)) or message.get("name")
        out.append(
            Message(
                role=role,
                text=_text(message.get("content")),
                tool_calls=calls,
                tool_call_id=None if call_id is None else str(call_id),
                tool_name=None if tool_name is None else str(tool_name),
            )
        )
    return tuple(out)


def _tools(raw: Any) -> tuple[OfferedTool, ...]:
    tools = []
    for entry in raw if isinstance(raw, list) else []:
        function = entry.get("function") if isinstance(entry, dict) else None
        if isinstance(function, dict) and function.get("name"):
            tools.append(
                OfferedTool(
                    name=str(function["name"]),
                    description=str(function.get("description") or ""),
                    parameters=function.get("parameters") or {},
                )
            )
    return tuple(tools)


def _forced(choice: Any) -> str | None:
    if isinstance(choice, dict):
        function = choice.get("function")
        if isinstance(function, dict) and function.get("name"):
            return str(function["name"])
    return None
