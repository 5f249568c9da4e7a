"""What a handler may receive besides its arguments."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ToolContext:
    """Passed to a handler function that declares a ``context`` keyword parameter.

    Attributes:
        skill: The skill's name.
        tool: The tool's name.
        skill_dir: The skill's folder (read its ``assets/`` from here).
        data_dir: A writable folder for this skill's own state, kept across restarts.
        idempotency_key: Stable for one logical call: the same on a retry or a resumed run,
            so a side-effecting handler can refuse to act twice.
        thread_id: The conversation thread, when called from one.
        run_id: The run, when called from one.
    """

    skill: str
    tool: str
    skill_dir: Path
    data_dir: Path
    idempotency_key: str
    thread_id: str | None = None
    run_id: str | None = None
