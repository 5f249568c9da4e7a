"""Token usage of every model call, totalled per profile."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from time import time

import structlog
from langchain_core.messages.ai import UsageMetadata

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class UsageRecord:
    """One model call's token counts."""

    profile: str
    model: str
    input_tokens: int
    output_tokens: int
    at: float = field(default_factory=time)


class UsageRecorder:
    """Keeps the recent calls and running totals; logs every call with the bound context ids."""

    def __init__(self, keep: int = 1000) -> None:
        self._lock = threading.Lock()
        self._recent: deque[UsageRecord] = deque(maxlen=keep)
        self._totals: dict[str, tuple[int, int, int]] = {}

    def record(self, profile: str, model: str, usage: UsageMetadata) -> UsageRecord:
        """Record one call (input/output tokens as the provider reported them)."""
        rec = UsageRecord(profile, model, usage["input_tokens"], usage["output_tokens"])
        with self._lock:
            self._recent.append(rec)
            calls, tokens_in, tokens_out = self._totals.get(profile, (0, 0, 0))
            self._totals[profile] = (
                calls + 1,
                tokens_in + rec.input_tokens,
                tokens_out + rec.output_tokens,
            )
        log.info(
            "model.usage",
            profile=profile,
            model=model,
            input_tokens=rec.input_tokens,
            output_tokens=rec.output_tokens,
        )
        return rec

    @property
    def recent(self) -> list[UsageRecord]:
        """The most recent calls, oldest first."""
        with self._lock:
            return list(self._recent)

    def totals(self) -> dict[str, dict[str, int]]:
        """Calls and tokens per profile since start."""
        with self._lock:
            return {
                name: {"calls": c, "input_tokens": i, "output_tokens": o}
                for name, (c, i, o) in self._totals.items()
            }


def call_usage(message: object) -> dict[str, int]:
    """One model call's contribution to a thread's ``usage``: the call and its tokens."""
    usage = {"model_calls": 1}
    metadata = getattr(message, "usage_metadata", None)
    if metadata:
        for key in ("input_tokens", "output_tokens", "total_tokens"):
            usage[key] = int(metadata.get(key, 0))
    return usage
