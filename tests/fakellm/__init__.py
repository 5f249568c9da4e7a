"""Scripted OpenAI-compatible HTTP server for tests."""

from tests.fakellm.server import NO_REPLY_MESSAGE, FakeLLM, Reply, ScriptItem, ToolCall

__all__ = ["NO_REPLY_MESSAGE", "FakeLLM", "Reply", "ScriptItem", "ToolCall"]
