"""Token usage and cost of every model call, totalled per profile."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from time import time

import structlog
from langchain_core.messages.ai import UsageMetadata

from agents import metrics

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class UsageRecord:
    """One model call's token counts, and its cost in millionths of a US dollar (``None``
    when the model's prices are unknown)."""

    profile: str
    model: str
    input_tokens: int
    output_tokens: int
    at: float = field(default_factory=time)
    reasoning_tokens: int = 0
    cost_micro_usd: int | None = None


class UsageRecorder:
    """Keeps the recent calls and running totals; logs every call with the bound context ids."""

    def __init__(self, keep: int = 1000) -> None:
        self._lock = threading.Lock()
        self._recent: deque[UsageRecord] = deque(maxlen=keep)
        self._totals: dict[str, dict[str, int]] = {}

    def record(
        self, profile: str, model: str, usage: UsageMetadata, cost_micro_usd: int | None = None
    ) -> UsageRecord:
        """Record one call (tokens as the provider reported them, the cost as priced)."""
        reasoning = (usage.get("output_token_details") or {}).get("reasoning", 0)
        rec = UsageRecord(
            profile,
            model,
            usage["input_tokens"],
            usage["output_tokens"],
            reasoning_tokens=reasoning,
            cost_micro_usd=cost_micro_usd,
        )
        with self._lock:
            self._recent.append(rec)
            totals = self._totals.setdefault(
                profile, {"calls": 0, "input_tokens": 0, "output_tokens": 0}
            )
            for key, value in _counts(rec).items():
                totals[key] = totals.get(key, 0) + value
        counts = _counts(rec)
        del counts["calls"]
        for kind in ("input", "output", "reasoning"):
            if counts.get(f"{kind}_tokens"):
                metrics.MODEL_TOKENS.labels(profile, kind).inc(counts[f"{kind}_tokens"])
        if cost_micro_usd:
            metrics.MODEL_COST.labels(profile).inc(cost_micro_usd)
        log.info("model.usage", profile=profile, model=model, **counts)
        return rec

    @property
    def recent(self) -> list[UsageRecord]:
        """The most recent calls, oldest first."""
        with self._lock:
            return list(self._recent)

    def totals(self) -> dict[str, dict[str, int]]:
        """Calls and tokens per profile since start; reasoning tokens and the cost in
        millionths of a dollar where there were any."""
        with self._lock:
            return {name: dict(totals) for name, totals in self._totals.items()}


def _counts(rec: UsageRecord) -> dict[str, int]:
    counts = {"calls": 1, "input_tokens": rec.input_tokens, "output_tokens": rec.output_tokens}
    if rec.reasoning_tokens:
        counts["reasoning_tokens"] = rec.reasoning_tokens
    if rec.cost_micro_usd is not None:
        counts["cost_micro_usd"] = rec.cost_micro_usd
    return counts


def call_usage(message: object) -> dict[str, int]:
    """One model call's contribution to a thread's ``usage``: the call, its tokens, its
    reasoning tokens and its cost in millionths of a dollar (when they are known)."""
    usage = {"model_calls": 1}
    metadata = getattr(message, "usage_metadata", None)
    if metadata:
        for key in ("input_tokens", "output_tokens", "total_tokens"):
            usage[key] = int(metadata.get(key, 0))
        reasoning = (metadata.get("output_token_details") or {}).get("reasoning")
        if reasoning:
            usage["reasoning_tokens"] = int(reasoning)
    cost = (getattr(message, "response_metadata", None) or {}).get("cost_micro_usd")
    if isinstance(cost, int):
        usage["cost_micro_usd"] = cost
    return usage
