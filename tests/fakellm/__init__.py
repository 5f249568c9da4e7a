"""Scripted OpenAI-compatible HTTP server for tests."""

from tests.fakellm.request import (
    CalledTool,
    Message,
    OfferedTool,
    RequestView,
    SkillSignature,
)
from tests.fakellm.server import (
    NO_REPLY_MESSAGE,
    Answer,
    Exchange,
    FakeLLM,
    Reply,
    ScriptItem,
    ScriptMismatch,
    ToolCall,
)

__all__ = [
    "NO_REPLY_MESSAGE",
    "Answer",
    "CalledTool",
    "Exchange",
    "FakeLLM",
    "Message",
    "OfferedTool",
    "Reply",
    "RequestView",
    "ScriptItem",
    "ScriptMismatch",
    "SkillSignature",
    "ToolCall",
]
