"""How a run ends, as the last event of its stream: finished with its answer, cancelled as
asked, or failed (a model error, a limit, a bug), counted in the metrics; and the graph's
custom stream items as events."""

from __future__ import annotations

from typing import Any

import structlog
from langchain_core.messages import AIMessage

from agents import metrics
from agents.errors import ModelError, SkilldeskError
from agents.events import ErrorRaised, Event, RouteDecided, RunFailed, RunFinished, from_custom
from agents.feed import CANCELLED
from agents.run import RunContext

log = structlog.get_logger(__name__)


def finished(ctx: RunContext, values: dict[str, Any], before: dict[str, int]) -> RunFinished:
    """The run answered: its last AI message, and what it used (``values``' usage less
    ``before``'s)."""
    history = values.get("messages", [])
    answer = next((m for m in reversed(history) if isinstance(m, AIMessage)), None)
    after = dict(values.get("usage", {}))
    used = {key: after.get(key, 0) - before.get(key, 0) for key in after}
    log.info("run.finished", route=(values.get("route") or {}).get("kind"), **used)
    metrics.TURNS.labels("finished").inc()
    return RunFinished(ctx.thread_id, ctx.run_id, answer or AIMessage(content=""), used)


def cancelled(ctx: RunContext, *, count: bool = True) -> RunFailed:
    """The run stopped as asked (counted among turns, unless ``count`` is false: the same
    ending made again for its trace)."""
    if count:
        metrics.TURNS.labels("cancelled").inc()
    return RunFailed(
        ctx.thread_id,
        ctx.run_id,
        CANCELLED,
        "The run was cancelled as asked; the steps it finished are kept in the thread.",
    )


def failed(ctx: RunContext, exc: Exception) -> RunFailed:
    """The run failed on ``exc``: said to the user by its kind, counted, logged."""
    failed = _failure(ctx, exc)
    metrics.TURNS.labels("failed").inc()
    metrics.ERRORS.labels(failed.code).inc()
    return failed


def _failure(ctx: RunContext, exc: Exception) -> RunFailed:
    if isinstance(exc, ModelError):
        log.warning("run.failed", code=exc.code, error=exc.message, detail=exc.detail)
        return RunFailed(ctx.thread_id, ctx.run_id, exc.code, exc.message, {"profile": exc.profile})
    if isinstance(exc, SkilldeskError):  # a configuration mistake (a prompt file...) or a limit
        log.error("run.failed", code=exc.code, error=str(exc))
        return RunFailed(ctx.thread_id, ctx.run_id, exc.code, str(exc))
    log.exception("run.crashed")  # a bug must fail the run, not the service or the thread
    return RunFailed(
        ctx.thread_id,
        ctx.run_id,
        "internal_error",
        f"The run stopped on an internal error ({type(exc).__name__}); "
        "the conversation so far is kept. It has been logged.",
    )


def graph_event(mode: str, payload: Any) -> Event | None:
    """The event a node wrote to the graph's custom stream (routes and errors counted), or
    None for anything else."""
    if mode == "custom" and isinstance(payload, dict):
        event = from_custom(payload)
        if isinstance(event, RouteDecided):
            metrics.ROUTES.labels(event.kind, event.by).inc()
        elif isinstance(event, ErrorRaised):
            metrics.ERRORS.labels(event.code).inc()
        return event
    return None
