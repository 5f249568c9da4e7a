"""What the service counts, for ``GET /metrics`` (Prometheus text format, with the
``prometheus_client`` library): turns, routes, model calls, tokens and latency by profile,
tool calls by skill, errors by code, workflow runs by status, approvals waiting, runs under
way, checkpoint writes. One registry per process; each service process is scraped on its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_SLOW = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

TURNS = Counter("skilldesk_turns", "Turns run, by how they ended.", ["outcome"], registry=REGISTRY)
ROUTES = Counter(
    "skilldesk_routes",
    "Route decisions, by kind (skill, multi, workflow, general...) and how they were made.",
    ["kind", "by"],
    registry=REGISTRY,
)
MODEL_CALLS = Counter(
    "skilldesk_model_calls",
    "Model calls by the profile that answered (or failed last) and outcome.",
    ["profile", "outcome"],
    registry=REGISTRY,
)
MODEL_TOKENS = Counter(
    "skilldesk_model_tokens",
    "Tokens by profile and kind (input, output, reasoning).",
    ["profile", "kind"],
    registry=REGISTRY,
)
MODEL_COST = Counter(
    "skilldesk_model_cost_micro_usd",
    "Cost of model calls in millionths of a US dollar, by profile (calls whose price is known).",
    ["profile"],
    registry=REGISTRY,
)
MODEL_SECONDS = Histogram(
    "skilldesk_model_call_seconds",
    "Model call time, retries and fallbacks included.",
    ["profile"],
    buckets=_SLOW,
    registry=REGISTRY,
)
MODEL_FIRST_TOKEN = Histogram(
    "skilldesk_model_first_token_seconds",
    "Time to a streamed call's first chunk.",
    ["profile"],
    buckets=_SLOW,
    registry=REGISTRY,
)
TOOL_CALLS = Counter(
    "skilldesk_tool_calls",
    "Tool calls by skill, tool and outcome (ok, or the error code).",
    ["skill", "tool", "outcome"],
    registry=REGISTRY,
)
TOOL_SECONDS = Histogram(
    "skilldesk_tool_call_seconds",
    "Tool call time by skill.",
    ["skill"],
    buckets=_SLOW,
    registry=REGISTRY,
)
ERRORS = Counter(
    "skilldesk_errors",
    "Errors by code: runs that failed, and failures a run reported and went on from.",
    ["code"],
    registry=REGISTRY,
)
WORKFLOW_RUNS = Counter(
    "skilldesk_workflow_runs",
    "Workflow runs that ended or stopped to wait, by workflow and status.",
    ["workflow", "status"],
    registry=REGISTRY,
)
APPROVALS_WAITING = Gauge(
    "skilldesk_approvals_waiting",
    "Approvals waiting for a decision, in all (every process's; counted in the database "
    "when scraped).",
    registry=REGISTRY,
)
RUNS_ACTIVE = Gauge(
    "skilldesk_runs_active", "Conversation runs under way in this process.", registry=REGISTRY
)
CHECKPOINT_WRITE_SECONDS = Histogram(
    "skilldesk_checkpoint_write_seconds",
    "Time to write one checkpoint, by store.",
    ["store"],
    buckets=_FAST,
    registry=REGISTRY,
)


@contextmanager
def timed(histogram: Histogram, *labels: str) -> Iterator[None]:
    """Observe the block's wall time in ``histogram`` (with ``labels``)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        metric = histogram.labels(*labels) if labels else histogram
        metric.observe(time.perf_counter() - started)
