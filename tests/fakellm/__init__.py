"""Scripted OpenAI-compatible HTTP server for tests."""

from tests.fakellm.request import (
    CalledTool,
    Message,
    OfferedTool,
    RequestView,
    SkillSignature,
)
from tests.fakellm.script import (
    Answer,
    Exchange,
    Reply,
    ScriptItem,
    ScriptMismatch,
    ToolCall,
    describe,
)
from tests.fakellm.server import NO_REPLY_MESSAGE, FakeLLM

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
    "describe",
]
