"""Results of calls decided in the catalogue, shaped as the ToolRunner shapes its own."""

from __future__ import annotations

import time
from typing import Any

from agents.skills.results import ToolResult


def ok_result(tool: str, text: str, data: Any, started: float) -> ToolResult:
    """A call that worked: the text a caller reads and the data behind it."""
    return ToolResult(tool, True, text, data, None, False, (time.perf_counter() - started) * 1000)
