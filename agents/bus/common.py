"""What the bus's modules share: how long a run's keys live, the events that end a stream,
and how a run that another process ends is told (its closing event and status)."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

from agents.events import RunFailed, RunFinished, event_data, event_name
from agents.feed import RunFeed

STREAM_MAXLEN = 10_000  # events kept per run (approximately: Redis trims whole nodes)
LIVE_TTL_S = 3600  # a running run's keys, renewed at every write
POLL_S = 1.0  # a shared reader's longest block: it looks whether its process is stopping
ENDS = frozenset({"run_finished", "run_failed", "reconnect"})  # a stream's last event
NEVER_BEGAN = (
    "The service process this run waited in stopped before the run began; its message was "
    "not kept: send it again."
)


def reconnect_data(thread_id: str, run_id: str, last_event_id: int, reason: str) -> dict[str, Any]:
    """What a ``reconnect`` event says: read run ``run_id`` on at its stream's URL, after
    ``last_event_id``. ``reason``: ``shutting_down`` (this process stops; the run goes on
    elsewhere) or ``resumed`` (the run was cut off and goes on as this other run)."""
    return {
        "thread_id": thread_id,
        "run_id": run_id,
        "url": f"/v1/threads/{thread_id}/runs/{run_id}/stream",
        "last_event_id": str(last_event_id),
        "reason": reason,
    }


@dataclass(frozen=True)
class SharedEvent:
    """A run's event as another process wrote it: its sequence id, type and JSON data."""

    seq: int
    type: str
    data: str


def as_text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def digest_of(asks: str) -> str:
    """A request's fingerprint, short ("" for none: a resume asks nothing)."""
    return hashlib.sha256(asks.encode()).hexdigest()[:16] if asks else ""


def closing_status(
    run_id: str,
    thread_id: str,
    stored: dict[str, Any] | None,
    seq: int,
    to: RunFeed | None,
    ended: RunFinished | RunFailed | None,
) -> tuple[dict[str, str], dict[str, Any]]:
    """The closing event (its stream fields) and the status of a run that ``resumed`` or
    ``status`` ends: ``stored``, its status so far (None: expired, a whole one is made)."""
    now = time.time()
    status = stored or {
        "id": run_id,
        "thread_id": thread_id,
        "created": now,
        "started": None,
        "answer": None,
        "cancel_requested": False,
    }
    message = "The service stopped during the run; the conversation so far is kept."
    if to is not None:
        kind = "reconnect"
        data = reconnect_data(thread_id, to.run_id, 0, "resumed")
        message += f" It went on from its last step as run {to.run_id}."
    else:
        ended = ended or RunFailed(thread_id, run_id, "run_cancelled", message)
        kind, data = event_name(ended), event_data(ended)
    if isinstance(ended, RunFinished) and to is None:
        status.update(status="succeeded", answer=ended.message.text, error=None)
    else:
        failure = ended if isinstance(ended, RunFailed) and to is None else None
        error = {"code": "run_cancelled", "message": message}
        if failure is not None:
            error = {"code": failure.code, "message": failure.message}
        status.update(status="failed", error=error)
    status.update(events=seq, ended=now, resumed_as=to.run_id if to is not None else None)
    return {"t": kind, "d": json.dumps(data, ensure_ascii=False)}, status


def failure_of(feed: RunFeed, status: dict[str, Any]) -> RunFailed:
    """How run ``feed`` ended, as its ``status`` (written by another process) says."""
    error = status.get("error") or {}
    code = str(error.get("code") or "run_cancelled")
    return RunFailed(feed.thread_id, feed.run_id, code, str(error.get("message") or NEVER_BEGAN))


def never_began(status: dict[str, Any]) -> bool:
    """Whether a run's status says it ended before it began because its process went away
    (its message was not kept: sending it again is a new run)."""
    error = status.get("error") or {}
    return (
        status.get("status") == "failed"
        and status.get("started") is None
        and status.get("resumed_as") is None  # else it goes on as another run
        and bool(status.get("process"))
        and error.get("code") == "run_cancelled"
    )
